"""The poller's Prometheus metrics (one registry per process; no per-object or per-runtime
labels: every label has a small fixed set of values). See docs/poller.md."""

from __future__ import annotations

import prometheus_client as prom

OUTCOMES = ("ok", "listener-failed", "listener-refused", "apiserver-failed", "gone",
            "aborted", "skipped-backoff", "skipped-busy")
KINDS = ("interval", "resync")
DIFF_TYPES = ("missing", "changed", "deleted")
SENT_OUTCOMES = ("persisted", "duplicate", "stale", "refused", "unknown")
CALLS = ("state", "changes")
UNINTERPRETABLE = ("key", "resourceVersion", "observedAt")


class Metrics:
    def __init__(self) -> None:
        self.registry = prom.CollectorRegistry(auto_describe=True)
        r = self.registry
        self.runs = prom.Counter("tether_poller_runs", "Poll runs by kind and outcome",
                                 ["kind", "outcome"], registry=r)
        self.run_seconds = prom.Histogram(
            "tether_poller_run_duration_seconds", "Duration of poll runs that did work", ["kind"],
            buckets=(0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600), registry=r)
        self.scanned = prom.Counter("tether_poller_objects_scanned",
                                    "ConfigMaps listed and compared", registry=r)
        self.last_scanned = prom.Gauge("tether_poller_last_run_objects",
                                       "ConfigMaps listed by the last complete run", registry=r)
        self.digest_entries = prom.Gauge("tether_poller_digest_entries",
                                         "Entries of the listener's digest in the last run",
                                         registry=r)
        self.differences = prom.Counter("tether_poller_differences",
                                        "Differences found, by type", ["type"], registry=r)
        self.sent = prom.Counter("tether_poller_records_sent",
                                 "Records sent, by the listener's outcome", ["outcome"],
                                 registry=r)
        self.apiserver_requests = prom.Counter("tether_poller_apiserver_requests",
                                               "List requests to the runtime's apiserver",
                                               registry=r)
        self.listener_requests = prom.Counter("tether_poller_listener_requests",
                                              "Requests to the listener, by call", ["call"],
                                              registry=r)
        self.digest_uninterpretable = prom.Counter(
            "tether_poller_digest_uninterpretable",
            "Digest entries the poller could not interpret, by field: resourceVersion and "
            "observedAt are repaired (resent), key entries are dropped", ["field"], registry=r)
        self.list_restarts = prom.Counter("tether_poller_list_restarts",
                                          "Listings restarted after 410 Gone", registry=r)
        self.last_success = prom.Gauge("tether_poller_last_success_timestamp_seconds",
                                       "Unix time of the last successful run", registry=r)
        self.leader = prom.Gauge("tether_poller_leader",
                                 "1 while this process holds the Lease", registry=r)
        self.backoff_seconds = prom.Gauge("tether_poller_backoff_seconds",
                                          "Current delay before the next run after failures",
                                          registry=r)
        for kind in KINDS:
            self.run_seconds.labels(kind)
            for outcome in OUTCOMES:
                self.runs.labels(kind, outcome)
        for t in DIFF_TYPES:
            self.differences.labels(t)
        for o in SENT_OUTCOMES:
            self.sent.labels(o)
        for c in CALLS:
            self.listener_requests.labels(c)
        for f in UNINTERPRETABLE:
            self.digest_uninterpretable.labels(f)

    def exposition(self) -> bytes:
        return prom.generate_latest(self.registry)
