"""A bounded queue of object keys that coalesces by key.

The admission handler puts an ``Item`` and returns at once; forwarder threads take items
in arrival order. A key already waiting is merged, not added (a burst on one ConfigMap
becomes one entry): the entry keeps the earliest old resourceVersion and observedAt (the
forwarder waits until the persisted version differs from it) and the latest operation
and uid. A full queue refuses the item ("overflowed"): the poller will find the change.
Entries are handed out ``settle`` seconds after their first admission at the earliest,
and a key at most once per ``min_interval`` (hot keys are debounced; the record sent is
read back, so it always carries the latest state).
"""

from __future__ import annotations

import collections
import dataclasses
import heapq
import threading
import time
from typing import Literal

Operation = Literal["CREATE", "UPDATE", "DELETE"]
PutResult = Literal["enqueued", "coalesced", "overflowed"]


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

    @property
    def key(self) -> tuple[str, str]:
        return (self.namespace, self.name)


def merge(waiting: Item, new: Item) -> Item:
    """The entry standing for both (pure)."""
    return dataclasses.replace(
        waiting, uid=new.uid or waiting.uid, operation=new.operation,
        merged=waiting.merged + new.merged,
    )


class KeyQueue:
    """``settle``: an entry is handed out at the earliest that long after its first
    admission. ``min_interval``: a key handed out less than that ago waits until then
    (a key under constant churn yields at most one entry per interval). ``lookahead``:
    once one entry is ready, entries held back only by ``min_interval`` that would be ready
    within that time join it (fewer, larger batches; never before ``settle``)."""

    def __init__(self, maxsize: int, settle: float = 0.0, min_interval: float = 0.0,
                 lookahead: float = 0.0) -> None:
        self.maxsize = maxsize
        self.lookahead = lookahead
        self.settle = settle
        self.min_interval = min_interval
        self._items: dict[tuple[str, str], Item] = {}
        self._heap: list[tuple[float, int, tuple[str, str]]] = []  # (ready_at, seq, key)
        self._seq = 0
        self._last: collections.OrderedDict[tuple[str, str], float] = collections.OrderedDict()
        self._cond = threading.Condition()
        self._closed = False

    def put(self, item: Item) -> PutResult:
        with self._cond:
            waiting = self._items.get(item.key)
            if waiting is not None:
                self._items[item.key] = merge(waiting, item)
                return "coalesced"
            if len(self._items) >= self.maxsize:
                return "overflowed"
            ready_at = max(item.admitted + self.settle,
                           self._last.get(item.key, float("-inf")) + self.min_interval)
            self._items[item.key] = item
            self._seq += 1
            heapq.heappush(self._heap, (ready_at, self._seq, item.key))
            self._cond.notify()
            return "enqueued"

    def take(self, max_items: int, timeout: float) -> list[Item]:
        """Up to ``max_items`` ready entries, earliest first; waits up to ``timeout`` for
        the first. Once closed, returns at once (possibly empty) with everything waiting,
        ready or not (drain)."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while not self._closed:
                now = time.monotonic()
                if self._heap and self._heap[0][0] <= now:
                    break
                until = min(self._heap[0][0], deadline) if self._heap else deadline
                if now >= deadline:
                    return []
                self._cond.wait(max(until - now, 0.0005))
            out: list[Item] = []
            early: list[tuple[float, int, tuple[str, str]]] = []
            now = time.monotonic()
            while self._heap and len(out) < max_items:
                if not self._closed and self._heap[0][0] > now + (self.lookahead if out else 0.0):
                    break
                entry = heapq.heappop(self._heap)
                item = self._items[entry[2]]
                if not self._closed and item.admitted + self.settle > now:
                    early.append(entry)  # not settled yet: stays
                    continue
                out.append(self._items.pop(entry[2]))
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

    def close(self) -> None:
        """Wake all takers; items still waiting can be taken (drain)."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()

    @property
    def closed(self) -> bool:
        return self._closed
