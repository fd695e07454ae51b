"""The webhook's dependency bag (``Services``, as in ``listener.edge.services``): what the app
uses in one gunicorn worker: queue (or the channel to the forwarder process), metrics,
forwarder (or the forwarder process's handle), serving certificate; built once per worker
after the fork (``build``), and once in the forwarder process (``webhook.forwardproc``)."""

from __future__ import annotations

import dataclasses
import ssl
import threading
import time
from collections.abc import Callable
from typing import Any

from prometheus_client import CollectorRegistry

from tether.base import ops, tlsreload, tracing
from tether.kube import gateway
from tether.runtime import sender
from tether.wire import conversion, watches, watchset
from webhook import admission, channel, forwarder, forwardproc, keyqueue, metrics, readback, scope
from webhook import settings as settings_mod

KEY = "tether.webhook"  # app.extensions[KEY]: the worker's Services (webhook.app)
ADMISSION_SPAN = "tether.webhook.admission"


@dataclasses.dataclass
class Services:
    """What the app uses; built by ``build`` in each gunicorn worker."""

    settings: settings_mod.Settings
    # the queue in this process, or, in a gunicorn worker, the channel to the forwarder process
    queue: keyqueue.KeyQueue | channel.Sender
    metrics: metrics.Metrics
    registry: CollectorRegistry | None
    # the forwarder threads in this process, or the forwarder process (webhook.forwardproc)
    forwarder: forwarder.Forwarder | forwardproc.Handle | None = None
    serving: tlsreload.Watched[ssl.SSLContext] | None = None
    overflow_log: OverflowLog = dataclasses.field(default_factory=lambda: OverflowLog(60.0))
    _children: dict[tuple[str, str], Any] = dataclasses.field(default_factory=dict)
    tracer: tracing.Tracer = tracing.OFF  # spans recorded only with an OTLP endpoint
    watch_scope: scope.Scope | None = None  # the runtime's Watch list (None: none read)

    def in_force(self) -> tuple[watches.Watch, ...]:
        """The Watches in force here (no I/O): the runtime's Watch list, or the built-in
        Watch of the environment's scope without one (``tether.wire.conversion.in_force``)."""
        listed = None if self.watch_scope is None else self.watch_scope.current()
        return conversion.in_force(listed, self.settings.filter)

    def admit_all(
        self, req: admission.Request, chosen: tuple[watches.Watch, ...]
    ) -> keyqueue.PutResult:
        """Queue one entry per Watch; the outcome is the best of them."""
        outcomes = {self.admit(req, w) for w in chosen}
        best: tuple[keyqueue.PutResult, ...] = ("enqueued", "coalesced")
        return next((b for b in best if b in outcomes), "overflowed")

    def admit(self, req: admission.Request, watch: watches.Watch) -> keyqueue.PutResult:
        """Queue a forwarded admission's key. With spans recorded (``tether.base.tracing``) the
        admission is a span, the first of a new trace that the entry keeps; tracing off
        costs nothing here (the trace then starts at the forwarder's POST)."""
        if not self.tracer.enabled:
            return self.queue.put(admission.item_of(req, time.time(), watch=watch))
        attributes = {
            "tether.namespace": req.namespace,
            "tether.name": req.name,
            "tether.operation": req.operation,
        }
        attributes["tether.watch"] = watch.name
        span = self.tracer.start(ADMISSION_SPAN, kind="server", attributes=attributes)
        outcome = self.queue.put(admission.item_of(req, time.time(), span.context, watch))
        span.end({"tether.queue": outcome})
        return outcome

    def count(self, operation: str, outcome: str) -> None:
        """admission_requests_total{operation, outcome} += 1 (label children cached)."""
        child = self._children.get((operation, outcome))
        if child is None:
            child = self._children[(operation, outcome)] = self.metrics.admissions.labels(
                operation, outcome
            )
        child.inc()


class OverflowLog:
    """Logs queue overflow at most once per interval, with the count since the last line."""

    def __init__(self, interval: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.interval, self._clock = interval, clock
        self._last = float("-inf")
        self._count = 0
        self._lock = threading.Lock()

    def hit(self) -> int | None:
        """The count to log now, or None (not yet time)."""
        with self._lock:
            self._count += 1
            now = self._clock()
            if now - self._last < self.interval:
                return None
            self._last, count, self._count = now, self._count, 0
            return count


def build(
    s: settings_mod.Settings,
    serving: tlsreload.Watched[ssl.SSLContext] | None = None,
    handed: tuple[channel.Sender, forwardproc.Handle] | None = None,
) -> Services:
    """Queue, metrics, runtime API reader, listener client and forwarder (not started);
    the tracer (``tether.base.tracing``: off unless an OTLP endpoint is configured).
    ``handed``: a gunicorn worker's channel to the forwarder process and its handle, which
    then stand for the queue and the forwarder (the worker reads only the Watch list)."""
    registry = None if ops.multiprocess() else CollectorRegistry()
    m = metrics.build(registry)
    kube = gateway.from_kubeconfig(s.kubeconfig)
    ns, name = s.watches_configmap
    key = watchset.read_digest_key(s.digest_key_file)  # never logged
    sc = scope.Scope(
        watchset.WatchSet(kube, ns, s.watches_ttl, name=name, digest_key=key), s.watches_ttl
    )
    tracer = tracing.from_environment("tether-webhook")
    if handed is not None:
        sender_end, handle = handed
        return Services(
            s,
            sender_end,
            m,
            registry,
            handle,
            serving,
            OverflowLog(s.overflow_log_seconds),
            tracer=tracer,
            watch_scope=sc,
        )
    queue = keyqueue.KeyQueue(
        s.queue_size,
        s.forwarder.coalesce_seconds,
        s.forwarder.hot_key_seconds,
        s.forwarder.hot_key_seconds / 4,
    )
    reader = readback.Reader(kube)
    client = sender.ListenerClient(s.listener, tracer)
    fwd = forwarder.Forwarder(
        s.forwarder,
        s.runtime_id,
        queue,
        reader,
        client,
        m,
        in_force=lambda: conversion.in_force(sc.current(), s.filter),
    )
    return Services(
        s,
        queue,
        m,
        registry,
        fwd,
        serving,
        OverflowLog(s.overflow_log_seconds),
        tracer=tracer,
        watch_scope=sc,
    )
