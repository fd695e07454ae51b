"""The parse memory budget and the per-runtime in-flight cap (pure, plain data)."""

from __future__ import annotations

import threading

from listener.edge import budget, ratelimit


def test_budget_reserves_and_releases() -> None:
    b = budget.MemoryBudget(100)
    held = b.acquire("a", 30, timeout=0)
    assert held == 30 and b.used == 30
    b.release("a", held)
    assert b.used == 0


def test_a_runtime_beyond_its_share_waits_while_others_still_fit() -> None:
    b = budget.MemoryBudget(100)  # share: 50
    assert b.acquire("noisy", 40, timeout=0) == 40
    assert b.acquire("noisy", 40, timeout=0) is None  # 80 > its share of 50
    assert b.acquire("quiet", 10, timeout=0) == 10  # the others are not affected


def test_a_reservation_larger_than_the_budget_runs_alone() -> None:
    b = budget.MemoryBudget(100)
    assert b.acquire("a", 10_000, timeout=0) == 100
    assert b.acquire("b", 1, timeout=0) is None


def test_a_waiting_reservation_proceeds_when_released() -> None:
    b = budget.MemoryBudget(100)
    first = b.acquire("a", 100, timeout=0)
    assert first == 100
    got: list[int | None] = []
    t = threading.Thread(target=lambda: got.append(b.acquire("b", 50, timeout=10)))
    t.start()
    b.release("a", first)
    t.join(10)
    assert got == [50]


def test_in_flight_is_capped_per_runtime() -> None:
    f = ratelimit.InFlight(2)
    assert f.acquire("a") and f.acquire("a")
    assert not f.acquire("a")
    assert f.acquire("b")  # another runtime has its own share
    f.release("a")
    assert f.acquire("a")


def test_empty_bucket_is_seen_before_the_body_is_read() -> None:
    now = [0.0]
    buckets = ratelimit.TokenBuckets(rate=1.0, burst=2, clock=lambda: now[0])
    assert buckets.empty("a") == 0.0
    assert buckets.take("a", 2) == 0.0
    assert buckets.empty("a") == 1.0  # one second until the next token
    assert buckets.empty("b") == 0.0
    now[0] = 1.0
    assert buckets.empty("a") == 0.0
