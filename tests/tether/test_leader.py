"""The Lease decision, with plain data."""

from __future__ import annotations

import datetime

from tether import leader

NOW = datetime.datetime(2026, 11, 30, 10, 0, tzinfo=datetime.UTC)


def view(holder: str | None, age_s: float, duration: int = 15) -> leader.LeaseView:
    return leader.LeaseView(holder, NOW - datetime.timedelta(seconds=age_s), duration)


def test_missing_or_released_lease_is_acquired() -> None:
    assert leader.decide(None, "me", NOW) == "acquire"
    assert leader.decide(view(None, 1), "me", NOW) == "acquire"
    assert leader.decide(view("", 1), "me", NOW) == "acquire"


def test_own_lease_is_renewed() -> None:
    assert leader.decide(view("me", 1), "me", NOW) == "renew"
    assert leader.decide(view("me", 100), "me", NOW) == "renew"


def test_live_foreign_lease_is_respected() -> None:
    assert leader.decide(view("other", 14.9), "me", NOW) == "wait"


def test_expired_foreign_lease_is_taken() -> None:
    assert leader.decide(view("other", 15), "me", NOW) == "acquire"
    assert leader.decide(leader.LeaseView("other", None, None), "me", NOW) == "acquire"
