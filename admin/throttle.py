"""How often one source may sign in, or make the admin part ask the KCP for a TokenReview.

A token bucket per source address: ``per_minute`` takes a minute, bursts of up to
``per_minute``. Every sign-in attempt takes one (a valid token reused, whose review the
cache answers, included), and so does a page's bearer token the cache cannot answer. An IPv4 address
is one source, an IPv6 address counts by its /64 (one host holds a whole /64). At most
``max_sources`` buckets are kept, the least recently used dropped first (a dropped source starts
again with a full bucket, so memory stays bounded whatever the number of addresses). Pure but for
the lock; the clock is injected.
"""

from __future__ import annotations

import ipaddress
import math
import threading
import time
from collections import OrderedDict
from collections.abc import Callable


class Throttled(Exception):  # noqa: N818 - a decision, not a failure
    """The source has no review left: retry after ``retry_after`` seconds."""

    def __init__(self, retry_after: int) -> None:
        super().__init__(f"too many sign-in attempts; retry after {retry_after}s")
        self.retry_after = retry_after


def source_of(address: str) -> str:
    """The bucket key of a peer address: itself (IPv4, anything unparsable) or its /64."""
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return address[:64]
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            return str(ip.ipv4_mapped)
        return str(ipaddress.ip_network(f"{ip}/64", strict=False))
    return str(ip)


class Buckets:
    def __init__(
        self, per_minute: float, max_sources: int, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._rate = per_minute / 60.0
        self._burst = max(1.0, float(per_minute))
        self._max, self._clock = max_sources, clock
        self._lock = threading.Lock()
        self._buckets: OrderedDict[str, tuple[float, float]] = OrderedDict()  # level, when

    def take(self, source: str) -> None:
        """One review for ``source``, or ``Throttled`` with the seconds until the next."""
        now = self._clock()
        with self._lock:
            level, when = self._buckets.pop(source, (self._burst, now))
            level = min(self._burst, level + (now - when) * self._rate)
            if level < 1.0:
                self._buckets[source] = (level, now)
                raise Throttled(max(1, math.ceil((1.0 - level) / self._rate)))
            self._buckets[source] = (level - 1.0, now)
            while len(self._buckets) > self._max:
                self._buckets.popitem(last=False)

    def __len__(self) -> int:
        return len(self._buckets)
