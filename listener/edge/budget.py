"""The parse memory budget of one worker process: bytes reserved before a body is parsed.

A parsed JSON body takes up to ``settings.PARSE_AMPLIFICATION`` times its size in Python
objects. Before parsing, a request reserves ``len(body) * amplification`` bytes from the
worker's budget and releases them when the request ends (its parsed records live until
they are persisted, so the reservation covers that too); when the budget is spent it waits
(at most ``parse_wait``) and is then answered 503 with ``Retry-After``. One runtime may
hold at most half of the budget beyond its first reservation, so a runtime sending
maximum-size bodies on every connection leaves the rest to everyone else: a small body (a
few KiB, the common case) does not wait behind it. A reservation larger than the budget is cut to it
(it then runs alone), so every body within the size cap can be parsed.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable


class MemoryBudget:
    def __init__(self, limit: int, clock: Callable[[], float] = time.monotonic) -> None:
        self.limit = limit
        self.share = max(1, limit // 2)
        self._clock = clock
        self._cond = threading.Condition()
        self._used = 0
        self._by_key: Counter[str] = Counter()

    @property
    def used(self) -> int:
        with self._cond:
            return self._used

    def _fits(self, key: str, amount: int) -> bool:
        if self._used + amount > self.limit:
            return False
        # a runtime's first reservation always fits when the total does; more of them only
        # within its share, so no runtime starves the others nor is starved by them
        held = self._by_key.get(key, 0)
        return held == 0 or held + amount <= self.share

    def acquire(self, key: str, amount: int, timeout: float) -> int | None:
        """Reserve ``amount`` bytes for ``key``; the amount reserved (to ``release``), or None
        when it did not fit within ``timeout`` seconds."""
        amount = max(1, min(amount, self.limit))
        deadline = self._clock() + timeout
        with self._cond:
            while not self._fits(key, amount):
                remaining = deadline - self._clock()
                if remaining <= 0:
                    return None
                self._cond.wait(remaining)
            self._used += amount
            self._by_key[key] += amount
            return amount

    def release(self, key: str, amount: int) -> None:
        with self._cond:
            self._used -= amount
            self._by_key[key] -= amount
            if self._by_key[key] <= 0:
                del self._by_key[key]
            self._cond.notify_all()
