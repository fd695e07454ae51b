"""Metrics of ``tether canary`` (one process, its own registry; docs/canary.md). Labels are
the stage and the outcome only (two and four values), never a runtime, a name or a value."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

STAGES = ("stored", "injected")
OUTCOMES = ("ok", "timeout", "write_failed", "read_failed")
# seconds from the write to the value seen: the poll's resolution (0.5 s) up to the timeout
BUCKETS = (0.25, 0.5, 1, 2, 3, 5, 10, 20, 30, 45, 60, 120)


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.leader = Gauge(
            "tether_canary_leader", "1 while this process holds the canary Lease", registry=r
        )
        self.seconds = Histogram(
            "tether_canary_seconds",
            "Seconds from the canary ConfigMap's write in the probe runtime to its nonce "
            "seen in the KCP, by stage (stored: its record; injected: the injector's target)",
            ["stage"],
            buckets=BUCKETS,
            registry=r,
        )
        self.last_success = Gauge(
            "tether_canary_last_success_timestamp_seconds",
            "Unix time of the last probe that reached the stage (absent before the first)",
            ["stage"],
            registry=r,
        )
        self.probes = Counter(
            "tether_canary_probes",
            "Probes by stage and outcome (ok, timeout, write_failed, read_failed)",
            ["stage", "outcome"],
            registry=r,
        )
        for stage in STAGES:
            for outcome in OUTCOMES:
                self.probes.labels(stage, outcome)
        self.enabled = Gauge(
            "tether_canary_enabled",
            "1 when a probe runtime is configured (TETHER_CANARY_RUNTIME)",
            registry=r,
        )
