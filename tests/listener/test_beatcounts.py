"""listener.fleet.beatcounts (pure): a runtime's requests per minute, held compactly by a worker
until they are merged, and listener.fleet.deliveries' decisions about them (plain data; the
KCP is never called by these decisions)."""

from __future__ import annotations

import datetime
import tracemalloc
from typing import Any

from listener import metrics
from listener.fleet import beatcounts, deliveries
from tether.wire import delivery

T0 = datetime.datetime(2026, 12, 2, 1, 5, 7, tzinfo=datetime.UTC)
M0 = beatcounts.minute_index(T0)


def test_minutes_round_trip_and_counts_land_in_their_minute() -> None:
    assert beatcounts.minute_at(M0) == delivery.minute_of(T0)
    b = beatcounts.BeatCounts(M0, 0.0)
    for m in (M0, M0, M0 + 3, M0 - 2):  # a clock that went back: the oldest minute held
        b.add(m)
    assert list(b.minutes()) == [(beatcounts.minute_at(M0), 3), (beatcounts.minute_at(M0 + 3), 1)]
    assert b.total() == 4


def test_at_most_the_window_is_kept_newest_first_and_a_long_gap_starts_afresh() -> None:
    b = beatcounts.BeatCounts(M0, 0.0)
    for m in range(M0, M0 + 2 * delivery.WINDOW_MINUTES):
        b.add(m)
    assert len(b.counts) == delivery.WINDOW_MINUTES
    assert b.first == M0 + delivery.WINDOW_MINUTES and b.total() == delivery.WINDOW_MINUTES
    b.add(M0 + 10 * delivery.WINDOW_MINUTES)
    assert list(b.minutes()) == [(beatcounts.minute_at(M0 + 10 * delivery.WINDOW_MINUTES), 1)]


def test_a_count_saturates_instead_of_overflowing() -> None:
    b = beatcounts.BeatCounts(M0, 0.0)
    b.counts[0] = beatcounts.MAX_COUNT
    b.add(M0)
    assert b.counts[0] == beatcounts.MAX_COUNT


def test_5000_quiet_runtimes_for_50_minutes_fit_in_a_few_mib() -> None:
    """What a worker holds for a fleet that only polls until each runtime's merge: the
    ``delivery.Delta`` minute buckets it held before took ~110 MB for this."""
    tracemalloc.start()
    try:
        held = {}
        for r in range(5000):
            b = held[f"rt-{r}"] = beatcounts.BeatCounts(M0, 0.0)
            for m in range(M0, M0 + 50):
                b.add(m)
        size, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert size < 4 << 20, size


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def listener_deliveries(
    clock: Clock,
    max_runtimes: int = deliveries.MAX_RUNTIMES,
) -> deliveries.Deliveries:
    kcp: Any = None  # seen, due and take never call the KCP
    return deliveries.Deliveries(
        kcp,
        "kcp",
        1.0,
        15.0,
        metrics.Metrics(),
        clock=clock,
        now=lambda: T0,
        max_runtimes=max_runtimes,
    )


def test_requests_alone_wait_for_the_beats_interval_and_fold_into_the_next_merge() -> None:
    clock = Clock()
    d = listener_deliveries(clock)
    for _ in range(3):
        d.seen("rt-quiet")
        d.seen("rt-busy")
    d.record("rt-busy", {"observedAt": delivery.fmt(T0), "name": "a"}, "persisted")
    assert len(d) == 2
    clock.t += 16  # the flush interval: only the runtime with a record is due
    with d._lock:
        assert d._due("rt-busy", clock.t) and not d._due("rt-quiet", clock.t)
        delta = d._take("rt-busy", clock.t)
    status = delivery.merge(None, delta, "rt-busy", T0)
    assert [m["beats"] for m in status["minutes"]] == [3] and status["minutes"][0]["webhook"] == 1
    clock.t += deliveries.BEATS_FLUSH_SECONDS - 16
    with d._lock:
        assert d._due("rt-quiet", clock.t)
        quiet = d._take("rt-quiet", clock.t)
    assert [m["beats"] for m in delivery.merge(None, quiet, "rt-quiet", T0)["minutes"]] == [3]
    assert len(d) == 0


def test_the_beats_map_is_bounded_and_its_overflow_counted() -> None:
    clock = Clock()
    d = listener_deliveries(clock, max_runtimes=2)
    for r in ("a", "b", "c"):
        d.seen(r)
    assert len(d) == 2
    assert d._metrics.delivery_dropped._value.get() == 1
