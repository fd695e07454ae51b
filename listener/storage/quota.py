"""The per-runtime storage quota: how many records and bytes one runtime keeps in the KCP.

The pure parts decide (``listener.storage.rules``: ``size_of``, ``stored_size``,
``usage_of``, ``admit``); ``Usage`` keeps, per worker process, what a runtime uses:

* the base: a metadata-only list of the runtime's ``RuntimeConfigMap`` objects (count, and
  the sum of their ``tether.kyma-project.io/size`` annotations), trusted for ``ttl``
  seconds; the state digest's own list refreshes it for free;
* plus every write this worker finished since that list began (a create counts one record,
  an update its size difference) and the writes it admitted and has not finished yet.

A new key is admitted when one more record and its bytes fit, an update of a stored key
when its new size fits (an update that does not grow always fits). Check and reservation
happen under one lock, so the threads of one worker never admit more than the cap between
them.

Across workers (``writers``: how many worker processes, replicas × workers, may write one
runtime's records; docs/listener.md, "Storage quota"): with ``writers`` 1 the count is
trusted for ``ttl`` and other workers' writes are seen at the next count. With more, every
write that grows the usage counts afresh first (``load``: the state summary, into which the
count merges this worker's own writes, one at most, before it reads), and a worker's
growing writes of one runtime go one at a time (``Reservation`` holds the runtime's stripe
of ``_serial`` from the count until the write is acknowledged or failed). So a count holds
every growing write of every worker except the one each other worker may have in flight
(and what the pod's view of the summary lags behind the KCP): the stored usage exceeds the
quota by at most one write per other worker.

Objects written before the size annotation existed count 0 bytes until their next write.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import NamedTuple

from listener.storage import rules

MAX_RUNTIMES = 10_000  # views per worker; the least recently used are forgotten
SERIAL_STRIPES = 64


class Exceeded(Exception):
    """A write was refused by the quota; ``refusal`` says which limit."""

    def __init__(self, refusal: rules.Refusal, object: str = "") -> None:
        super().__init__(refusal.message())
        self.refusal = refusal
        self.object = object  # "namespace/name" of the refused record (set by the store)


# -- one worker's view -------------------------------------------------------------------


class Snapshot(NamedTuple):
    """Taken when a list of a runtime's objects begins (``Usage.begin``)."""

    started_at: float
    written: rules.Used


class _View:
    __slots__ = ("loaded_at", "base", "base_written", "written", "pending")

    def __init__(self) -> None:
        self.loaded_at: float | None = None
        self.base = rules.Used(0, 0)
        self.base_written = rules.Used(0, 0)  # ``written`` when the base's list began
        self.written = rules.Used(0, 0)  # every write of this worker the API acknowledged
        self.pending = rules.Used(0, 0)  # admitted, not finished

    def used(self) -> rules.Used:
        # writes acknowledged after the list began may also be in it: counted twice until
        # the next list (never less than the truth as far as this worker knows)
        return rules.add(
            rules.add(self.base, rules.add(self.written, self.base_written, -1)), self.pending
        )


class Reservation:
    """An admitted write: ``commit`` once the API acknowledged it, else ``cancel``
    (either releases ``serial``, the runtime's stripe held by a counted write)."""

    def __init__(
        self,
        usage: Usage,
        runtime_id: str,
        change: rules.Used,
        serial: threading.Lock | None = None,
    ) -> None:
        self._usage = usage
        self._runtime_id = runtime_id
        self._change = change
        self._serial = serial
        self._done = False

    def commit(self) -> None:
        self._end(True)

    def cancel(self) -> None:
        self._end(False)

    def _end(self, written: bool) -> None:
        if not self._done:
            self._done = True
            try:
                self._usage.finish(self._runtime_id, self._change, written)
            finally:
                if self._serial is not None:
                    self._serial.release()


