"""Metrics of ``tether janitor`` (one process, its own registry; names and meanings in
docs/listener.md)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from listener.metrics import NS
from tether.base import auditwriter


class JanitorMetrics:
    """Metrics of ``tether janitor`` (one process, its own registry; docs/listener.md)."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.leader = Gauge(
            f"{NS}_janitor_leader", "1 while this process holds the janitor Lease", registry=r
        )
        self.runs = Counter(
            f"{NS}_janitor_runs", "Janitor runs by outcome (ok, failed)", ["outcome"], registry=r
        )
        self.run_seconds = Histogram(
            f"{NS}_janitor_run_seconds",
            "Duration of a janitor run",
            buckets=(0.1, 0.5, 1, 5, 15, 60, 300, 1800),
            registry=r,
        )
        self.last_success = Gauge(
            f"{NS}_janitor_last_success_timestamp_seconds",
            "When the last janitor run completed (Unix time)",
            registry=r,
        )
        self.tombstones_deleted = Counter(
            f"{NS}_janitor_tombstones_deleted", "Tombstones deleted after the retention", registry=r
        )
        self.legacy_records_deleted = Counter(
            f"{NS}_janitor_legacy_records_deleted",
            "Records stored before Watches deleted once their runtime holds records under Watches",
            registry=r,
        )
        self.orphan_records_deleted = Counter(
            f"{NS}_janitor_orphan_records_deleted",
            "Records deleted of runtimes whose Kyma CR is gone",
            registry=r,
        )
        self.orphan_leases_deleted = Counter(
            f"{NS}_janitor_orphan_leases_deleted",
            "Heartbeat Leases deleted of runtimes whose Kyma CR is gone",
            registry=r,
        )
        self.orphan_deliveries_deleted = Counter(
            f"{NS}_janitor_orphan_deliveries_deleted",
            "RuntimeDelivery objects deleted of runtimes whose Kyma CR is gone",
            registry=r,
        )
        self.audit_lost = auditwriter.lost_counter(f"{NS}_janitor_audit_lost", r)
        self.orphans = Gauge(
            f"{NS}_janitor_orphaned_runtimes",
            "Runtimes without a Kyma CR whose records wait for the grace period",
            registry=r,
        )
        self.errors = Counter(
            f"{NS}_janitor_errors",
            "KCP API calls of the janitor that failed, by step",
            ["step"],
            registry=r,
        )
