"""The consumer library: the records of one Watch, as a stream of changes in KCP order.

    from tether.runtime import consumer
    from tether.kube import gateway
    kcp = gateway.from_kubeconfig()
    for ev in consumer.consume(kcp, namespace="kcp-system", watch="configuration", stop=stop):
        if isinstance(ev, consumer.Synced):
            save(ev.revision)                     # the state up to here is complete
        elif ev.live:
            apply(ev.runtime_id, ev.namespace, ev.name, ev.record)
        else:
            remove(ev.runtime_id, ev.namespace, ev.name)

A ``Consumer`` lists the Watch's records (``RuntimeConfigMap`` objects labelled with the
Watch, and the runtime when given) in the Watch's storage namespace, page by page, then
watches from the list's resourceVersion with bookmarks. The stream contract (docs/consumers.md,
docs/api.md): a (re)list delivers every stored object as ``Change(resync=True)``, then the
keys this Consumer had delivered and the list no longer holds as ``Change(record=None,
resync=True)``, then ``Synced``; after it, watch events in KCP order. A 410 (history
expired) relists (``Synced(relist=True)``); a broken connection or a restarted API server
resumes the watch from ``position`` after a capped backoff. Per key only the last delivered
revision is remembered (``max_keys`` bound); an event at or below it is dropped, so a key
never goes back to an older state.

The nudge form, ``Nudger``, calls a handler per Kyma CR at most once per interval. The
runtime form, ``Runtimes``, says only *which runtime* changed (``Touched``), from the records'
metadata, remembering nothing per key: for a consumer that reads a runtime's records itself
when it acts on them (the injector), at any fleet size.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, NamedTuple, cast

from tether.base import numbers
from tether.kube import apitypes, gateway
from tether.runtime import consumerstate
from tether.wire import watches

log = logging.getLogger(__name__)

PAGE = 500
BACKOFF_FIRST = 0.25
BACKOFF_CAP = 15.0
QUICK_END = 1.0  # a watch the server ends sooner than this is followed by the backoff

ConsumerError = consumerstate.ConsumerError  # a bound was exceeded: retrying would fail again
TooManyKeys = consumerstate.TooManyKeys  # more keys than max_keys


class Change(NamedTuple):
    runtime_id: str
    watch: str
    namespace: str
    name: str  # the key: namespace/name of the runtime object
    kyma: str  # Kyma CR name (label operator.kyma-project.io/kyma-name)
    record: Mapping[str, Any] | None  # the stored object's spec; None: the object is gone
    revision: int  # KCP resourceVersion (of its deletion when removed)
    resync: bool  # True: delivered by a (re)list, not by a watch event

    @property
    def live(self) -> bool:
        """The record exists and is not a tombstone."""
        return self.record is not None and not self.record.get("deleted")


class Synced(NamedTuple):
    revision: int  # the list's resourceVersion
    relist: bool  # False: the first list; True: after a 410 (or a resume that had expired)


Event = Change | Synced


class Page(NamedTuple):
    """One page of a full list."""

    revision: int  # the list's resourceVersion (of its first page)
    items: list[Any]
    last: bool  # no page follows: the list is complete


class Touched(NamedTuple):
    """The runtime form's event: a record of ``runtime_id`` was stored, changed or removed
    (``resync``: the runtime holds records at a (re)list)."""

    runtime_id: str
    kyma: str  # the Kyma CR name label of the record ("" when it has none)
    revision: int  # the KCP resourceVersion of the record (of its deletion when removed)
    resync: bool


def selector(watch: str, runtime: str | None) -> str:
    """The label selector of one Watch's records (of one runtime when given)."""
    out = f"{watches.WATCH_LABEL}={watch}"
    if runtime:
        out += f",{apitypes.RUNTIME_ID_LABEL}={runtime}"
    return out