class Usage:
    def __init__(
        self,
        limits: rules.Limits,
        ttl: float,
        load: Callable[[str], rules.Used],
        clock: Callable[[], float] = time.monotonic,
        max_runtimes: int = MAX_RUNTIMES,
        writers: int = 1,
    ) -> None:
        self.limits = limits
        self._ttl, self._load, self._clock, self._max = ttl, load, clock, max_runtimes
        self.writers = writers
        # writers > 1: a runtime's growing writes in this worker one at a time (striped:
        # bounded, whatever the runtimes; two runtimes of one stripe wait for each other)
        self._serial = [threading.Lock() for _ in range(SERIAL_STRIPES)]
        self._lock = threading.Lock()
        self._views: OrderedDict[str, _View] = OrderedDict()
        self._loading: dict[str, threading.Lock] = {}  # runtime -> its count in progress

    def _view(self, runtime_id: str) -> _View:
        view = self._views.get(runtime_id)
        if view is None:
            view = self._views[runtime_id] = _View()
            while len(self._views) > self._max:
                self._views.popitem(last=False)
        self._views.move_to_end(runtime_id)
        return view

    def begin(self, runtime_id: str) -> Snapshot:
        """Call before listing the runtime's objects; pass the result to ``observe``."""
        with self._lock:
            return Snapshot(self._clock(), self._view(runtime_id).written)

    def observe(self, runtime_id: str, used: rules.Used, snap: Snapshot) -> None:
        """What a list of the runtime's objects that began at ``snap`` found."""
        with self._lock:
            view = self._view(runtime_id)
            if view.loaded_at is not None and view.loaded_at > snap.started_at:
                return  # a list that began later is already in
            view.loaded_at = snap.started_at
            view.base = used
            view.base_written = snap.written

    def current(self, runtime_id: str) -> rules.Used:
        """Records and bytes as this worker sees them (base, own writes, admitted)."""
        with self._lock:
            return self._view(runtime_id).used()

    def known(self, runtime_id: str) -> rules.Used | None:
        """``current`` when this worker has listed the runtime's objects at least once, else
        None (nothing is remembered for it; unlike ``current`` this keeps no new view)."""
        with self._lock:
            view = self._views.get(runtime_id)
            return None if view is None or view.loaded_at is None else view.used()

    def reserve(self, runtime_id: str, old_size: int | None, new_size: int) -> Reservation:
        """Admit a write or raise ``Exceeded``. Lists the runtime's objects (``load``) first
        when its view is older than ``ttl`` and the write would grow the usage."""
        change = rules.delta(old_size, new_size)
        grows = change.records > 0 or change.bytes > 0
        if grows and self.writers > 1:
            return self._reserve_counted(runtime_id, old_size, new_size, change)
        if grows:
            self._refresh(runtime_id)
        return self._admit(runtime_id, old_size, new_size, change)

    def _admit(
        self,
        runtime_id: str,
        old_size: int | None,
        new_size: int,
        change: rules.Used,
        serial: threading.Lock | None = None,
    ) -> Reservation:
        with self._lock:
            view = self._view(runtime_id)
            refusal = rules.admit(view.used(), self.limits, old_size, new_size)
            if refusal is not None:
                raise Exceeded(refusal)
            view.pending = rules.add(view.pending, change)
        return Reservation(self, runtime_id, change, serial)

    def _reserve_counted(
        self, runtime_id: str, old_size: int | None, new_size: int, change: rules.Used
    ) -> Reservation:
        """A growing write with other writers about: counted afresh, one at a time (the
        module's docstring); the stripe is held until the reservation ends."""
        serial = self._serial[hash(runtime_id) % SERIAL_STRIPES]
        serial.acquire()
        try:
            snap = self.begin(runtime_id)
            self.observe(runtime_id, self._load(runtime_id), snap)
            return self._admit(runtime_id, old_size, new_size, change, serial)
        except BaseException:
            serial.release()
            raise

    def nothing(self, runtime_id: str) -> Reservation:
        """The reservation of a write the quota does not count (an unbacked tombstone)."""
        return Reservation(self, runtime_id, rules.Used(0, 0))

    def _fresh(self, runtime_id: str) -> bool:
        with self._lock:
            view = self._view(runtime_id)
            return view.loaded_at is not None and self._clock() - view.loaded_at < self._ttl

    def _refresh(self, runtime_id: str) -> None:
        """Count the runtime afresh when its view is older than ``ttl``; one thread of the
        worker counts at a time per runtime, the others wait for its count (concurrent
        counts would cost as many KCP reads, and one taken while another thread's admitted
        write lands counts that write twice until the next count)."""
        if self._fresh(runtime_id):
            return
        with self._lock:
            gate = self._loading.get(runtime_id)
            if gate is None:
                gate = self._loading[runtime_id] = threading.Lock()
        with gate:
            if self._fresh(runtime_id):
                return  # another thread counted while this one waited
            try:
                snap = self.begin(runtime_id)
                self.observe(runtime_id, self._load(runtime_id), snap)
            finally:
                with self._lock:
                    self._loading.pop(runtime_id, None)

    def finish(self, runtime_id: str, change: rules.Used, written: bool) -> None:
        with self._lock:
            view = self._view(runtime_id)
            view.pending = rules.add(view.pending, change, -1)
            if written:
                view.written = rules.add(view.written, change)
