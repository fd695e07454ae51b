"""What the request handlers use, built once per worker process by ``app.create_app``.

Kept on ``app.extensions[KEY]`` (no module globals): the KCP client and store, the Kyma
lookup cache, heartbeats, rate limits, metrics, the audit logger and the client CA bundle
(reloaded when its file changes, for the X-Forwarded-Client-Cert mode and /readyz).
"""

from __future__ import annotations

import dataclasses
import logging
import os
import threading

from cryptography import x509
from flask import Flask, current_app
from kubernetes import client

from common import logs
from listener import budget, digestcache, heartbeat, peer, ratelimit, runtimes, settings, store
from listener import metrics as listener_metrics
from listener import quota as listener_quota

KEY = "tether.listener"


class CABundle:
    """The client CA certificates, re-read when the file's mtime changes."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._mtime = -1.0
        self._cas: list[x509.Certificate] = []
        self.error: str | None = None

    def get(self) -> list[x509.Certificate]:
        try:
            mtime = os.stat(self.path).st_mtime
        except OSError as e:
            self.error = f"cannot read {self.path}: {e.strerror}"
            return self._cas
        with self._lock:
            if mtime != self._mtime:
                try:
                    self._cas = peer.load_ca_bundle(self.path)
                    self.error = None
                except (OSError, ValueError) as e:
                    self.error = f"cannot load {self.path}: {type(e).__name__}"
                self._mtime = mtime
            return self._cas


@dataclasses.dataclass
class Services:
    settings: settings.Settings
    api: client.ApiClient
    store: store.Store
    kymas: runtimes.KymaLRU
    beats: heartbeat.Heartbeats
    buckets: ratelimit.TokenBuckets
    in_flight: ratelimit.InFlight
    budget: budget.MemoryBudget
    metrics: listener_metrics.Metrics
    silent: listener_metrics.SilentRuntimes
    audit: logging.Logger
    cas: CABundle
    digests: digestcache.DigestSnapshots = dataclasses.field(
        default_factory=digestcache.DigestSnapshots)

    def audit_event(self, event: str, **fields: object) -> None:
        logs.audit(self.audit, event, **fields)


def build(s: settings.Settings, api: client.ApiClient) -> Services:
    beats = heartbeat.Heartbeats(api, s.namespace, s.heartbeat_interval, s.kcp_timeout)
    meters = listener_metrics.Metrics()
    return Services(
        settings=s,
        api=api,
        store=store.Store(api, s.namespace, s.kcp_timeout, s.write_cache_entries,
                          on_conflict=lambda path: meters.write_conflicts.labels(path).inc(),
                          limits=listener_quota.Limits(s.storage.quota_records, s.storage.quota_bytes),
                          quota_ttl=s.storage.quota_cache_seconds,
                          tombstone_retention=s.storage.tombstone_retention),
        kymas=runtimes.KymaLRU(api, s.namespace, s.kyma_cache_seconds, s.kcp_timeout),
        beats=beats,
        buckets=ratelimit.TokenBuckets(s.rate_per_second, s.rate_burst),
        in_flight=ratelimit.InFlight(s.max_in_flight_per_runtime),
        budget=budget.MemoryBudget(s.parse_budget_bytes),
        metrics=meters,
        silent=listener_metrics.SilentRuntimes(beats, s.silent_thresholds, s.silent_cache_seconds),
        audit=logs.audit_logger(s.audit_log),
        cas=CABundle(s.client_ca_file),
    )


def of(app: Flask | None = None) -> Services:
    svc: Services = (app or current_app).extensions[KEY]
    return svc
