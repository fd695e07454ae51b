"""What the request handlers use, built once per worker process by ``app.create_app``.

Kept on ``app.extensions[KEY]`` (no module globals): the KCP client and store, the Kyma
lookup cache, heartbeats, rate limits, metrics, the per-runtime delivery counts
(``listener.fleet.deliveries``), the audit logger, the unauthenticated refusals' counts
(``listener.edge.refusalsummary``) and the client CA bundle
(``tether.base.tlsreload``: reloaded when its file changes, for the X-Forwarded-Client-Cert mode
and /readyz).
"""

from __future__ import annotations

import dataclasses
import logging

from cryptography import x509
from flask import Flask, current_app
from prometheus_client import Counter

from listener import metrics as listener_metrics
from listener import settings
from listener.edge import budget, peer, ratelimit, refusalsummary
from listener.fleet import deliveries, heartbeat, outage, runtimes, silent, statesummary, watchlist
from listener.fleet import viewclient as view_client
from listener.storage import batch, digestcache, records, rules, store
from tether.base import auditwriter, logs, tlsreload, tracing
from tether.kube import gateway, kyma

KEY = "tether.listener"


def ca_bundle(path: str, check_interval: float = 1.0) -> tlsreload.Watched[list[x509.Certificate]]:
    """The client CA certificates, re-read when the file changes (``tether.base.tlsreload``: a
    bad new file keeps the previous certificates and shows in ``last_error``)."""
    return tlsreload.Watched(
        (path,), lambda: peer.load_ca_bundle(path), check_interval=check_interval
    )


@dataclasses.dataclass
class Services:
    settings: settings.Settings
    api: gateway.Kube
    store: store.Store
    kymas: runtimes.KymaLRU
    beats: heartbeat.Heartbeats
    epochs: heartbeat.Epochs
    buckets: ratelimit.TokenBuckets
    in_flight: ratelimit.InFlight
    budget: budget.MemoryBudget
    metrics: listener_metrics.Metrics
    silent: silent.SilentRuntimes
    audit: logging.Logger
    cas: tlsreload.Watched[list[x509.Certificate]]
    deliveries: deliveries.Deliveries
    refusals: refusalsummary.RefusalSummary  # unauthenticated refusals, audited in aggregate
    watches: watchlist.WatchList  # the Watches in the KCP namespace (what records are admitted)
    digests: digestcache.DigestSnapshots = dataclasses.field(
        default_factory=digestcache.DigestSnapshots
    )
    summaries: statesummary.Summaries | None = None  # None: tests that build Services by hand
    tracer: tracing.Tracer = tracing.OFF  # spans recorded only with an OTLP endpoint
    # state summaries as last read, answered while the KCP is unreachable (0: off)
    lastknown: outage.LastKnown = dataclasses.field(default_factory=lambda: outage.LastKnown(0))
    # a request's records of different keys persisted at once (listener.storage.batch)
    persists: batch.Pool = dataclasses.field(default_factory=lambda: batch.Pool(1))
    view: view_client.ViewClient | None = None  # the pod's view (listener.view), None: none

    def audit_event(self, event: str, **fields: object) -> None:
        logs.audit(self.audit, event, **fields)


def view_of(
    s: settings.Settings, socket_path: str | None, meters: listener_metrics.Metrics
) -> view_client.ViewClient | None:
    """The worker's client of the pod's view (None: no view), its fallbacks counted."""
    if socket_path is None or not s.view:
        return None
    fallbacks = Counter(
        "tether_listener_view_fallbacks",
        "Lookups the pod's view did not answer (read from the KCP directly) by what and reason",
        ["what", "reason"],
        registry=meters.registry,
    )
    return view_client.ViewClient(
        socket_path, s.view_timeout, lambda what, why: fallbacks.labels(what, why).inc()
    )


