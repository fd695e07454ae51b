"""How a fleet's senders come back after a 10-minute KCP outage, from the parts' own backoff
(plain data; the fault suite has one runtime, so the herd is computed, not measured).

The worst case for a herd: every runtime's webhook has a batch in flight when the KCP goes
down, so all fail at the same instant and, without jitter, would retry in lockstep
(0.2, 0.4, ... 30 s) and all return in the same second. ``tether.runtime.sender.retry_delay``
(full jitter, at least ``Retry-After``) must spread them; ``poller.pacing.Backoff`` (the
pollers' skipped runs, capped at 600 s) spreads the pollers over minutes. The numbers are
printed (docs/operations.md, "What each failure costs").
"""

from __future__ import annotations

import random

from poller.pacing import Backoff
from tether.runtime import sender

N, OUTAGE = 1000, 600.0  # runtimes; seconds
WEBHOOK_BASE, WEBHOOK_CAP = 0.2, 30.0  # TETHER_WEBHOOK_RETRY_{BASE,CAP}_SECONDS defaults
POLLER_BASE, POLLER_CAP, INTERVAL, JITTER = 5.0, 600.0, 60.0, 6.0  # the poller's defaults


def webhook_return(rng: random.Random, retry_after: float | None) -> float:
    """Seconds after the recovery of a webhook's first attempt (it failed first at 0)."""
    t, attempt = 0.0, 0
    outcome = sender.Outcome("retryable", 503, "http-503", retry_after)
    while t < OUTAGE:
        t += sender.retry_delay(
            outcome, attempt, base=WEBHOOK_BASE, cap=WEBHOOK_CAP, rand=rng.random
        )
        attempt += 1
    return t - OUTAGE


def poller_return(rng: random.Random, retry_after: float | None) -> float:
    """Seconds after the recovery of a poller's first run (its interval's phase random)."""
    backoff, t = Backoff(POLLER_BASE, POLLER_CAP), rng.uniform(0, INTERVAL)
    while True:
        run = t + rng.uniform(0, JITTER)
        if backoff.ready(run):
            if run >= OUTAGE:
                return run - OUTAGE
            backoff.failed(run, retry_after, rand=rng.random)
        t += INTERVAL


def per_second(times: list[float], seconds: int) -> list[int]:
    return [sum(1 for x in times if s <= x < s + 1) for s in range(seconds)]


def test_webhooks_failing_together_come_back_spread_over_the_backoff_cap() -> None:
    rng = random.Random(29)
    for retry_after in (5.0, None):  # the listener's 503; a gateway's without the header
        back = sorted(webhook_return(rng, retry_after) for _ in range(N))
        seconds = per_second(back, 30)
        print(
            f"webhooks, Retry-After {retry_after}: median {back[N // 2]:.1f} s, p90 "
            f"{back[int(N * 0.9)]:.1f} s, last {back[-1]:.1f} s; busiest second "
            f"{max(seconds)} of {N}; first 5 s {sum(seconds[:5])}"
        )
        assert back[-1] <= WEBHOOK_CAP  # every one within one backoff cap of the recovery
        assert max(seconds) <= N // 10, f"a herd: {seconds}"
        assert back[N // 2] >= 3.0, f"half came back within 3 s: {back[:10]}"


def test_pollers_come_back_spread_over_minutes() -> None:
    rng = random.Random(29)
    back = sorted(poller_return(rng, 5.0) for _ in range(N))
    first_minute = sum(1 for x in back if x < 60)
    print(
        f"pollers: median {back[N // 2]:.0f} s, p90 {back[int(N * 0.9)]:.0f} s, last "
        f"{back[-1]:.0f} s; {first_minute} of {N} in the first minute"
    )
    assert max(per_second(back, 60)) <= N // 20
    assert first_minute <= N // 2
    assert back[-1] <= POLLER_CAP + INTERVAL + JITTER
