"""What the open connections of one ``tether.http.httpworker`` process hold, and when each must
move on: the worker's bookkeeping, without I/O.

``Ledger`` counts connections per peer (``max_connections_per_peer``), the body bytes read
ahead in the main loop (``prebuffer_bytes`` each, ``prebuffer_budget`` in all), and keeps
the deadlines of the connections that wait in the main loop, soonest first. A deadline that
is no longer the connection's own (it moved on) is still returned by ``due``; the worker
compares it with the connection's current one.
"""

from __future__ import annotations

import collections
import heapq
import itertools
from collections.abc import Iterator
from typing import Generic, TypeVar

from tether.http.httpconn import Limits

T = TypeVar("T")


class Ledger(Generic[T]):
    def __init__(self, limits: Limits) -> None:
        self.limits = limits
        self.prebuffered = 0
        self._peers: collections.Counter[str] = collections.Counter()
        self._timers: list[tuple[float, int, T]] = []
        self._seq = itertools.count()

    def admit(self, peer: str) -> bool:
        """Count one more connection to ``peer``; False (not counted) when it is at its cap."""
        if self._peers[peer] >= self.limits.max_connections_per_peer:
            return False
        self._peers[peer] += 1
        return True

    def leave(self, peer: str) -> None:
        self._peers[peer] -= 1
        if self._peers[peer] <= 0:
            del self._peers[peer]

    def reserve(self, length: int) -> bool:
        """Whether a body of ``length`` bytes may be read ahead (then it is counted)."""
        if (
            0 < length <= self.limits.prebuffer_bytes
            and self.prebuffered + length <= self.limits.prebuffer_budget
        ):
            self.prebuffered += length
            return True
        return False

    def release(self, length: int) -> None:
        self.prebuffered -= length

    def expire_at(self, deadline: float, item: T) -> None:
        heapq.heappush(self._timers, (deadline, next(self._seq), item))

    def due(self, now: float) -> Iterator[tuple[float, T]]:
        """The deadlines at or before ``now``, soonest first, each taken out once."""
        while self._timers and self._timers[0][0] <= now:
            deadline, _, item = heapq.heappop(self._timers)
            yield deadline, item

    def wait(self, now: float, most: float = 1.0) -> float:
        """Seconds until the soonest deadline, at most ``most``."""
        if not self._timers:
            return most
        return max(0.0, min(most, self._timers[0][0] - now))

    def timed(self) -> list[T]:
        """What waits for a deadline (an item once per deadline it was given)."""
        return [item for _, _, item in self._timers]