def build(s: settings.Settings, api: gateway.Kube, view_socket: str | None = None) -> Services:
    meters = listener_metrics.Metrics()
    view = view_of(s, view_socket, meters)
    beats = heartbeat.Heartbeats(
        api, s.heartbeat_namespace, s.heartbeat_interval, s.kcp_timeout, view=view
    )
    # a request thread never waits on the audit output: a line it cannot write is counted
    audit = logs.audit_logger(
        s.audit_log,
        on_lost=auditwriter.counting(meters.audit_lost),
        queue_lines=s.audit_queue_lines,
    )
    summaries = statesummary.Summaries(
        api,
        s.namespace,
        s.kcp_timeout,
        hooks=statesummary.Hooks(
            conflict=lambda: meters.write_conflicts.labels("summary").inc(),
            corrected=lambda n: meters.summary_corrections.inc(),
            flush_error=lambda reason: meters.summary_flush_errors.inc(),
            dropped=meters.summary_dropped.inc,
        ),
        view=view,
    )
    kymas = runtimes.KymaLRU(
        api,
        s.namespace,
        s.kyma_cache_seconds,
        s.kcp_timeout,
        stale=s.outage_cache_seconds,
        on_stale=meters.outage_answers.labels("identity").inc,
        view=view,
    )
    watches = watchlist.WatchList(api, s.namespace, s.watch_cache_seconds, s.kcp_timeout)
    kept = store.Store(
        api,
        s.namespace,
        s.kcp_timeout,
        s.write_cache_entries,
        on_conflict=lambda path: meters.write_conflicts.labels(path).inc(),
        limits=rules.Limits(s.storage.quota_records, s.storage.quota_bytes),
        quota_ttl=s.storage.quota_cache_seconds,
        quota_writers=s.storage.quota_writers,
        tombstone_retention=s.storage.tombstone_retention,
        on_written=summaries.written,
        footprint=summaries.footprint,
        on_count=lambda source: meters.quota_counts.labels(source).inc(),
        homes=watches.homes,
        owner_of=lambda rid: owner(kymas.lookup(rid)),
        on_missing=meters.storage_namespace_missing.inc,
        storage_namespaces=s.storage_namespaces or None,
        on_refused_namespace=meters.storage_namespace_refused.inc,
        unbacked_cap=s.storage.unbacked_tombstones,
        on_evicted=meters.unbacked_evicted.inc,
    )
    summaries.homes = watches.homes
    return Services(
        settings=s,
        api=api,
        store=kept,
        kymas=kymas,
        watches=watches,
        beats=beats,
        epochs=heartbeat.Epochs(beats),
        buckets=ratelimit.TokenBuckets(s.rate_per_second, s.rate_burst),
        in_flight=ratelimit.InFlight(s.max_in_flight_per_runtime),
        budget=budget.MemoryBudget(s.parse_budget_bytes),
        metrics=meters,
        silent=silent.SilentRuntimes(beats, s.silent_thresholds, s.silent_cache_seconds),
        audit=audit,
        cas=ca_bundle(s.client_ca_file),
        deliveries=deliveries.Deliveries(
            api, s.namespace, s.kcp_timeout, s.delivery_flush_seconds, meters, kept.usage
        ),
        summaries=summaries,
        refusals=refusalsummary.RefusalSummary(audit, s.refusal_audit_interval),
        tracer=tracing.from_environment("tether-listener"),
        lastknown=outage.LastKnown(s.outage_cache_seconds),
        persists=batch.Pool(s.persist_concurrency),
        view=view,
    )


def owner(kymas: list[kyma.KymaView]) -> records.Owner | None:
    """The runtime's Kyma CR as the owner of its records (None unless exactly one)."""
    return (
        records.Owner(kymas[0].namespace, kymas[0].name, kymas[0].uid) if len(kymas) == 1 else None
    )


def of(app: Flask | None = None) -> Services:
    svc: Services = (app or current_app).extensions[KEY]
    return svc
