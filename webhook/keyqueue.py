"""A bounded queue of object keys that coalesces by key, with leading-edge hand-out.

The admission handler puts an ``Item`` and returns at once; forwarder threads take items
in arrival order and report each key ``done`` when its send is over (acknowledged,
refused, dropped or abandoned). The decisions, per key:

* **idle** (not waiting, not in flight, not handed out within ``min_interval``): the
  entry is ready at once (leading edge; ``settle`` after the admission if set, 0 by
  default: the forwarder's read-back retries briefly until the write is visible);
* **waiting**: a further admission merges into the entry (a burst on one ConfigMap becomes
  one entry): it keeps the earliest old resourceVersion and admission time (the forwarder
  waits until the persisted version differs from it), the newest admission's old
  resourceVersion (the forwarder also waits while the object is still at it: the newest
  write is admitted but not yet persisted) and the latest operation and uid;
  its trace is the first admission's (``tether.base.tracing``), the others' are its links
  (at most ``tracing.MAX_LINKS``; ``merged`` counts them all);
* **in flight** (taken, not done): a further admission becomes one held entry (merging all
  that follow) that is ready when the send is done, not before the interval below;
* **hot** (handed out less than ``min_interval`` ago): the entry waits until then, so a key
  under constant churn yields at most one entry per interval. The record sent is read
  back, so it always carries the latest state.

A full queue refuses a new key ("overflowed"; a waiting key still merges): the poller
will find the change. ``close`` makes everything waiting, ready or not, takeable (drain).
``clock`` is injectable (tests use a fake one).
"""

from __future__ import annotations

import collections
import dataclasses
import heapq
import threading
import time
from collections.abc import Callable, Iterable
from typing import Literal

from tether.base import tracing
from tether.wire import conversion, watches

Operation = Literal["CREATE", "UPDATE", "DELETE"]
PutResult = Literal["enqueued", "coalesced", "overflowed"]
Key = tuple[str, str, str]  # (namespace, name, watch)


@dataclasses.dataclass
class Item:
    namespace: str
    name: str
    uid: str
    operation: Operation
    old_resource_version: str  # "" for CREATE
    observed_at: float  # admission time, Unix seconds (formatted only when needed)
    admitted: float = dataclasses.field(default_factory=time.monotonic)
    merged: int = 1  # how many admissions this entry stands for
    trace: tracing.TraceParent | None = None  # the first admission's span (tether.base.tracing)
    links: tuple[tracing.TraceParent, ...] = ()  # the traces of the admissions merged into it
    # the Watch the object is sent for (the built-in one, the environment's scope, by default)
    watch: watches.Watch = conversion.BUILTIN
    # the newest merged admission's old resourceVersion and time (None: one admission)
    newest_old_resource_version: str | None = None
    newest_admitted: float | None = None

    @property
    def last_admitted(self) -> float:
        """When the newest admission this entry stands for was made (the read-back's
        deadline counts from it: the newest write may still be on its way)."""
        return self.admitted if self.newest_admitted is None else self.newest_admitted

    @property
    def key(self) -> Key:
        return key_of(self.namespace, self.name, self.watch.name)


def key_of(namespace: str, name: str, watch: str = conversion.BUILTIN_NAME) -> Key:
    """An object's key: per Watch (one object, several Watches: several entries, each
    coalesced, ordered and bounded on its own)."""
    return (namespace, name, watch)


def merge(waiting: Item, new: Item) -> Item:
    """The entry standing for both (pure)."""
    links = waiting.links
    if new.trace is not None and len(links) < tracing.MAX_LINKS:
        links = (*links, new.trace, *new.links)[: tracing.MAX_LINKS]
    return dataclasses.replace(
        waiting,
        uid=new.uid or waiting.uid,
        operation=new.operation,
        newest_old_resource_version=(
            new.old_resource_version
            if new.newest_old_resource_version is None
            else new.newest_old_resource_version
        ),
        newest_admitted=new.last_admitted,
        merged=waiting.merged + new.merged,
        links=links,
        watch=new.watch,
    )


