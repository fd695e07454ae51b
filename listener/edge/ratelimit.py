"""Rate limiting: a token bucket per runtime and a cap on requests in flight.

Both are kept per runtime and live in the memory of one worker process (no shared state, nothing
needed across restarts): with R replicas of W workers a runtime may reach R*W times the configured
rate, which is what the settings are sized for (see docs/listener.md). A POST costs one token
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

    def empty(self, key: str) -> float:
        """0.0 when ``key`` has at least one token (nothing taken), else the seconds until it
        has one: checked before a body is read, so an exhausted runtime costs no read."""
        now = self._clock()
        with self._lock:
            tokens, at = self._buckets.get(key, (float(self.burst), now))
        tokens = min(float(self.burst), tokens + (now - at) * self.rate)
        return 0.0 if tokens >= 1 else (1 - tokens) / self.rate

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
    """A non-blocking cap on the concurrent requests of each runtime (one over it gets
    429): one runtime never holds more than ``limit`` of a worker's threads, whatever the
    others do. The map holds only runtimes with a request in flight."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._lock = threading.Lock()
        self._counts: dict[str, int] = {}

    def acquire(self, key: str) -> bool:
        with self._lock:
            n = self._counts.get(key, 0)
            if n >= self.limit:
                return False
            self._counts[key] = n + 1
            return True

    def release(self, key: str) -> None:
        with self._lock:
            n = self._counts.get(key, 0) - 1
            if n <= 0:
                self._counts.pop(key, None)
            else:
                self._counts[key] = n
