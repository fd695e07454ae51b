"""Per-runtime delivery health: each worker's counts, merged into ``RuntimeDelivery`` objects.

Every record a runtime's POST hands to the store (its source, ``observedAt``, outcome) and
every refusal of an authenticated runtime's request (reason, status; 429 counts as
throttled; per reason the last refused object, when the refusal has one, and its time: see
``tether.wire.lastrefused``) go into a ``tether.wire.delivery.Delta`` per runtime in this worker's
memory: a bounded map of at most ``max_runtimes`` runtimes (events of further runtimes are counted
in ``tether_listener_delivery_dropped_total`` and otherwise lost), each delta bounded by
``tether.wire.delivery`` (a bucket per minute, the last 20 records, one last refusal per
reason).

``flush_if_due`` runs after the response was sent (``listener.edge.api`` registers it with
``Response.call_on_close``) and merges a runtime's delta into its object at most once per
``interval`` per worker: GET; 404 -> create (``delivery.body``); ``delivery.merge``; PUT of
the status subresource with the object's resourceVersion; 409 -> read and merge again (at
most ``MAX_ATTEMPTS``). Any other failure keeps the delta for the next flush (still bounded:
kept and new counts are merged into one delta) and logs one line per ``LOG_EVERY``. A
runtime that stops sending is flushed at its next request (its poller's heartbeat and state
GET come every poll interval), and every runtime at worker exit (``flush_all``).

The decisions live in ``tether.wire.delivery`` (pure); this module keeps the map and does the I/O.
"""

from __future__ import annotations

import collections
import datetime
import logging
import random
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from listener import metrics as listener_metrics
from listener.fleet import beatcounts, flushing, heartbeat
from listener.storage import quota, records
from tether.base import logs
from tether.kube import apitypes, gateway
from tether.wire import delivery, lastrefused

log = logging.getLogger(__name__)
MAX_RUNTIMES = 10_000  # runtimes with unsent counts per worker
MAX_REMEMBERED = 50_000  # last flush times kept (forgetting one only flushes it earlier)
# requests seen only (a runtime that just polls) wait this long to be merged: within the
# WINDOW_MINUTES the object keeps, so nothing is lost, and a quiet runtime costs the KCP one
# read and one write per worker in that time (listener.fleet.beatcounts holds them meanwhile)
BEATS_FLUSH_SECONDS = 3000.0
MAX_ATTEMPTS = 4
LOG_EVERY = 30.0
LABELS = {apitypes.MANAGED_BY_LABEL: records.MANAGED_BY}


def _utcnow() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


def _error_reason(e: BaseException) -> str:
    """A fixed code for a failed flush (a metric label)."""
    if isinstance(e, gateway.Forbidden):
        return "forbidden"
    if isinstance(e, gateway.NotFound):
        return "not_found"  # the CRD is not installed
    if isinstance(e, gateway.Rejected):
        return "rejected"
    if isinstance(e, gateway.Unavailable | gateway.Conflict):
        return "unavailable"
    return "other"


def combined(
    older: delivery.Delta, newer: delivery.Delta, runtime_id: str, now: datetime.datetime
) -> delivery.Delta:
    """One delta holding both (pure; bounded like any delta): the counts of a failed flush
    and those recorded meanwhile, built with ``delivery.merge`` so the bounds are its own."""
    status = delivery.merge(delivery.merge(None, older, runtime_id, now), newer, runtime_id, now)
    return delivery.Delta(
        minutes=delivery.minutes_of(status),
        recent=list(status["recent"]),
        last_change=delivery.parse(status.get("lastChangeAt")),
        stored=newer.stored if newer.stored is not None else older.stored,
        last_refused=lastrefused.from_status(status),
    )


