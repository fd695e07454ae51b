"""Compass metrics, on a registry of their own (built in the entry point, passed down).
Labels are bounded: states, action kinds, results, operations, error kinds; never a
runtime, tenant or Kyma name."""

from __future__ import annotations

import prometheus_client as prom

from tether.base import auditwriter
from tether.runtime import runmetrics

LATENCY_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)


class Metrics:
    def __init__(self, registry: prom.CollectorRegistry | None = None) -> None:
        self.registry = r = registry or prom.CollectorRegistry()
        self.runtimes = runmetrics.runtimes("tether_compass_runtimes", "mapping", r)
        self.actions = prom.Counter(
            "tether_compass_actions_total",
            "Reconcile actions by type and result",
            ["action", "result"],
            registry=r,
        )
        self.adoptions = prom.Counter(
            "tether_compass_adoptions_total",
            "Existing registrations met: adopted, ambiguous, "
            "secret_kept, secret_reissued, registration_off",
            ["result"],
            registry=r,
        )
        self.conflicts = prom.Counter(
            "tether_compass_runtime_conflicts_total",
            "Director runtimes kept from a Kyma CR "
            "that is not theirs: held_elsewhere (another mapping holds it), labels_mismatch "
            "(its labels name another Kyma CR), released (dropped from a mapping or left "
            "registered at teardown)",
            ["reason"],
            registry=r,
        )
        self.duplicates = prom.Gauge(
            "tether_compass_duplicate_runtime_ids",
            "Runtime IDs more than one mapping held when "
            "the last run listed them (must be 0: each extra one is released on its next "
            "Director read)",
            registry=r,
        )
        self.planned = prom.Gauge(
            "tether_compass_planned_actions",
            "Dry-run: actions the last run would have done",
            ["action"],
            registry=r,
        )
        self.director_latency = prom.Histogram(
            "tether_compass_director_request_seconds",
            "Director GraphQL request latency",
            ["operation"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.director_errors = prom.Counter(
            "tether_compass_director_errors_total",
            "Director request errors by kind",
            ["operation", "kind"],
            registry=r,
        )
        self.circuit = prom.Gauge(
            "tether_compass_director_circuit_state",
            "Director circuit breaker: 0 closed, 1 half-open, 2 open",
            registry=r,
        )
        self.run_seconds = prom.Histogram(
            "tether_compass_run_seconds",
            "Duration of a reconcile run over all Kyma CRs",
            ["kind"],
            buckets=runmetrics.RUN_SECONDS_BUCKETS,
            registry=r,
        )
        self.last_run = prom.Gauge(
            "tether_compass_last_run_timestamp_seconds",
            "End of the last completed run",
            ["kind"],
            registry=r,
        )
        self.leader = runmetrics.leader("tether_compass_leader", r)
        self.audit_lost = auditwriter.lost_counter("tether_compass_audit_lost", r)
