"""Metrics of ``tether injector`` (one process, its own registry; docs/injector.md). Labels
are outcomes and Watch names, never a runtime, a key or a value."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

# what one reconcile of a runtime ended in
RESULTS = ("applied", "unchanged", "no_target", "ambiguous", "refused", "failed")


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.leader = Gauge(
            "tether_injector_leader", "1 while this process holds the injector Lease", registry=r
        )
        self.applies = Counter(
            "tether_injector_applies",
            "Reconciles of a runtime's target by "
            "result (applied, unchanged, no_target, ambiguous, refused, "
            "failed)",
            ["result"],
            registry=r,
        )
        for result in RESULTS:
            self.applies.labels(result)
        self.apply_seconds = Histogram(
            "tether_injector_apply_seconds",
            "Duration of one reconcile that applied (find, apply, status, Event)",
            buckets=(0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 10),
            registry=r,
        )
        self.runtimes = Gauge(
            "tether_injector_runtimes",
            "Runtimes with live records, per Watch with inject",
            ["watch"],
            registry=r,
        )
        self.refused = Gauge(
            "tether_injector_runtimes_refused",
            "Runtimes refused now (their "
            "records over a per-runtime bound: records, bytes, keys, "
            "keys_per_record; the target's condition names it), per Watch "
            "with inject",
            ["watch", "bound"],
            registry=r,
        )
        self.bound_reached = Gauge(
            "tether_injector_bound_reached",
            "Runtimes of a Watch not "
            "remembered since its last list (over "
            "TETHER_INJECTOR_MAX_RUNTIMES: reconciled on their changes "
            "only, not by the periodic pass)",
            ["watch"],
            registry=r,
        )
        self.read_bytes = Gauge(
            "tether_injector_read_bytes",
            "Bytes of records (their JSON "
            "size) read into memory now, of TETHER_INJECTOR_READ_BYTES",
            registry=r,
        )
        self.read_bytes_limit = Gauge(
            "tether_injector_read_bytes_limit", "TETHER_INJECTOR_READ_BYTES", registry=r
        )
        self.watches = Gauge("tether_injector_watches", "Watches with inject followed", registry=r)
        self.unsynced = Gauge(
            "tether_injector_watches_unsynced",
            "Watches with inject followed "
            "whose records have not been listed yet (unreadable: RBAC, a "
            "missing namespace, the KCP failing)",
            registry=r,
        )
        self.watches_skipped = Gauge(
            "tether_injector_watches_skipped",
            "Watches with inject not followed (over TETHER_INJECTOR_MAX_WATCHES)",
            registry=r,
        )
