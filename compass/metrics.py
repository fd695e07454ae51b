"""Compass metrics, on a registry of their own (built in the entry point, passed down).
Labels are bounded: states, action kinds, results, operations, error kinds; never a
runtime, tenant or Kyma name."""

from __future__ import annotations

import prometheus_client as prom

LATENCY_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)


class Metrics:
    def __init__(self, registry: prom.CollectorRegistry | None = None) -> None:
        self.registry = registry or prom.CollectorRegistry()
        r = self.registry
        self.runtimes = prom.Gauge(
            "tether_compass_runtimes", "Kyma CRs by mapping state at the end of the last run",
            ["state"], registry=r)
        self.actions = prom.Counter(
            "tether_compass_actions_total", "Reconcile actions by type and result",
            ["action", "result"], registry=r)
        self.director_latency = prom.Histogram(
            "tether_compass_director_request_seconds", "Director GraphQL request latency",
            ["operation"], buckets=LATENCY_BUCKETS, registry=r)
        self.director_errors = prom.Counter(
            "tether_compass_director_errors_total", "Director request errors by kind",
            ["operation", "kind"], registry=r)
        self.circuit = prom.Gauge(
            "tether_compass_director_circuit_state",
            "Director circuit breaker: 0 closed, 1 half-open, 2 open", registry=r)
        self.run_seconds = prom.Histogram(
            "tether_compass_run_seconds", "Duration of a reconcile run over all Kyma CRs",
            ["kind"], buckets=(0.1, 0.5, 1, 5, 15, 60, 300, 900), registry=r)
        self.last_run = prom.Gauge(
            "tether_compass_last_run_timestamp_seconds", "End of the last completed run",
            ["kind"], registry=r)
        self.leader = prom.Gauge(
            "tether_compass_leader", "1 while this process holds the Lease", registry=r)