class Consumer:
    """The changes of one Watch's records (of one runtime when ``runtime`` is given)."""

    def __init__(
        self,
        kcp: gateway.Kube,
        *,
        namespace: str,
        watch: str,
        runtime: str | None = None,
        since: int = 0,
        max_keys: int = 100_000,
        timeout: float = 10.0,
        watch_seconds: int = 300,
        stop: threading.Event | None = None,
        max_event_bytes: int = 8 * 1024 * 1024,
    ) -> None:
        if not namespace or not watch:
            raise ValueError("a Consumer needs the Watch's storage namespace and name")
        self.kcp = kcp
        self.namespace, self.watch, self.runtime = namespace, watch, runtime
        self.position = max(0, int(since))
        self.timeout = timeout
        self.watch_seconds = watch_seconds
        self.max_event_bytes = max_event_bytes
        self.stop = stop or threading.Event()
        self.scope = f"watch {watch} in {namespace}" + (f" runtime {runtime}" if runtime else "")
        self._known = consumerstate.Known(max_keys, self.scope)
        self._selector = selector(watch, runtime)
        self._was_synced = self.position > 0  # a resume: its first list is a relist
        self.lists = 0  # lists completed (for tests and metrics)
        self.watches = 0  # watch requests opened
        self.failures = 0  # failed requests (each followed by the backoff)

    @property
    def keys(self) -> int:
        """How many keys the consumer remembers (at most ``max_keys``)."""
        return len(self._known)

    # -- the stream ------------------------------------------------------------------------

    def __iter__(self) -> Iterator[Event]:
        need_list = self.position == 0
        delay = BACKOFF_FIRST
        while not self.stop.is_set():
            try:
                if need_list:
                    yield from self._list()
                    need_list = False
                    if self.stop.is_set():
                        return
                started = time.monotonic()
                yield from self._watch()
                if time.monotonic() - started >= QUICK_END:
                    delay = BACKOFF_FIRST
                    continue
                # the server ended the watch at once: not a tight loop of requests
                if self.stop.wait(delay * random.uniform(0.8, 1.2)):
                    return
                delay = min(delay * 2, BACKOFF_CAP)
            except gateway.Gone:
                log.info("%s: history expired at %d; relisting", self.scope, self.position)
                need_list = True
            except gateway.TooLarge as e:
                raise ConsumerError(f"{self.scope}: {e}") from e
            except gateway.GatewayError as e:
                self.failures += 1
                log.warning("%s: %s; retrying in %.1fs", self.scope, e, delay)
                if self.stop.wait(delay * random.uniform(0.8, 1.2)):
                    return
                delay = min(delay * 2, BACKOFF_CAP)

    def _change(self, item: consumerstate.Item, resync: bool, *, gone: bool = False) -> Change:
        rt, ns, name = item.key
        return Change(
            rt,
            item.watch,
            ns,
            name,
            item.kyma,
            None if gone else item.record,
            item.revision,
            resync,
        )

    def _pages(self) -> Iterator[Page]:
        """The pages of one full list (``metadata_only`` as this form reads), each with the
        list's revision; a ``stop`` between pages ends it before its last page."""
        token, revision = "", 0
        while True:
            page = self.kcp.list(
                apitypes.RUNTIME_CONFIGMAPS,
                self.namespace,
                label_selector=self._selector,
                limit=PAGE,
                continue_token=token,
                metadata_only=self.metadata_only,
                timeout=self.timeout,
            )
            meta = page.get("metadata") or {}
            revision = revision or numbers.revision_of(meta) or 0
            token = str(meta.get("continue") or "")
            yield Page(revision, page.get("items") or [], last=not token)
            if not token or self.stop.is_set():
                return

    def _synced(self, revision: int) -> Synced:
        """A full list ended at ``revision``: the watch goes on from there."""
        relist, self._was_synced = self._was_synced, True
        self.position = revision
        self.lists += 1
        return Synced(revision, relist)

    def _list(self) -> Iterator[Event]:
        """One full list: every object, the known keys it lacks, then Synced."""
        listed: set[consumerstate.Key] = set()
        page = Page(0, [], last=False)
        for page in self._pages():
            for obj in page.items:
                item = consumerstate.parse(obj, self.watch)
                if item is None:
                    continue
                if len(listed) >= self._known.max_keys and item.key not in listed:
                    raise TooManyKeys(
                        f"{self.scope}: more than {self._known.max_keys} keys "
                        "(max_keys); narrow the consumer or raise the bound"
                    )
                listed.add(item.key)
                if self._known.listed(item):
                    yield self._change(item, True)
        if not page.last:
            return  # stopped: no Synced, position stays where it was
        for (rt, ns, name), kyma in self._known.missing(listed):
            yield Change(rt, self.watch, ns, name, kyma, None, page.revision, True)
        yield self._synced(page.revision)

    metadata_only = False  # the watch's events carry the objects' metadata only

    def _watch(self) -> Iterator[Any]:
        """One watch request from ``position``, until the server ends it."""
        self.watches += 1
        stream = self.kcp.watch(
            apitypes.RUNTIME_CONFIGMAPS,
            self.namespace,
            label_selector=self._selector,
            resource_version=str(self.position),
            timeout_seconds=self.watch_seconds,
            max_event_bytes=self.max_event_bytes,
            stop=self.stop,
            metadata_only=self.metadata_only,
        )
        try:
            for event in stream:
                change = self._event(event)
                if change is not None:
                    yield change
                if self.stop.is_set():
                    return
        finally:
            stream.close()  # releases the connection at once (not at garbage collection)

    def _event(self, event: Mapping[str, Any]) -> Any:
        kind, obj = event.get("type"), event.get("object")
        if kind == "BOOKMARK":
            rv = numbers.revision_of(obj.get("metadata") if isinstance(obj, dict) else None)
            if rv is not None and rv > self.position:
                self.position = rv
            return None
        item = consumerstate.parse(obj, self.watch)
        if item is None:
            rv = numbers.revision_of(obj.get("metadata") if isinstance(obj, dict) else None)
            if rv is not None and rv > self.position:
                self.position = rv
            return None
        if item.revision > self.position:
            self.position = item.revision
        if kind == "DELETED":
            if not self._known.deleted(item):
                return None
            return self._change(item, False, gone=True)
        if kind in ("ADDED", "MODIFIED") and self._known.event(item):
            return self._change(item, False)
        return None


