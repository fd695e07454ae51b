"""Rate limiting: a token bucket per runtime and a cap on requests in flight.

Both live in the memory of one worker process (no shared state, nothing needed across
restarts): with R replicas of W workers a runtime may reach R*W times the configured rate,
which is what the settings are sized for (see docs/listener.md). A POST costs one token
per record, a GET of the state one token; a batch larger than the bucket's capacity
(burst) costs the whole bucket, so it is never refused forever. The bucket map is bounded
(least recently used dropped, i.e. refilled).
"""

from __future__ import annotations

import math
import threading
import time
from collections import OrderedDict
from collections.abc import Callable

MAX_BUCKETS = 100_000


class TokenBuckets:
    def __init__(
        self, rate: float, burst: int, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.rate = rate
        self.burst = burst
        self._clock = clock
        self._lock = threading.Lock()
        self._buckets: OrderedDict[str, tuple[float, float]] = OrderedDict()  # tokens, at

    def take(self, key: str, cost: int) -> float:
        """Take ``cost`` tokens; 0.0 when allowed, else the seconds to wait (nothing taken)."""
        cost = min(cost, self.burst)
        now = self._clock()
        with self._lock:
            tokens, at = self._buckets.get(key, (float(self.burst), now))
            tokens = min(float(self.burst), tokens + (now - at) * self.rate)
            if tokens >= cost:
                self._buckets[key] = (tokens - cost, now)
                wait = 0.0
            else:
                self._buckets[key] = (tokens, now)
                wait = (cost - tokens) / self.rate
            self._buckets.move_to_end(key)
            while len(self._buckets) > MAX_BUCKETS:
                self._buckets.popitem(last=False)
        return wait


def retry_after(wait: float) -> int:
    """The ``Retry-After`` header value (whole seconds, at least 1)."""
    return max(1, math.ceil(wait))


class InFlight:
    """A non-blocking cap on concurrent requests (a request over the cap gets 429)."""

    def __init__(self, limit: int) -> None:
        self._sem = threading.BoundedSemaphore(limit)

    def acquire(self) -> bool:
        return self._sem.acquire(blocking=False)

    def release(self) -> None:
        self._sem.release()
