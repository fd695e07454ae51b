"""Forwarder threads: read back what the admission handler queued and send it to the listener.

Each thread takes up to ``max_batch`` keys (several when the queue is deep), reads every
object back (``readback``; up to ``readback_lanes`` at once, a pool per worker shared by its
threads, so a deep round's reads do not add up before its POST), builds change records and
POSTs them in batches; then it tells
the queue the keys are ``done`` (acknowledged, refused, dropped or abandoned), which
releases what was admitted for them meanwhile (``keyqueue``: leading edge, coalescing while
in flight). Keys whose write is not visible yet stay pending in the thread, re-read after
``reread_first`` seconds, doubling up to ``poll``, until ``readback_seconds`` after
admission (a key is handed out at its admission, usually before the apiserver has
persisted the write: the first re-reads come quickly so that the record leaves as soon as
the object is readable); runtime API errors are retried after 0.2 s doubling to 2 s,
jittered (``readback.error_delay``), for up to ``read_error_seconds``. Sending retries
retryable outcomes with exponential backoff and full jitter, at least the listener's
``Retry-After``; a permanent outcome (4xx other than 408/429) is logged with the
listener's error and dropped (a rejected batch is retried record by record so one bad
record does not sink the others). ``stop`` drains what can be sent within the grace
period, then closes connections.

Tracing (``tether.base.tracing``): each POST is a span of the first record's admission trace
(the ``traceparent`` header names it), linked to the other records' admission traces and
to the admissions coalesced into each entry; a record sent again alone (a refused batch)
carries its own entry's trace.

``tether_webhook_dispatch_seconds`` measures, for every record, the time from the admission
that first enqueued its key's entry to the start of its first POST (queueing and
read-back); ``tether_webhook_delivery_seconds{outcome}``, for every record the listener
acknowledged (2xx), the time to that acknowledgement (also batching, retries and the POST).
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import logging
import threading
import time
import types
from collections.abc import Callable, Mapping, Sequence

from tether.base import logs, times, tracing
from tether.runtime import sender
from tether.wire import changes, conversion, listenerapi, watches
from webhook import keyqueue, metrics, readback
from webhook import records as records_mod
from webhook import settings as settings_mod
from webhook.records import stale_by_epoch as _stale_by_epoch  # noqa: F401 - its tests' name
from webhook.records import tombstone_version as _not_below  # noqa: F401 - its tests' name

log = logging.getLogger(__name__)
_NO_ENTRIES: Mapping[keyqueue.Key, keyqueue.Item] = types.MappingProxyType({})
_OUTCOMES = ("persisted", "duplicate", "stale")
_PER_RECORD = frozenset({400, 413, 422})  # refusals that may concern one record of a batch


@dataclasses.dataclass
class _Pending:
    item: keyqueue.Item
    next_try: float
    first_error: float | None = None
    rereads: int = 0  # "wait" verdicts so far (the re-read delay doubles)
    errors: int = 0  # runtime API errors so far (the retry delay doubles, jittered)


def per_record(outcome: sender.Outcome) -> bool:
    """Whether a permanent refusal of a batch may concern only some of its records (pure):
    then each is sent alone, so the listener stores the ones it admits. The listener refuses
    a whole request for one record that is invalid, too large, or that no Watch in force
    admits (its Watches changed before this runtime's list did)."""
    return outcome.status in _PER_RECORD or (
        outcome.status == 403 and outcome.error == listenerapi.WATCH_REFUSAL
    )


def reread_delay(first: float, cap: float, rereads: int) -> float:
    """Delay before the next read of an object not visible yet (pure): ``first``,
    doubling, at most ``cap``."""
    return min(cap, first * (1 << min(rereads, 30)))


class Forwarder:
    def __init__(
        self,
        settings: settings_mod.ForwarderSettings,
        runtime_id: str,
        queue: keyqueue.KeyQueue,
        reader: readback.Reader,
        client: sender.ListenerClient,
        m: metrics.Metrics,
        in_force: Callable[[], tuple[watches.Watch, ...]] = lambda: (conversion.BUILTIN,),
    ) -> None:
        self.settings, self.runtime_id = settings, runtime_id
        self._in_force = in_force  # the Watches in force now (tether.wire.conversion.in_force)
        self.queue, self.reader, self.client, self.metrics = queue, reader, client, m
        self._stop = threading.Event()
        self._deadline = float("inf")
        self._threads: list[threading.Thread] = []
        self._epoch: int | None = None  # the runtime's epoch, as the listener last answered
        self._forbidden_logged: set[tuple[str, str]] = set()  # (watch, resource) logged
        self._lanes: concurrent.futures.ThreadPoolExecutor | None = None  # read-backs at once
        self._lanes_lock = threading.Lock()

    # -- lifecycle -----------------------------------------------------------------------

    def start(self) -> None:
        for i in range(self.settings.threads):
            t = threading.Thread(target=self._run, name=f"forwarder-{i}", daemon=True)
            t.start()
            self._threads.append(t)

    def alive(self) -> bool:
        return bool(self._threads) and all(t.is_alive() for t in self._threads)

    def certs_loaded(self) -> bool:
        return self.client.certs_loaded()

    def stop(self, grace: float | None = None) -> None:
        """Drain within ``grace`` seconds (default ``drain_seconds``), then close."""
        grace = self.settings.drain_seconds if grace is None else grace
        log.info(
            "forwarder stopping: %d keys queued, draining for up to %.1fs", len(self.queue), grace
        )
        self._deadline = time.monotonic() + grace
        self._stop.set()
        self.queue.close()
        for t in self._threads:
            t.join(max(0.0, self._deadline - time.monotonic()) + 1.0)
        left = len(self.queue)
        alive = sum(t.is_alive() for t in self._threads)
        if left or alive:
            log.warning(
                "forwarder stopped with %d keys unsent (left to the poller), %d threads still busy",
                left,
                alive,
            )
        else:
            log.info("forwarder stopped, queue drained")
        if self._lanes is not None:
            self._lanes.shutdown(wait=False)
        self.client.close()

    def _time_left(self) -> float:
        return self._deadline - time.monotonic()

    # -- the loop ------------------------------------------------------------------------

    def _run(self) -> None:
        pending: list[_Pending] = []
        taken: set[keyqueue.Key] = set()  # keys this thread holds in flight
        while True:
            try:
                if not self._step(pending, taken):
                    return
            except Exception:  # a bug must not silently stop forwarding: log, go on
                log.exception("forwarder step failed; keys of this step are left to the poller")
                pending.clear()
                self.queue.done(taken)
                taken.clear()
                time.sleep(self.settings.poll)

    def _finish(self, keys: list[keyqueue.Key], taken: set[keyqueue.Key]) -> None:
        self.queue.done(keys)
        taken.difference_update(keys)

    def _step(self, pending: list[_Pending], taken: set[keyqueue.Key]) -> bool:
        """One round: take, read back, send. False when stopped and drained."""
        if self._stop.is_set() and self._time_left() <= 0:
            if pending:
                log.warning(
                    "shutdown: %d keys still being read back, not sent (left to the poller)",
                    len(pending),
                )
            return False
        room = self.settings.max_batch - len(pending)
        wait = 0.5  # nothing pending: wake up now and then (shutdown)
        if pending:
            wait = max(0.0, min(p.next_try for p in pending) - time.monotonic())
        if room > 0:
            new = self.queue.take(room, wait)
        else:
            new = []
            time.sleep(min(wait, self.settings.poll))
        if not new and not pending and self.queue.closed:
            return False
        self.metrics.queue_depth.set(len(self.queue))
        now = time.monotonic()
        taken.update(i.key for i in new)
        work = [_Pending(i, now) for i in new] + pending
        pending.clear()
        records: list[changes.ChangeRecord] = []
        admitted: dict[keyqueue.Key, float] = {}  # key -> first admission of its entry
        entries: dict[keyqueue.Key, keyqueue.Item] = {}  # key -> its entry (traces)
        dropped: list[keyqueue.Key] = []
        pending.extend(p for p in work if p.next_try > now)
        due = [p for p in work if p.next_try <= now]
        for p, rec in zip(due, self._resolve_all(due), strict=True):
            if rec is None:
                dropped.append(p.item.key)
            elif isinstance(rec, _Pending):
                pending.append(rec)
            else:
                records.append(rec)
                admitted[p.item.key] = min(
                    p.item.admitted, admitted.get(p.item.key, p.item.admitted)
                )
                entries.setdefault(p.item.key, p.item)
        if dropped:
            self._finish(dropped, taken)
        for batch in [
            b
            for group in records_mod.by_version(records)
            for b in sender.encoded_batches(group, max_items=self.settings.max_batch)
        ]:
            chunk = batch.records
            keys = [records_mod.key_of(r) for r in chunk]
            started = time.monotonic()
            for key in keys:
                self.metrics.dispatch_seconds.observe(
                    max(0.0, started - admitted.get(key, started))
                )
            try:
                self._deliver(chunk, admitted, entries=entries, body=batch.body)
            finally:
                self._finish(keys, taken)
        return True

    def _resolve_all(self, due: list[_Pending]) -> list[changes.ChangeRecord | _Pending | None]:
        """Each entry of ``due`` resolved (read back), in order: several at once on the
        worker's ``readback_lanes`` (shared by its forwarder threads), so a round's reads
        overlap their round trips instead of adding them up before its POST."""
        if len(due) < 2 or self.settings.readback_lanes < 2:
            return [self._resolve(p) for p in due]
        with self._lanes_lock:
            if self._lanes is None:
                self._lanes = concurrent.futures.ThreadPoolExecutor(
                    self.settings.readback_lanes, thread_name_prefix="readback"
                )
            lanes = self._lanes
        return list(lanes.map(self._resolve, due))

    def _resolve(self, p: _Pending) -> changes.ChangeRecord | _Pending | None:
        item = p.item
        now = time.monotonic()
        expired = now - item.last_admitted >= self.settings.readback_seconds or (
            self._stop.is_set() and self._time_left() <= 0
        )
        epoch = self._epoch  # learned before the read: a read of a lost history loses
        now_item = records_mod.current(item, self._in_force())
        if now_item is None:  # its Watch is gone, or the runtime changed mode: the poller's
            self.metrics.readbacks.labels("out-of-scope").inc()
            return None
        item = now_item
        target = item.watch.target
        try:
            found = self.reader.get(item.namespace, item.name, target)
            verdict = readback.judge(item, found, expired)
            observed = times.now()
            if verdict.result == "tombstone":
                rv, again = self.reader.absent_at(item.namespace, item.name, target)
                if again is not None:
                    verdict = readback.judge(item, again, expired)
                else:
                    self.metrics.readbacks.labels("tombstone").inc()
                    return records_mod.gone(
                        item,
                        records_mod.tombstone_version(rv, item.old_resource_version),
                        runtime_id=self.runtime_id,
                        observed_at=observed,
                        epoch=epoch,
                    )
        except readback.ReadError as e:
            if isinstance(e, readback.Forbidden):
                self._forbidden(item.watch, e)
                return None
            if p.first_error is None:
                log.info("reading %s/%s back failed, retrying: %s", item.namespace, item.name, e)
            first = p.first_error or now
            if now - first >= self.settings.read_error_seconds or self._time_left() <= 0:
                self.metrics.readbacks.labels("read-error").inc()
                log.warning(
                    "dropping %s/%s after runtime API errors (left to the poller): %s",
                    item.namespace,
                    item.name,
                    e,
                )
                return None
            return _Pending(item, now + readback.error_delay(p.errors), first, errors=p.errors + 1)
        if verdict.result == "live":
            assert verdict.obj is not None
            rec = records_mod.live(
                item, verdict.obj, runtime_id=self.runtime_id, observed_at=observed, epoch=epoch
            )  # None: not its Watch's kind
            self.metrics.readbacks.labels("live" if rec is not None else "foreign-kind").inc()
            return rec
        if verdict.result == "wait":
            delay = reread_delay(self.settings.reread_first, self.settings.poll, p.rereads)
            return _Pending(item, now + delay, rereads=p.rereads + 1)
        self.metrics.readbacks.labels(verdict.result).inc()
        log.info("not forwarding %s/%s: %s", item.namespace, item.name, verdict.result)
        return None

    def _forbidden(self, w: watches.Watch, e: readback.ReadError) -> None:
        """A Watch's kind this ServiceAccount may not read: dropped at once (retrying cannot
        help; the poller's pass meets the same), logged once per Watch and resource."""
        self.metrics.readbacks.labels("forbidden").inc()
        key = (w.name, w.target.resource)
        if key not in self._forbidden_logged:
            self._forbidden_logged.add(key)
            log.warning(
                "the watch %s covers %s, which this ServiceAccount may not read (grant "
                "get and list, docs/webhook.md); its changes are not sent: %s",
                w.name,
                w.target.resource,
                e,
            )

    def _deliver(
        self,
        records: Sequence[changes.ChangeRecord],
        admitted: Mapping[keyqueue.Key, float],
        again: bool = True,
        entries: Mapping[keyqueue.Key, keyqueue.Item] = _NO_ENTRIES,
        body: bytes | None = None,
    ) -> None:
        """Send until acknowledged, refused or shut down (``admitted``: each key's first
        admission, for ``tether_webhook_delivery_seconds``; ``entries``: their queue entries,
        whose traces the POST continues; ``body``: the records encoded, sent as is on every
        attempt); records stale by a new epoch once more (``again``)."""
        parent, links, attempt = *trace_of(records, entries), 0
        while True:
            timeout = None
            if self._stop.is_set():
                left = self._time_left()
                if left <= 0.05:
                    self.metrics.forwards.labels("abandoned", "shutdown").inc()
                    log.warning("shutdown: %d records unsent (left to the poller)", len(records))
                    return
                timeout = (min(3.0, left), left)
            t0 = time.monotonic()
            outcome = self.client.send(records, timeout, parent=parent, links=links, body=body)
            self.metrics.forward_seconds.observe(time.monotonic() - t0)
            self.metrics.forwards.labels(outcome.verdict, outcome.reason).inc()
            if outcome.verdict == "ok":
                self.metrics.last_success.set(time.time())
                acked = time.monotonic()
                for i, r in enumerate(outcome.results):
                    got = r.get("outcome")
                    label = got if got in _OUTCOMES else "other"
                    self.metrics.forwarded_records.labels(label).inc()
                    since = admitted.get(
                        records_mod.result_key(r, records[i] if i < len(records) else None)
                    )
                    if since is not None:
                        self.metrics.delivery_seconds.labels(label).observe(max(0.0, acked - since))
                if outcome.epoch is not None:
                    self._epoch = max(outcome.epoch, self._epoch or 0)
                    stale = records_mod.stale_by_epoch(records, outcome.results, outcome.epoch)
                    if stale and again:
                        self._send_again(stale, admitted, entries)
                return
            if outcome.verdict == "permanent":
                if len(records) > 1 and per_record(outcome):
                    for rec in records:  # isolate the record the listener refuses
                        self._deliver([rec], admitted, again, entries)
                    return
                rec = records[0]
                log.error(
                    "listener refused %d record(s) (first %s/%s rv=%s): %s %s %s",
                    len(records),
                    rec["namespace"],
                    rec["name"],
                    rec["resourceVersion"],
                    outcome.status,
                    outcome.error,
                    logs.bounded(outcome.details, 300),
                )
                return
            delay = sender.retry_delay(
                outcome, attempt, base=self.settings.retry_base, cap=self.settings.retry_cap
            )
            attempt += 1
            if attempt == 1 or attempt % 10 == 0:
                log.warning(
                    "listener call failed (%s %s), attempt %d, retrying in %.2fs",
                    outcome.reason,
                    outcome.error,
                    attempt,
                    delay,
                )
            if self._stop.is_set():
                if delay >= self._time_left():
                    self.metrics.forwards.labels("abandoned", "shutdown").inc()
                    log.warning("shutdown: %d records unsent (left to the poller)", len(records))
                    return
                time.sleep(delay)
            else:
                self._stop.wait(delay)

    def _send_again(
        self,
        stale: Sequence[changes.ChangeRecord],
        admitted: Mapping[keyqueue.Key, float],
        entries: Mapping[keyqueue.Key, keyqueue.Item],
    ) -> None:
        """Read ``stale`` records' objects again (now: after the new epoch started, so of
        the runtime's current history) and send them once with the epoch just learned; a
        read error leaves the key to the poller."""
        epoch, fresh = self._epoch, []
        for rec in stale:
            ns, name = rec["namespace"], rec["name"]
            item = entries.get(records_mod.key_of(rec))
            if item is None:  # not reached: every record sent has its entry
                continue
            target = item.watch.target
            try:
                found = self.reader.get(ns, name, target)
                observed = times.now()
                if found is None:
                    rv, found = self.reader.absent_at(ns, name, target)
                if found is None:
                    fresh.append(
                        records_mod.gone(
                            item,
                            rv or "0",
                            runtime_id=self.runtime_id,
                            observed_at=observed,
                            epoch=epoch,
                            uid=rec["uid"],
                        )
                    )
                elif (
                    again := records_mod.live(
                        item, found, runtime_id=self.runtime_id, observed_at=observed, epoch=epoch
                    )
                ) is not None:
                    fresh.append(again)
            except readback.ReadError as e:
                log.info(
                    "re-reading %s/%s for epoch %s failed (left to the poller): %s",
                    ns,
                    name,
                    epoch,
                    e,
                )
        self.metrics.readbacks.labels("epoch").inc(len(stale))
        log.info(
            "%d record(s) of an older epoch refused as stale; sent again in epoch %s",
            len(stale),
            epoch,
        )
        if fresh:
            self._deliver(fresh, admitted, again=False, entries=entries)


def trace_of(
    records: Sequence[changes.ChangeRecord], entries: Mapping[keyqueue.Key, keyqueue.Item]
) -> tuple[tracing.TraceParent | None, list[tracing.TraceParent]]:
    """The trace a POST of ``records`` continues (the first record's entry's: its first
    admission) and the traces it links (the entries' coalesced admissions and the other
    records' traces, at most ``tracing.MAX_LINKS``); (None, []) for records without an
    entry (a new trace starts at the POST)."""
    parent: tracing.TraceParent | None = None
    links: list[tracing.TraceParent] = []
    for rec in records:
        item = entries.get(records_mod.key_of(rec))
        if item is None:
            continue
        for t in (item.trace, *item.links):
            if t is None:
                continue
            if parent is None:
                parent = t
            elif len(links) < tracing.MAX_LINKS:
                links.append(t)
            else:
                return parent, links
    return parent, links
