"""Round-robin over peers with a per-peer cap on items in service (``tether.http.httpworker``).

``put(key, item)`` queues an item of a peer; ``take(capacity)`` yields the next items to
serve, one peer after the other, while fewer than ``capacity`` are in service and skipping
peers that already have ``per_key_cap`` in service (their items stay queued);
``done(key)`` ends the service of one item. Not thread-safe: the worker's main loop owns it.
"""

from __future__ import annotations

import collections
from collections.abc import Iterator
from typing import Generic, TypeVar

T = TypeVar("T")


class FairQueue(Generic[T]):
    def __init__(self, per_key_cap: int) -> None:
        self.per_key_cap = per_key_cap
        self.busy = 0
        self._ready: collections.OrderedDict[str, collections.deque[T]] = collections.OrderedDict()
        self._busy_by_key: collections.Counter[str] = collections.Counter()

    def __bool__(self) -> bool:
        """Whether any item is queued."""
        return bool(self._ready)

    def put(self, key: str, item: T) -> None:
        self._ready.setdefault(key, collections.deque()).append(item)

    def remove(self, key: str, item: T) -> None:
        queue = self._ready.get(key)
        if queue is None:
            return
        try:
            queue.remove(item)
        except ValueError:
            pass
        if not queue:
            del self._ready[key]

    def take(self, capacity: int) -> Iterator[tuple[str, T]]:
        """The next items to serve (each counted in service until ``done``)."""
        skipped = 0
        while self.busy < capacity and self._ready and skipped < len(self._ready):
            key, queue = next(iter(self._ready.items()))
            if self._busy_by_key[key] >= self.per_key_cap:
                self._ready.move_to_end(key)
                skipped += 1
                continue
            skipped = 0
            item = queue.popleft()
            if queue:
                self._ready.move_to_end(key)
            else:
                del self._ready[key]
            self.busy += 1
            self._busy_by_key[key] += 1
            yield key, item

    def done(self, key: str | None) -> None:
        """One item left service (``key`` None: its peer is no longer counted)."""
        self.busy -= 1
        if key is not None:
            self._busy_by_key[key] -= 1
            if self._busy_by_key[key] <= 0:
                del self._busy_by_key[key]
