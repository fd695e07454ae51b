"""Prometheus metrics of the listener (names and meanings in docs/listener.md).

Labels are bounded: routes are URL rules (``/v1/runtimes/<runtime_id>/changes``, never a
runtime ID), reasons and outcomes are fixed code sets. Per-runtime liveness is exposed as
counts of runtimes silent longer than each configured threshold, computed at scrape time
from the heartbeat Leases in the KCP (cached briefly), so every replica reports the same
cluster-wide numbers: alert on ``max`` over replicas.

With several gunicorn workers, set ``PROMETHEUS_MULTIPROC_DIR`` (an empty folder per pod):
counters and histograms are then shared through files and ``/metrics`` aggregates them
(``tether.base.ops.Exposition``, which also adds ``listener.fleet.silent`` at scrape time).
The janitor's metrics: ``listener.janitor.metrics``.
"""

from __future__ import annotations

import logging

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from tether.base import auditwriter
from tether.wire import delivery

log = logging.getLogger(__name__)
NS = "tether_listener"
LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self._requests(self.registry)
        self._storage(self.registry)
        self._limits(self.registry)
        self._deliveries(self.registry)

    def _requests(self, r: CollectorRegistry) -> None:
        """Requests, and callers refused by who they are or by their bodies."""
        self.requests = Counter(
            f"{NS}_requests",
            "HTTP requests by route, method and status code",
            ["route", "method", "code"],
            registry=r,
        )
        self.request_seconds = Histogram(
            f"{NS}_request_seconds",
            "HTTP request duration by route",
            ["route"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.auth_refusals = Counter(
            f"{NS}_auth_refusals", "Refused callers by reason", ["reason"], registry=r
        )
        self.auth_refusals_attributed = Counter(
            f"{NS}_auth_refusals_attributed",
            "Refusals of a verified certificate counted against the runtime its CN names "
            "(its RuntimeDelivery), by reason",
            ["reason"],
            registry=r,
        )
        self.tls_refusals = Counter(
            f"{NS}_tls_handshake_refusals",
            "TLS handshakes refused (invalid client certificate) by reason",
            ["reason"],
            registry=r,
        )
        self.validation_failures = Counter(
            f"{NS}_validation_failures", "Refused request bodies by reason", ["reason"], registry=r
        )
        self.watch_refusals = Counter(
            f"{NS}_watch_refusals",
            "Records refused by the Watches (403) by reason",
            ["reason"],
            registry=r,
        )
        self.rate_limited = Counter(
            f"{NS}_rate_limited", "Requests answered 429 by limit", ["limit"], registry=r
        )

    def _storage(self, r: CollectorRegistry) -> None:
        """Records persisted, and the state summaries beside them."""
        self.records = Counter(
            f"{NS}_records", "Change records by outcome", ["outcome"], registry=r
        )
        self.persist_seconds = Histogram(
            f"{NS}_persist_seconds",
            "Time to persist one record in the KCP (read, compare, write)",
            ["outcome"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.write_conflicts = Counter(
            f"{NS}_write_conflicts",
            "Writes refused by optimistic concurrency (409) or on a "
            "vanished object (404), then retried after a fresh read; "
            "path create: a create without a read found the key "
            "stored",
            ["path"],
            registry=r,
        )
        self.summary_corrections = Counter(
            f"{NS}_state_summary_corrections",
            "Buckets of a RuntimeStateSummary corrected "
            "from a listing of their records (a merge was lost, or raced the listing)",
            registry=r,
        )
        self.summary_flush_errors = Counter(
            f"{NS}_state_summary_flush_errors",
            "Merges into a RuntimeStateSummary that "
            "failed (kept for the next merge unless rejected)",
            registry=r,
        )
        self.summary_dropped = Counter(
            f"{NS}_state_summary_dropped",
            "Bucket changes not kept: the worker holds "
            "its maximum of pending changes (the buckets heal when listed)",
            registry=r,
        )

    def _limits(self, r: CollectorRegistry) -> None:
        """What a limit refused: connections, parse memory, the storage quota, the KCP."""
        self.connection_refusals = Counter(
            f"{NS}_connection_refusals",
            "Connections closed by a limit before a request was served, by reason "
            "(connection_cap, peer_connection_cap, handshake_timeout, head_timeout, "
            "head_too_large, tls_refused, certificate_expired: after the handshake)",
            ["reason"],
            registry=r,
        )
        self.limits = Gauge(
            f"{NS}_limit",
            "Effective limits of one worker process (see docs/listener.md for how "
            "they add up across workers and replicas)",
            ["name"],
            multiprocess_mode="max",
            registry=r,
        )
        self.parse_wait_seconds = Histogram(
            f"{NS}_parse_budget_wait_seconds",
            "Time a body waited for the parse memory budget",
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.quota_refusals = Counter(
            f"{NS}_quota_refusals",
            "Records refused (413) because the runtime's storage quota "
            "is reached, by limit (records, bytes)",
            ["limit"],
            registry=r,
        )
        self.quota_counts = Counter(
            f"{NS}_quota_counts",
            "Times a worker counted a runtime's stored records and bytes "
            "for the quota, by source: summary (its RuntimeStateSummary, one read) or listing "
            "(a metadata list of all its records: no usable summary)",
            ["source"],
            registry=r,
        )
        self.kcp_unavailable = Counter(
            f"{NS}_kcp_unavailable",
            "Requests answered 503 because the KCP API failed",
            ["operation"],
            registry=r,
        )
        self.outage_answers = Counter(
            f"{NS}_outage_answers",
            "Answers given from what was last read while the KCP API "
            "was unreachable, by what: identity (a Kyma CR), summary (a heartbeat answered)",
            ["what"],
            registry=r,
        )
        self.storage_namespace_missing = Counter(
            f"{NS}_storage_namespace_missing",
            "Records answered 503 because their Watch's "
            "storage namespace (spec.storage.namespace) does not exist",
            registry=r,
        )
        self.storage_namespace_refused = Counter(
            f"{NS}_storage_namespace_refused",
            "Records answered 503 because their Watch's "
            "storage namespace is not one of STORAGE_NAMESPACES or the KCP refused the write there "
            "(a Namespace not labelled tether.kyma-project.io/record-storage=true)",
            registry=r,
        )
        self.unbacked_evicted = Counter(
            f"{NS}_unbacked_tombstones_evicted",
            "Tombstones of keys never stored deleted, "
            "oldest first, because their runtime kept more than UNBACKED_TOMBSTONES",
            registry=r,
        )
        self.audit_lost = auditwriter.lost_counter(f"{NS}_audit_lost", r)

    def _deliveries(self, r: CollectorRegistry) -> None:
        """Delivery health (``listener.fleet.deliveries``): bounded labels, never a runtime."""
        self.records_by_source = Counter(
            f"{NS}_records_by_source",
            "Change records handled, by the sender (webhook, poller) "
            "and outcome (persisted, duplicate, stale, refused)",
            ["source", "outcome"],
            registry=r,
        )
        self.delivery_lag = Histogram(
            f"{NS}_delivery_lag_seconds",
            "Persist time minus the record's observedAt, by the "
            "sender (clock skew below 0 counts as 0)",
            ["source"],
            buckets=delivery.LAG_BOUNDS,
            registry=r,
        )
        self.delivery_flushes = Counter(
            f"{NS}_delivery_flushes",
            "Merges of a runtime's delivery counts into its "
            "RuntimeDelivery object that the KCP accepted",
            registry=r,
        )
        self.delivery_flush_errors = Counter(
            f"{NS}_delivery_flush_errors",
            "Merges into a RuntimeDelivery that failed (the "
            "counts are kept for the next one), by reason",
            ["reason"],
            registry=r,
        )
        self.delivery_dropped = Counter(
            f"{NS}_delivery_dropped",
            "Delivery events not counted because the worker already "
            "holds the counts of its maximum of runtimes",
            registry=r,
        )

    def export_limits(self, values: dict[str, float]) -> None:
        for name, value in values.items():
            self.limits.labels(name).set(value)
