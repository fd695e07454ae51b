"""How fast one run sends, and when the next run may start after failures (pure).

``Pacer``: a token bucket per run (records per second with a burst), so a run that finds
many differences (a fresh runtime, a long listener outage) does not flood the listener;
``wait_for(n)`` says how long to sleep before sending ``n`` records.

``Backoff``: after a run stopped because the listener failed, the next runs are skipped
until ``not_before``: exponential with full jitter over the consecutive failures, at least
the listener's ``Retry-After``, capped. A successful run resets it.
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Callable

from tether.runtime import sender


class Pacer:
    def __init__(self, rate: float, burst: int, now: float) -> None:
        if rate <= 0 or burst < 1:
            raise ValueError("rate must be > 0 and burst >= 1")
        self.rate = rate
        self.burst = float(burst)
        self._tokens = float(burst)
        self._at = now

    def wait_for(self, n: int, now: float) -> float:
        """Seconds to wait before ``n`` records may go; takes the tokens (the caller sends
        after the wait). A batch larger than the burst is admitted once the bucket is full
        and leaves it in debt."""
        self._tokens = min(self.burst, self._tokens + (now - self._at) * self.rate)
        self._at = now
        need = min(float(n), self.burst)
        wait = 0.0 if self._tokens >= need else (need - self._tokens) / self.rate
        self._tokens -= n
        self._at = now + wait
        self._tokens += wait * self.rate
        return wait


@dataclasses.dataclass
class Backoff:
    base: float
    cap: float
    failures: int = 0
    not_before: float = 0.0

    def ready(self, now: float) -> bool:
        return now >= self.not_before

    def failed(
        self,
        now: float,
        retry_after: float | None = None,
        rand: Callable[[], float] = random.random,
    ) -> float:
        """Record a failed run; returns the delay before the next run may start."""
        outcome = sender.Outcome("retryable", 0, "run", retry_after)
        delay = sender.retry_delay(outcome, self.failures, base=self.base, cap=self.cap, rand=rand)
        self.failures += 1
        self.not_before = now + delay
        return delay

    def succeeded(self) -> None:
        self.failures = 0
        self.not_before = 0.0
