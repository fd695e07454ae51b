"""The enroller's bounding decisions with plain data (enroller.decide): dispatch with a
per-runtime deadline, backoff, certificate issuance, the CA rollover's end and quarantine."""

from __future__ import annotations

import datetime
from typing import Any

import pytest

from enroller import decide

T0 = datetime.datetime(2026, 11, 30, 12, 0, tzinfo=datetime.UTC)
MIN = datetime.timedelta(minutes=1)


def dispatch(**kw: Any) -> decide.DispatchKind:
    facts: dict[str, Any] = dict(running="no", in_flight=0, concurrency=2, workers_busy=0, workers=8, waited=False)
    facts.update(kw)
    return decide.dispatch(**facts)


def test_dispatch_starts_work_within_the_runs_concurrency() -> None:
    assert dispatch() == "dispatch"
    assert dispatch(in_flight=1) == "dispatch"
    assert dispatch(in_flight=2) == "wait"


def test_a_straggler_still_running_is_never_started_again() -> None:
    assert dispatch(running="overdue") == "busy"
    assert dispatch(running="overdue", in_flight=2) == "busy"  # not even a slot is taken


def test_work_another_run_started_in_time_is_joined_not_doubled() -> None:
    assert dispatch(running="in_time") == "join"
    assert dispatch(running="in_time", in_flight=2) == "wait"


def test_with_every_worker_held_the_run_waits_once_then_gives_up() -> None:
    assert dispatch(workers_busy=8) == "wait"
    assert dispatch(workers_busy=8, in_flight=1, waited=True) == "wait"  # its own work will free one
    assert dispatch(workers_busy=8, waited=True) == "no_worker"
    assert dispatch(workers_busy=7, waited=True) == "dispatch"


def test_backoff_doubles_to_its_cap() -> None:
    assert [decide.backoff(n, 10, 600) for n in range(0, 9)] == [0, 10, 20, 40, 80, 160, 320, 600, 600]
    assert decide.backoff(10_000, 10, 600) == 600  # no overflow


def cert(due: str | None = "expiring", pending: bool = False, recent: int = 0, limit: int = 6) -> str:
    return decide.certificate(decide.CertificateFacts(due, pending, recent, limit))


def test_a_certificate_is_issued_only_when_due_and_none_waits_to_be_applied() -> None:
    assert cert(due=None) == "keep"
    assert cert(due=None, recent=100) == "keep"
    assert cert() == "issue"
    assert cert(pending=True) == "reuse"
    assert cert(pending=True, recent=100) == "reuse"  # reuse is never limited


def test_issuance_stops_at_the_hourly_limit() -> None:
    assert cert(recent=5) == "issue"
    assert cert(recent=6) == "rate_limited"


def test_recent_issuances_are_those_of_the_last_hour() -> None:
    times = [T0 - 61 * MIN, T0 - 59 * MIN, T0 - MIN, T0]
    assert decide.recent(times, T0) == (T0 - 59 * MIN, T0 - MIN, T0)
    assert decide.recent([T0 + MIN], T0) == ()  # a clock that went back forgets the future
    assert decide.next_issuance(times[1:], T0, 6) == T0
    assert decide.next_issuance(times[1:], T0, 3) == T0 + MIN  # when the oldest leaves the window
    assert decide.next_issuance(times[1:], T0, 2) == T0 + 59 * MIN


def roll(**kw: Any) -> decide.Rollover:
    facts: dict[str, Any] = dict(current="new", previous="old", started=T0, now=T0 + 10 * MIN,
                                 propagation=3 * MIN, deadline=60 * MIN, held={}, failing=frozenset())
    facts.update(kw)
    return decide.rollover(decide.RolloverFacts(**facts))


def test_no_rollover_nothing_to_decide() -> None:
    assert roll(previous=None, started=None).kind == "none"


def test_never_before_the_propagation_time() -> None:
    assert roll(now=T0 + 2 * MIN).kind == "wait"
    assert roll(now=T0 + 2 * MIN, deadline=MIN).kind == "wait"  # a deadline shorter than it waits too
    assert roll(now=T0 + 3 * MIN, deadline=MIN) == decide.Rollover("finish", "complete")
    assert roll(started=None).kind == "wait"


def test_every_runtime_renewed_ends_it_early() -> None:
    assert roll(held={"a": "new", "b": "new", "c": "", "d": None}) == decide.Rollover("finish", "complete")


def test_a_runtime_on_the_old_ca_or_a_failing_one_holds_it_until_the_deadline() -> None:
    assert roll(held={"a": "new", "b": "old"}).kind == "wait"
    assert roll(held={"a": "new", "b": None}, failing=frozenset({"b"})).kind == "wait"
    assert roll(held={"a": "new", "b": "old"}, now=T0 + 59 * MIN).kind == "wait"


def test_at_the_deadline_it_ends_whatever_and_names_who_is_quarantined() -> None:
    r = roll(held={"a": "new", "c": "old", "b": "old", "d": None}, failing=frozenset({"b", "d"}),
             now=T0 + 60 * MIN)
    assert r == decide.Rollover("finish", "deadline", ("b", "c"))  # unknown (d) is not named
    assert roll(failing=frozenset({"x"}), now=T0 + 61 * MIN) == decide.Rollover("finish", "deadline", ())


@pytest.mark.parametrize(("held", "previous", "expected"), [
    ("new", None, False), ("new", "old", False), ("old", "old", False),  # trusted
    ("old", None, True), ("foreign", None, True), ("older", "old", True),  # not any more
    (None, None, False), ("", None, False),  # unknown, or none held
])
def test_quarantine_is_derived_from_the_issuer_of_the_certificate_held(
        held: str | None, previous: str | None, expected: bool) -> None:
    assert decide.quarantined(held, "new", previous) is expected
