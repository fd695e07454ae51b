"""``listener.fleet.outage``: the last-known state summaries answered while the KCP API is
unreachable (plain data, an injected clock), and the jittered Retry-After of a 503."""

from __future__ import annotations

from listener.fleet import outage


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_a_summary_is_recalled_for_its_identity_within_the_staleness_bound() -> None:
    clock = Clock()
    last = outage.LastKnown(900, clock)
    doc = {"bucketCount": 256, "hashes": ["0" * 16] * 256, "epoch": 3}
    last.remember("rt-1", "cluster-a", doc)
    doc["epoch"] = 4  # the caller's later changes do not alter what was remembered
    assert last.recall("rt-1", "cluster-a") == {**doc, "epoch": 3}
    assert last.recall("rt-1", "cluster-b") is None  # a rebuilt cluster: a new epoch, 503
    assert last.recall("rt-2", "cluster-a") is None  # never read by this worker
    clock.now += 900
    assert last.recall("rt-1", "cluster-a") is not None
    clock.now += 0.5
    assert last.recall("rt-1", "cluster-a") is None  # older than the bound: 503 again


def test_off_remembers_nothing() -> None:
    last = outage.LastKnown(0, Clock())
    last.remember("rt-1", "", {"epoch": 0})
    assert last.recall("rt-1", "") is None


def test_the_newest_read_wins_and_the_memory_is_bounded() -> None:
    clock = Clock()
    last = outage.LastKnown(60, clock)
    last.remember("rt-1", "", {"epoch": 1})
    clock.now += 50
    last.remember("rt-1", "", {"epoch": 2})
    clock.now += 50  # 100 s after the first read, 50 s after the second
    assert last.recall("rt-1", "") == {"epoch": 2}
    one = last.bytes
    small = outage.LastKnown(60, clock)
    old, outage.MAX_BYTES = outage.MAX_BYTES, 2 * one
    try:
        for rid in ("a", "b", "c"):
            small.remember(rid, "", {"epoch": 2})
    finally:
        outage.MAX_BYTES = old
    assert small.bytes <= 2 * one
    assert small.recall("a", "") is None and small.recall("c", "") == {"epoch": 2}


def test_a_summary_is_kept_compressed_in_about_3_kb() -> None:
    doc = {
        "bucketCount": 256,
        "hashes": [f"{(i * 0x9E3779B97F4A7C15) % 2**64:016x}" for i in range(256)],
        "counts": [i % 40 for i in range(256)],
        "epoch": 3,
    }
    last = outage.LastKnown(60, Clock())
    last.remember("rt-1", "cluster-a", doc)
    assert last.recall("rt-1", "cluster-a") == doc
    assert last.bytes < 3500, last.bytes  # 10,000 runtimes in the 32 MiB bound


def test_retry_after_is_spread_over_base_to_twice_base() -> None:
    assert outage.retry_after(5, lambda: 0.0) == 5
    assert outage.retry_after(5, lambda: 0.999) == 9
    assert {outage.retry_after(2) for _ in range(200)} == {2, 3}
