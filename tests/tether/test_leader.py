"""The Lease decision, with plain data: by the time this process observed the Lease
record change (its own monotonic clock), never by the Lease's remote ``renewTime``."""

from __future__ import annotations

import datetime

import pytest

from tether.runtime import leader

NOW = datetime.datetime(2026, 11, 30, 10, 0, tzinfo=datetime.UTC)


def stamp(at: datetime.datetime) -> str:
    return at.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def view(
    holder: str | None,
    renew: str | None = "2026-11-30T10:00:00.000000Z",
    duration: int | None = 15,
    rv: str | None = "1",
) -> leader.LeaseView:
    return leader.LeaseView(holder, renew, duration, rv)


def test_missing_or_released_lease_is_acquired() -> None:
    assert leader.decide(None, "me", None, 0.0, 15) == "acquire"
    for holder in (None, ""):
        v = view(holder)
        assert leader.decide(v, "me", leader.observe(None, v, 5.0), 5.0, 15) == "acquire"


def test_own_lease_is_renewed() -> None:
    v = view("me")
    assert leader.decide(v, "me", leader.observe(None, v, 0.0), 100.0, 15) == "renew"


def test_a_foreign_lease_is_taken_only_after_its_duration_unchanged_on_our_clock() -> None:
    v = view("other")
    seen = leader.observe(None, v, 100.0)
    assert leader.decide(v, "me", seen, 100.0, 15) == "wait"  # first sight: wait
    assert leader.decide(v, "me", seen, 114.9, 15) == "wait"
    assert leader.decide(v, "me", seen, 115.0, 15) == "acquire"
    # a Lease that names no duration: ours
    bare = view("other", duration=None)
    assert leader.decide(bare, "me", leader.observe(None, bare, 0.0), 9.9, 10) == "wait"
    assert leader.decide(bare, "me", leader.observe(None, bare, 0.0), 10.0, 10) == "acquire"


@pytest.mark.parametrize("field", ["holder", "renew", "rv"])
def test_any_change_of_the_record_restarts_the_wait(field: str) -> None:
    v = view("other")
    seen = leader.observe(None, v, 0.0)
    assert seen is not None and leader.observe(seen, v, 14.0) is seen  # unchanged: kept
    changed = {
        "holder": view("third"),
        "renew": view("other", renew="x"),
        "rv": view("other", rv="2"),
    }[field]
    later = leader.observe(seen, changed, 14.0)
    assert later is not None and later.since == 14.0
    assert leader.decide(changed, "me", later, 20.0, 15) == "wait"
    assert leader.decide(changed, "me", later, 29.0, 15) == "acquire"
    assert leader.observe(later, None, 30.0) is None  # deleted: nothing observed


@pytest.mark.parametrize("skew_s", [-600, -15, 0, 15, 600])
def test_skewed_clocks_change_nothing(skew_s: int) -> None:
    """A holder that renews every 2 s with its wall clock ``skew_s`` off ours: a follower
    never takes the live Lease, and takes it 15 s (its own) after the last renewal."""

    def decisions(skew: int) -> list[str]:
        seen: leader.Observed | None = None
        out: list[str] = []
        for tick in range(0, 80):  # half-seconds of the follower's monotonic clock
            mono = 1000.0 + tick / 2
            last_renew = min(tick // 4 * 2, 20)  # renews every 2 s, stops at 20 s
            wall = NOW + datetime.timedelta(seconds=last_renew + skew)
            v = view("other", renew=stamp(wall), rv=str(last_renew))
            seen = leader.observe(seen, v, mono)
            out.append(leader.decide(v, "me", seen, mono, 15))
        return out

    got = decisions(skew_s)
    assert got == decisions(0)
    first = got.index("acquire")
    assert first / 2 == 35.0  # last change seen at 20 s, plus 15 s, on the follower's clock
    assert set(got[:first]) == {"wait"}


def test_the_written_duration_is_never_shorter_than_the_configured_one() -> None:
    assert leader.lease_seconds(2.5) == 3
    assert leader.lease_seconds(15.0) == 15
    assert leader.lease_seconds(0.2) == 1