class Runtimes(Consumer):
    """The runtime form: which runtimes' records changed, from the records' metadata only.

    A (re)list (metadata only, page by page) yields one ``Touched(resync=True)`` per runtime
    holding records of the Watch, then ``Synced``; then every watch event (metadata only)
    of a record, added, changed or deleted, is a ``Touched(resync=False)`` of its runtime.
    Nothing is remembered per record (no ``max_keys``, no ``TooManyKeys``): memory is one
    list page and, during a list, the runtime IDs seen in it (``max_runtimes``, past it a
    runtime may be yielded more than once). A runtime whose records all went while the
    consumer was away is not named by a relist: the consumer knows its own outputs (the
    injector: its targets). Failures, 410 and ``stop`` as ``Consumer``.
    """

    metadata_only = True

    def __init__(
        self,
        kcp: gateway.Kube,
        *,
        namespace: str,
        watch: str,
        max_runtimes: int = 100_000,
        **options: Any,
    ) -> None:
        super().__init__(kcp, namespace=namespace, watch=watch, max_keys=1, **options)
        self.max_runtimes = max_runtimes

    def runtimes(self) -> Iterator[Touched | Synced]:
        """The stream (``iter(self)``, typed for this form)."""
        for item in self:
            yield cast(Touched | Synced, item)

    @staticmethod
    def _touched(obj: Any, resync: bool) -> Touched | None:
        meta = obj.get("metadata") if isinstance(obj, Mapping) else None
        if not isinstance(meta, Mapping):
            return None
        labels = meta.get("labels")
        labels = labels if isinstance(labels, Mapping) else {}
        runtime, kyma = labels.get(apitypes.RUNTIME_ID_LABEL), labels.get(apitypes.KYMA_NAME_LABEL)
        revision = numbers.revision_of(meta)
        if not isinstance(runtime, str) or not runtime or revision is None:
            return None
        return Touched(runtime, kyma if isinstance(kyma, str) else "", revision, resync)

    def _list(self) -> Iterator[Any]:
        seen: set[str] = set()
        page = Page(0, [], last=False)
        for page in self._pages():
            for obj in page.items:
                touched = self._touched(obj, True)
                if touched is None or touched.runtime_id in seen:
                    continue
                if len(seen) < self.max_runtimes:
                    seen.add(touched.runtime_id)
                yield touched
        if page.last:
            yield self._synced(page.revision)

    def _event(self, event: Mapping[str, Any]) -> Touched | None:
        kind, obj = event.get("type"), event.get("object")
        rv = numbers.revision_of(obj.get("metadata") if isinstance(obj, dict) else None)
        if rv is not None and rv > self.position:
            self.position = rv
        if kind not in ("ADDED", "MODIFIED", "DELETED"):
            return None
        return self._touched(obj, False)


