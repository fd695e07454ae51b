"""The bookkeeping of the bounded worker's connections (tether.http.connledger): per-peer caps,
the read-ahead budget, deadlines soonest first."""

from __future__ import annotations

from tether.http import connledger, httpconn


def test_a_peer_at_its_cap_is_not_counted_and_leaving_makes_room() -> None:
    ledger: connledger.Ledger[str] = connledger.Ledger(httpconn.Limits(max_connections_per_peer=2))
    assert ledger.admit("cn:a") and ledger.admit("cn:a")
    assert not ledger.admit("cn:a")
    assert ledger.admit("cn:b")
    ledger.leave("cn:a")
    assert ledger.admit("cn:a")


def test_read_ahead_is_bounded_per_body_and_in_all() -> None:
    ledger: connledger.Ledger[str] = connledger.Ledger(
        httpconn.Limits(prebuffer_bytes=10, prebuffer_budget=15)
    )
    assert not ledger.reserve(0) and not ledger.reserve(11)
    assert ledger.reserve(10) and not ledger.reserve(6)
    assert ledger.reserve(5) and ledger.prebuffered == 15
    ledger.release(10)
    assert ledger.reserve(10)


def test_deadlines_come_due_soonest_first_once() -> None:
    ledger: connledger.Ledger[str] = connledger.Ledger(httpconn.Limits())
    assert ledger.wait(now=0.0) == 1.0
    ledger.expire_at(5.0, "late")
    ledger.expire_at(2.0, "early")
    ledger.expire_at(2.0, "early-too")
    assert ledger.wait(now=1.5) == 0.5 and ledger.wait(now=9.0) == 0.0
    assert sorted(ledger.timed()) == ["early", "early-too", "late"]
    assert list(ledger.due(now=2.0)) == [(2.0, "early"), (2.0, "early-too")]
    assert list(ledger.due(now=2.0)) == []
    assert ledger.timed() == ["late"]
