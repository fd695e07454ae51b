"""A runtime's requests per minute as one listener worker saw them, compact (pure, plain data).

Every authenticated request of a runtime counts in its heartbeat history (``beats`` of the
minute buckets in ``tether.wire.delivery``). A runtime that only polls sends a heartbeat a minute,
and merging those counts into its ``RuntimeDelivery`` is a read and a write of the KCP: once
per worker per ``listener.fleet.deliveries.BEATS_FLUSH_SECONDS``, so a worker holds them for
most of an hour. Held as ``delivery.Delta`` minute buckets that was 106 MiB per worker for
5,000 runtimes and 50 minutes (measured with tracemalloc); held here it is one array of at
most ``delivery.WINDOW_MINUTES`` 32-bit counts per runtime, 2.1 MiB for the same
(``tests/tether/test_beatcounts.py``), folded into the delta when the runtime is merged
(``listener.fleet.deliveries``).
"""

from __future__ import annotations

import datetime
from array import array
from collections.abc import Iterator

from tether.wire import delivery

MAX_COUNT = 2**32 - 1  # an array("I") count saturates here


def minute_index(t: datetime.datetime) -> int:
    """Whole minutes since the epoch (UTC) of ``t``."""
    return int(t.timestamp() // 60)


def minute_at(index: int) -> datetime.datetime:
    """The start of minute ``index`` (``minute_index``'s inverse), UTC."""
    return datetime.datetime.fromtimestamp(index * 60, datetime.UTC)


class BeatCounts:
    """Requests per minute of one runtime from minute ``first`` on, at most
    ``delivery.WINDOW_MINUTES`` minutes (older ones are dropped, as the object drops them);
    ``since``: when the first of them was counted (the caller's monotonic clock)."""

    __slots__ = ("counts", "first", "since")

    def __init__(self, minute: int, since: float) -> None:
        self.first, self.since = minute, since
        self.counts = array("I", [0])

    def add(self, minute: int) -> None:
        """One request in minute ``minute`` (a clock that went back counts in the oldest
        minute held)."""
        i = max(0, minute - self.first)
        if i >= delivery.WINDOW_MINUTES:  # keep the newest WINDOW_MINUTES minutes
            drop = i - delivery.WINDOW_MINUTES + 1
            if drop >= len(self.counts):
                self.counts = array("I")
            else:
                del self.counts[:drop]
            self.first += drop
            i -= drop
        if i >= len(self.counts):
            self.counts.extend([0] * (i + 1 - len(self.counts)))
        if self.counts[i] < MAX_COUNT:
            self.counts[i] += 1

    def minutes(self) -> Iterator[tuple[datetime.datetime, int]]:
        """(minute start, requests) of every minute with requests, oldest first."""
        for i, n in enumerate(self.counts):
            if n:
                yield minute_at(self.first + i), n

    def total(self) -> int:
        return sum(self.counts)