class KeyQueue:
    """``settle``: an entry is handed out at the earliest that long after its first
    admission (0: leading edge). ``min_interval``: a key handed out less than that ago
    waits until then. ``lookahead``: once one entry is ready, entries held back only by
    ``min_interval`` that would be ready within that time join it (fewer, larger batches;
    never before ``settle``, never while in flight)."""

    def __init__(
        self,
        maxsize: int,
        settle: float = 0.0,
        min_interval: float = 0.0,
        lookahead: float = 0.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.maxsize = maxsize
        self.lookahead = lookahead
        self.settle = settle
        self.min_interval = min_interval
        self._clock = clock
        self._items: dict[Key, Item] = {}  # waiting entries (in the heap or held)
        self._heap: list[tuple[float, int, Key]] = []  # (ready_at, seq, key)
        self._held: set[Key] = set()  # waiting entries of keys in flight (not in the heap)
        self._inflight: set[Key] = set()  # handed out, not done
        self._seq = 0
        self._last: collections.OrderedDict[Key, float] = collections.OrderedDict()  # hand-outs
        self._cond = threading.Condition()
        self._closed = False

    def _ready_at(self, item: Item) -> float:
        return max(
            item.admitted + self.settle, self._last.get(item.key, float("-inf")) + self.min_interval
        )

    def _push(self, item: Item) -> None:
        self._seq += 1
        heapq.heappush(self._heap, (self._ready_at(item), self._seq, item.key))

    def put(self, item: Item) -> PutResult:
        with self._cond:
            waiting = self._items.get(item.key)
            if waiting is not None:
                self._items[item.key] = merge(waiting, item)
                return "coalesced"
            if len(self._items) >= self.maxsize:
                return "overflowed"
            self._items[item.key] = item
            if item.key in self._inflight and not self._closed:
                self._held.add(item.key)  # ready when its key's send is done
                return "enqueued"
            self._push(item)
            self._cond.notify()
            return "enqueued"

    def done(self, keys: Iterable[Key]) -> None:
        """The sends of ``keys`` are over: their held entries (if any) become ready
        (not before ``min_interval`` after the hand-out)."""
        with self._cond:
            woke = False
            for key in keys:
                self._inflight.discard(key)
                if key in self._held:
                    self._held.discard(key)
                    self._push(self._items[key])
                    woke = True
            if woke:
                self._cond.notify_all()

    def take(self, max_items: int, timeout: float) -> list[Item]:
        """Up to ``max_items`` ready entries, earliest first; waits up to ``timeout`` for
        the first. Their keys are in flight until ``done``. Once closed, returns at once
        (possibly empty) with everything waiting, ready or not (drain)."""
        deadline = self._clock() + timeout
        with self._cond:
            while not self._closed:
                now = self._clock()
                if self._heap and self._heap[0][0] <= now:
                    break
                until = min(self._heap[0][0], deadline) if self._heap else deadline
                if now >= deadline:
                    return []
                self._cond.wait(max(until - now, 0.0005))
            out: list[Item] = []
            early: list[tuple[float, int, Key]] = []
            now = self._clock()
            while self._heap and len(out) < max_items:
                if not self._closed and self._heap[0][0] > now + (self.lookahead if out else 0.0):
                    break
                entry = heapq.heappop(self._heap)
                item = self._items[entry[2]]
                if not self._closed and item.admitted + self.settle > now:
                    early.append(entry)  # not settled yet: stays
                    continue
                out.append(self._items.pop(entry[2]))
                self._inflight.add(entry[2])
                self._last[entry[2]] = now
                self._last.move_to_end(entry[2])
            for entry in early:
                heapq.heappush(self._heap, entry)
            while self._last and next(iter(self._last.values())) < now - self.min_interval:
                self._last.popitem(last=False)
            return out

    def __len__(self) -> int:
        with self._cond:
            return len(self._items)

    def in_flight(self) -> int:
        with self._cond:
            return len(self._inflight)

    def close(self) -> None:
        """Wake all takers; items still waiting (held ones too) can be taken (drain)."""
        with self._cond:
            self._closed = True
            for key in self._held:
                self._push(self._items[key])
            self._held.clear()
            self._cond.notify_all()

    @property
    def closed(self) -> bool:
        return self._closed
