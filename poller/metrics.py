"""The poller's Prometheus metrics (one registry per process; no per-object or per-runtime
labels: every label has a small fixed set of values). See docs/poller.md."""

from __future__ import annotations

import functools

import prometheus_client as prom

OUTCOMES = (
    "ok",
    "listener-failed",
    "listener-refused",
    "apiserver-failed",
    "gone",
    "aborted",
    "skipped-backoff",
    "skipped-busy",
)
KINDS = ("interval", "resync")
DIFF_TYPES = ("missing", "changed", "deleted")
SENT_OUTCOMES = ("persisted", "duplicate", "stale", "refused", "unknown")
CALLS = ("state", "changes", "summary")
# a Watch's pass skipped (poller.watchrun); foreign-kind: the list served another kind
PASS_WAYS = ("summary", "digest")  # a Watch's pass: in sync by its summary, or by its digest
SKIP_REASONS = ("unserved", "forbidden", "unknown", "foreign-kind")
UNINTERPRETABLE = ("key", "resourceVersion", "observedAt")


class Metrics:
    def __init__(self) -> None:
        self.registry = prom.CollectorRegistry(auto_describe=True)
        counter = functools.partial(prom.Counter, registry=self.registry)
        gauge = functools.partial(prom.Gauge, registry=self.registry)
        self.runs = counter(
            "tether_poller_runs", "Poll runs by kind and outcome", ["kind", "outcome"]
        )
        self.run_seconds = prom.Histogram(
            "tether_poller_run_duration_seconds",
            "Duration of poll runs that did work",
            ["kind"],
            buckets=(0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600),
            registry=self.registry,
        )
        self.scanned = counter("tether_poller_objects_scanned", "ConfigMaps listed and compared")
        self.last_scanned = gauge(
            "tether_poller_last_run_objects", "ConfigMaps listed by the last complete run"
        )
        self.digest_entries = gauge(
            "tether_poller_digest_entries", "Entries of the listener's digest in the last run"
        )
        self.differences = counter(
            "tether_poller_differences", "Differences found, by type", ["type"]
        )
        self.sent = counter(
            "tether_poller_records_sent", "Records sent, by the listener's outcome", ["outcome"]
        )
        self.apiserver_requests = counter(
            "tether_poller_apiserver_requests", "List requests to the runtime's apiserver"
        )
        self.listener_requests = counter(
            "tether_poller_listener_requests", "Requests to the listener, by call", ["call"]
        )
        self.buckets_listed = counter(
            "tether_poller_buckets_listed",
            "Buckets of the state summary whose hashes differed and whose digests were "
            "listed (poller.buckets)",
            [],
        )
        self.digest_uninterpretable = counter(
            "tether_poller_digest_uninterpretable",
            "Digest entries the poller could not interpret, by field: resourceVersion and "
            "observedAt are repaired (resent), key entries are dropped",
            ["field"],
        )
        self.list_restarts = counter(
            "tether_poller_list_restarts", "Listings restarted after 410 Gone"
        )
        self.went_back = counter(
            "tether_poller_history_went_back",
            "Runs whose listing came below the listener's records of the "
            "current epoch (the runtime's history went back): each "
            "claimed a new epoch",
        )
        self.watches = gauge(
            "tether_poller_watches",
            "Watches in force in the last run (poller.watchrun; the built-in Watch counts)",
        )
        self.watch_passes = counter(
            "tether_poller_watch_passes",
            "Passes of a Watch by the way they ended: summary (its summary equalled the "
            "listing: no digest read), digest (its digest read and compared)",
            ["way"],
        )
        self.watches_skipped = counter(
            "tether_poller_watches_skipped",
            "Passes of a Watch skipped, its resource not "
            "listable, by reason: unserved (404: its CRD is missing), forbidden (403), unknown "
            "(the listener holds no such Watch in force), foreign-kind (another kind served)",
            ["reason"],
        )
        self.epoch = gauge(
            "tether_poller_epoch", "The runtime's epoch the listener answered in the last run"
        )
        self.last_success = gauge(
            "tether_poller_last_success_timestamp_seconds", "Unix time of the last successful run"
        )
        self.leader = gauge("tether_poller_leader", "1 while this process holds the Lease")
        self.backoff_seconds = gauge(
            "tether_poller_backoff_seconds", "Current delay before the next run after failures"
        )
        for kind in KINDS:
            self.run_seconds.labels(kind)
            for outcome in OUTCOMES:
                self.runs.labels(kind, outcome)
        for meter, values in (
            (self.differences, DIFF_TYPES),
            (self.sent, SENT_OUTCOMES),
            (self.listener_requests, CALLS),
            (self.watches_skipped, SKIP_REASONS),
            (self.watch_passes, PASS_WAYS),
            (self.digest_uninterpretable, UNINTERPRETABLE),
        ):
            for value in values:
                meter.labels(value)

    def exposition(self) -> bytes:
        return prom.generate_latest(self.registry)