def consume(
    kcp: gateway.Kube,
    *,
    namespace: str,
    watch: str,
    runtime: str | None = None,
    since: int = 0,
    stop: threading.Event | None = None,
    **options: Any,
) -> Iterator[Event]:
    """``iter(Consumer(...))``: the changes of one Watch's records (see ``Consumer``)."""
    return iter(
        Consumer(
            kcp,
            namespace=namespace,
            watch=watch,
            runtime=runtime,
            since=since,
            stop=stop,
            **options,
        )
    )


# -- the nudge form -------------------------------------------------------------------------


class Nudger:
    """``handler(kyma_name)`` at most once per ``interval`` per Kyma CR: the first change of a
    Kyma CR calls it at once; changes within ``interval`` after a call are coalesced into one
    call at the interval's end. Changes without a Kyma CR name are not nudged.

    ``run`` calls the handler on the calling thread; one more thread (``tether-nudge-feed``)
    reads ``changes`` (blocking) and offers them. A handler's exception is logged (its type,
    no values) and does not stop the other calls."""

    def __init__(
        self,
        handler: Callable[[str], None],
        interval: float,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.handler = handler
        self.clock = clock
        self.schedule = consumerstate.Schedule(interval)
        self._cond = threading.Condition()
        self.calls = 0
        self.failures = 0

    def offer(self, change: Change) -> None:
        if not isinstance(change, Change) or not change.kyma:
            return
        with self._cond:
            self.schedule.offer(change.kyma, self.clock())
            self._cond.notify()

    def fire(self) -> float | None:
        """Call the handler for every Kyma CR due now; the time the next one is due."""
        with self._cond:
            due = self.schedule.due(self.clock())
        for kyma in due:
            self.calls += 1
            try:
                self.handler(kyma)
            except Exception as e:  # noqa: BLE001 - one CR's failure must not stop the others
                self.failures += 1
                log.warning("nudge handler failed for a Kyma CR (%s)", type(e).__name__)
        with self._cond:
            return self.schedule.next_at()

    def run(self, changes: Iterable[Event], stop: threading.Event) -> None:
        """Until ``stop`` is set (or ``changes`` fail): offer every change, call the handler
        when due. A failure of ``changes`` is raised here after stopping."""
        failed: list[BaseException] = []

        def feed() -> None:
            try:
                for change in changes:
                    if stop.is_set():
                        return
                    if isinstance(change, Change):
                        self.offer(change)
            except BaseException as e:  # noqa: BLE001 - handed to run()
                failed.append(e)
            finally:
                with self._cond:
                    self._cond.notify()

        feeder = threading.Thread(target=feed, name="tether-nudge-feed", daemon=True)
        feeder.start()
        while not stop.is_set() and not failed:
            at = self.fire()
            with self._cond:
                if failed or stop.is_set():
                    break
                wait = 0.5 if at is None else max(0.0, min(0.5, at - self.clock()))
                if wait > 0:
                    self._cond.wait(wait)
        if failed:
            raise failed[0]
