"""Per-run rate limit and the backoff between failed runs (pure, with a fake clock)."""

from __future__ import annotations

import pytest

from poller import pacing


def test_pacer_admits_a_burst_then_paces() -> None:
    p = pacing.Pacer(rate=10, burst=20, now=0.0)
    assert p.wait_for(20, 0.0) == 0.0
    assert p.wait_for(10, 0.0) == pytest.approx(1.0)
    # after waiting the second batch went at t=1.0; the next 10 need one more second
    assert p.wait_for(10, 1.0) == pytest.approx(1.0)
    assert p.wait_for(5, 10.0) == 0.0  # refilled (capped at the burst)


def test_pacer_admits_a_batch_larger_than_the_burst_in_debt() -> None:
    p = pacing.Pacer(rate=10, burst=5, now=0.0)
    assert p.wait_for(50, 0.0) == 0.0
    assert p.wait_for(5, 0.0) == pytest.approx(5.0)  # 45 records of debt + 5


def test_pacer_rejects_nonsense() -> None:
    with pytest.raises(ValueError):
        pacing.Pacer(rate=0, burst=1, now=0.0)


def test_backoff_grows_honours_retry_after_and_resets() -> None:
    b = pacing.Backoff(base=1.0, cap=8.0)
    assert b.ready(0.0)
    delays = [b.failed(100.0, rand=lambda: 1.0) for _ in range(6)]
    assert delays == [1.0, 2.0, 4.0, 8.0, 8.0, 8.0]
    assert not b.ready(107.0) and b.ready(108.0)
    assert b.failed(200.0, retry_after=30.0, rand=lambda: 0.0) == 30.0
    b.succeeded()
    assert b.ready(0.0) and b.failures == 0
