"""A bounded queue of object keys that coalesces by key.

The admission handler puts an ``Item`` and returns at once; forwarder threads take items
in arrival order. A key already waiting is merged, not added (a burst on one ConfigMap
becomes one entry): the entry keeps the earliest old resourceVersion and observedAt (the
forwarder waits until the persisted version differs from it) and the latest operation
and uid. A full queue refuses the item ("overflowed"): the poller will find the change.
Entries are handed out ``settle`` seconds after their first admission at the earliest.
"""

from __future__ import annotations

import collections
import dataclasses
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
    observed_at: str  # admission time, UTC (changes.now())
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
    def __init__(self, maxsize: int, settle: float = 0.0) -> None:
        self.maxsize = maxsize
        self.settle = settle
        self._items: collections.OrderedDict[tuple[str, str], Item] = collections.OrderedDict()
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
            self._items[item.key] = item
            self._cond.notify()
            return "enqueued"

    def take(self, max_items: int, timeout: float) -> list[Item]:
        """Up to ``max_items`` in arrival order, each at least ``settle`` seconds after its
        first admission (so a burst coalesces and the write is persisted); waits up to
        ``timeout`` for the first. Once closed, returns at once (possibly empty) and
        ignores ``settle`` (drain)."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while not self._closed:
                now = time.monotonic()
                if self._items:
                    head = next(iter(self._items.values()))
                    ready_at = head.admitted + self.settle
                    if ready_at <= now:
                        break
                    wait = min(ready_at, deadline) - now
                else:
                    wait = deadline - now
                if wait <= 0 or now >= deadline:
                    return []
                self._cond.wait(wait)
            out: list[Item] = []
            now = time.monotonic()
            while self._items and len(out) < max_items:
                head = next(iter(self._items.values()))
                if not self._closed and head.admitted + self.settle > now:
                    break
                out.append(self._items.popitem(last=False)[1])
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