class Deliveries:
    def __init__(
        self,
        kcp: gateway.Kube,
        namespace: str,
        timeout: float,
        interval: float,
        meters: listener_metrics.Metrics,
        usage: quota.Usage | None = None,
        *,
        max_runtimes: int = MAX_RUNTIMES,
        clock: Callable[[], float] = time.monotonic,
        now: Callable[[], datetime.datetime] = _utcnow,
    ) -> None:
        self._kcp, self._namespace, self._timeout = kcp, namespace, timeout
        self._interval, self._metrics, self._usage = interval, meters, usage
        self._max, self._clock, self._now = max_runtimes, clock, now
        self._lock = threading.Lock()
        self._pending: dict[str, delivery.Delta] = {}
        self._flushed: collections.OrderedDict[str, float] = collections.OrderedDict()
        self._busy: set[str] = set()  # being flushed by a thread of this worker
        self._beats: dict[str, beatcounts.BeatCounts] = {}  # requests seen, not merged yet
        self._last_log = -LOG_EVERY

    # -- recording (cheap: a lock and a few dict operations; also from the main loop) --------

    def _delta(self, runtime_id: str) -> delivery.Delta | None:
        d = self._pending.get(runtime_id)
        if d is None:
            if len(self._pending) >= self._max:
                self._metrics.delivery_dropped.inc()
                return None
            d = self._pending[runtime_id] = delivery.Delta()
        return d

    def record(
        self,
        runtime_id: str,
        rec: Mapping[str, Any],
        outcome: delivery.Outcome,
        reason: str = "",
        status: int = 0,
        trace_id: str = "",
    ) -> float | None:
        """One record handled (``outcome`` ``refused`` with the refusal's ``reason`` and
        ``status``; ``trace_id``: its request's trace, shown with the recent records); its
        lag in seconds (persist time minus ``observedAt``, at least 0)."""
        now = self._now()
        observed = delivery.parse(rec.get("observedAt"))
        source = "poller" if rec.get("source") == "poller" else "webhook"
        with self._lock:
            d = self._delta(runtime_id)
            if d is not None:
                d.record(
                    now,
                    source,
                    observed,
                    outcome,
                    str(rec.get("namespace", "")),
                    str(rec.get("name", "")),
                    trace_id,
                )
                if outcome == "refused":  # the record is its reason's last refused object
                    d.refuse(
                        now, reason, status, str(rec.get("namespace", "")), str(rec.get("name", ""))
                    )
        self._metrics.records_by_source.labels(source, outcome).inc()
        lag = None if observed is None else max(0.0, (now - observed).total_seconds())
        if outcome == "persisted" and lag is not None:
            self._metrics.delivery_lag.labels(source).observe(lag)
        return lag

    def refuse(self, runtime_id: str, reason: str, status: int) -> None:
        """A refused request of an authenticated runtime (429: throttled)."""
        now = self._now()
        with self._lock:
            d = self._delta(runtime_id)
            if d is not None:
                d.refuse(now, reason, status)

    def seen(self, runtime_id: str) -> None:
        """An authenticated request of the runtime (its heartbeat history). Requests alone
        are merged at most every ``BEATS_FLUSH_SECONDS`` (with anything else sooner), so a
        quiet runtime costs the KCP one merge per 50 minutes, not one per heartbeat."""
        minute = beatcounts.minute_index(self._now())
        with self._lock:
            b = self._beats.get(runtime_id)
            if b is None:
                if len(self._beats) >= self._max:
                    self._metrics.delivery_dropped.inc()
                    return
                b = self._beats[runtime_id] = beatcounts.BeatCounts(minute, self._clock())
            b.add(minute)

    def __len__(self) -> int:
        """Runtimes with counts not merged yet."""
        with self._lock:
            return len(self._pending.keys() | self._beats.keys())

    # -- flushing (I/O; never in the worker's main loop) --------------------------------------

    def _due(self, runtime_id: str, mono: float) -> bool:
        if runtime_id in self._busy:
            return False
        if runtime_id in self._pending:  # records, refusals, usage (and requests with them)
            last = self._flushed.get(runtime_id)
            return last is None or mono - last >= self._interval
        # requests seen only: merged with the next counts, or after BEATS_FLUSH_SECONDS
        beats = self._beats.get(runtime_id)
        return beats is not None and self._beats_due(beats.since, mono)

    def _beats_due(self, since: float, mono: float) -> bool:
        """Requests-only counts begun at ``since`` are merged on their own now."""
        return mono - since >= max(self._interval, BEATS_FLUSH_SECONDS)

    def _take(self, runtime_id: str, mono: float) -> delivery.Delta:
        """The runtime's counts, its requests seen folded in (under the lock)."""
        self._busy.add(runtime_id)
        self._flushed[runtime_id] = mono
        self._flushed.move_to_end(runtime_id)
        while len(self._flushed) > MAX_REMEMBERED:
            self._flushed.popitem(last=False)
        delta = self._pending.pop(runtime_id, None) or delivery.Delta()
        beats = self._beats.pop(runtime_id, None)
        for minute, n in () if beats is None else beats.minutes():
            delta.seen(minute, n)
        return delta

    def _waiting(self) -> list[str]:
        """Runtimes with counts (under the lock)."""
        return list(dict.fromkeys([*self._pending, *self._beats]))

    def _due_now(self, mono: float) -> list[str]:
        """The runtimes due (under the lock). Requests-only entries are in the order they
        began (one is removed when taken and a new one starts later), so their scan stops at
        the first that is not due instead of visiting every quiet runtime each flush."""
        due = [rid for rid in self._pending if self._due(rid, mono)]
        for rid, beats in self._beats.items():
            if not self._beats_due(beats.since, mono):
                break
            if rid not in self._pending and rid not in self._busy:
                due.append(rid)
        return due

    def flush_if_due(self, runtime_id: str) -> bool:
        """Merge the runtime's counts into its object if it has some and its last flush in
        this worker is ``interval`` ago; True when written. Never raises."""
        with self._lock:
            mono = self._clock()
            if not self._due(runtime_id, mono):
                return False
            delta = self._take(runtime_id, mono)
        return self._flush(runtime_id, delta)

    def flush_due(self) -> int:
        """Flush every runtime whose counts are due (``flush_if_due`` for each): what the
        worker's flush thread runs, so counts never wait for the runtime's next request to
        this worker; how many were written. Never raises."""
        with self._lock:
            mono = self._clock()
            due = self._due_now(mono)
        return sum(1 for rid in due if self.flush_if_due(rid))

    def start(self) -> threading.Thread:
        """A daemon thread of the worker calling ``flush_due`` every flush interval (at
        least every second): a runtime's requests spread over workers and replicas, and the
        one that holds its counts may not see it again for minutes."""
        return flushing.every(self._interval, self.flush_due, "delivery-flush")

    def flush_all(self, budget: float) -> int:
        """Flush every runtime with counts, due or not, within ``budget`` seconds (worker
        exit); how many were written."""
        deadline = self._clock() + budget
        written = 0
        with self._lock:
            waiting = self._waiting()
        for runtime_id in waiting:
            if self._clock() >= deadline:
                log.info(
                    "worker exit: %d runtimes' delivery counts not flushed (out of time)", len(self)
                )
                break
            with self._lock:
                if runtime_id in self._busy or (
                    runtime_id not in self._pending and runtime_id not in self._beats
                ):
                    continue
                delta = self._take(runtime_id, self._clock())
            written += self._flush(runtime_id, delta)
        return written

    def _flush(self, runtime_id: str, delta: delivery.Delta) -> bool:
        ok = keep = False
        try:
            if self._usage is not None and (used := self._usage.known(runtime_id)) is not None:
                limits = self._usage.limits
                delta.stored = {
                    "records": used.records,
                    "bytes": used.bytes,
                    "recordLimit": limits.records,
                    "byteLimit": limits.bytes,
                }
            self._write(runtime_id, delta)
            ok = True
            self._metrics.delivery_flushes.inc()
        except gateway.GatewayError as e:
            # an object the KCP rejects stays rejected: those counts are dropped
            keep = not isinstance(e, gateway.Rejected)
            self._failed(_error_reason(e), e, keep)
        except Exception as e:  # noqa: BLE001 - runs after the response; a bug must not break the worker
            self._failed("other", e, False)
            log.debug("delivery flush failed", exc_info=True)
        finally:
            with self._lock:
                self._busy.discard(runtime_id)
                if keep:
                    self._keep(runtime_id, delta)
        return ok

    def _keep(self, runtime_id: str, delta: delivery.Delta) -> None:
        """Put a delta that could not be written back (under the lock)."""
        newer = self._pending.get(runtime_id)
        if newer is not None:
            self._pending[runtime_id] = combined(delta, newer, runtime_id, self._now())
        elif len(self._pending) < self._max:
            self._pending[runtime_id] = delta
        else:
            self._metrics.delivery_dropped.inc()

    def _failed(self, reason: str, e: BaseException, kept: bool) -> None:
        self._metrics.delivery_flush_errors.labels(reason).inc()
        now = self._clock()
        with self._lock:
            if now - self._last_log < LOG_EVERY:
                return
            self._last_log = now
        log.warning(
            "cannot write a RuntimeDelivery (%s): %s; %s",
            reason,
            logs.bounded(e, 300),
            "its counts are kept for the next flush" if kept else "its counts are dropped",
        )

    def _write(self, runtime_id: str, delta: delivery.Delta) -> None:
        ns, name = self._namespace, heartbeat.lease_name(runtime_id)
        for attempt in range(MAX_ATTEMPTS):
            obj = self._kcp.get_or_none(
                apitypes.RUNTIME_DELIVERIES, ns, name, timeout=self._timeout
            )
            if obj is None:
                body = delivery.body(
                    name, ns, runtime_id, {apitypes.RUNTIME_ID_LABEL: runtime_id, **LABELS}
                )
                try:
                    obj = self._kcp.create(
                        apitypes.RUNTIME_DELIVERIES, ns, body, timeout=self._timeout
                    )
                except gateway.Conflict:  # another worker created it just now: read it
                    continue
            if (obj.get("spec") or {}).get("runtimeId") != runtime_id:
                raise gateway.Rejected(
                    f"{apitypes.RUNTIME_DELIVERIES.plural}/{name} belongs to another runtime"
                )
            obj["status"] = delivery.merge(obj.get("status"), delta, runtime_id, self._now())
            try:
                self._kcp.request(
                    "PUT",
                    apitypes.RUNTIME_DELIVERIES.path(ns, name, "status"),
                    body=obj,
                    timeout=self._timeout,
                    what=f"update {apitypes.RUNTIME_DELIVERIES.plural}/status",
                )
                return
            except gateway.Conflict:  # another worker or replica merged in between
                self._metrics.write_conflicts.labels("delivery").inc()
                time.sleep(random.uniform(0, 0.005 * (attempt + 1)))
        raise gateway.Unavailable(
            f"{apitypes.RUNTIME_DELIVERIES.plural}: {MAX_ATTEMPTS} conflicts in a row"
        )
