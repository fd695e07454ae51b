"""The canary's decisions with plain data (``canary.probe``): when a probe succeeds, times out
or could not look, what a stage's seconds are, and what the readers take from records and
targets a tenant can influence."""

from __future__ import annotations

from typing import Any

import pytest

from canary import probe

STAGES: tuple[probe.Stage, ...] = ("stored", "injected")


def record(ns: str = "default", name: str = "tether-canary", **spec: Any) -> dict[str, Any]:
    return {"spec": {"namespace": ns, "name": name, "deleted": False, **spec}}


def test_each_stage_ends_ok_with_its_seconds_from_the_write() -> None:
    p = probe.start("n1", written_at=100.0, timeout=10.0, stages=STAGES)
    p = probe.observe(p, "stored", False, 100.4)
    p = probe.observe(p, "stored", True, 100.9)
    p = probe.observe(p, "injected", False, 101.0)
    assert not p.finished and p.pending == ("injected",)
    p = probe.observe(p, "injected", True, 102.5)
    assert p.finished
    assert [(r.stage, r.outcome) for r in p.results] == [("stored", "ok"), ("injected", "ok")]
    assert [r.seconds for r in p.results] == [pytest.approx(0.9), pytest.approx(2.5)]


def test_a_value_that_never_arrives_times_out_at_the_deadline_not_before() -> None:
    p = probe.start("n1", 0.0, 5.0, STAGES)
    p = probe.observe(p, "stored", True, 1.0)
    p = probe.observe(p, "injected", False, 4.9)
    assert probe.expire(p, 4.99) == p  # before the deadline nothing ends
    p = probe.expire(p, 5.0)
    assert p.finished
    assert [r[:2] for r in p.results] == [("stored", "ok"), ("injected", "timeout")]


def test_a_read_that_failed_last_is_read_failed_a_later_good_read_clears_it() -> None:
    p = probe.start("n1", 0.0, 5.0, STAGES)
    p = probe.observe(p, "stored", None, 1.0)
    p = probe.observe(p, "stored", False, 2.0)  # reads work again: the value is just late
    p = probe.observe(p, "injected", None, 2.0)
    p = probe.expire(p, 6.0)
    assert {r.stage: r.outcome for r in p.results} == {
        "stored": "timeout",
        "injected": "read_failed",
    }


def test_a_late_answer_is_not_a_success() -> None:
    p = probe.start("n1", 0.0, 5.0, ("stored",))
    p = probe.observe(p, "stored", True, 5.5)
    assert p.results == (probe.Result("stored", "timeout", None),)


def test_a_stage_ended_takes_no_more_reads() -> None:
    p = probe.observe(probe.start("n", 0.0, 5.0, ("stored",)), "stored", True, 1.0)
    assert probe.observe(p, "stored", None, 2.0) == p
    assert probe.observe(p, "injected", True, 2.0) == p


def test_failures_before_the_wait_end_every_stage() -> None:
    assert probe.write_failed(STAGES) == (
        probe.Result("stored", "write_failed", None),
        probe.Result("injected", "write_failed", None),
    )
    assert [r.outcome for r in probe.read_failed(("stored",))] == ["read_failed"]


def test_the_next_read_waits_one_poll_never_past_the_deadline() -> None:
    p = probe.start("n", 0.0, 5.0, ("stored",))
    assert probe.next_read(p, 1.0, 0.5) == 0.5
    assert probe.next_read(p, 4.8, 0.5) == pytest.approx(0.2)
    assert probe.next_read(p, 6.0, 0.5) == 0.0


def test_nonces_are_fresh() -> None:
    assert len({probe.nonce() for _ in range(100)}) == 100


def test_the_record_reader_takes_the_canary_configmaps_live_record_only() -> None:
    items = [
        record(name="other", data={"tether-canary": "x"}),
        record(ns="elsewhere", data={"tether-canary": "y"}),
        record(data={"tether-canary": "n1", "k": "v"}),
    ]
    assert probe.record_nonce(items, "default", "tether-canary", "tether-canary") == "n1"
    assert probe.record_nonce(items[:2], "default", "tether-canary", "tether-canary") is None
    tomb = [record(deleted=True, data={"tether-canary": "n1"})]
    assert probe.record_nonce(tomb, "default", "tether-canary", "tether-canary") is None


@pytest.mark.parametrize(
    "items",
    [
        [None, "text", 7, {"spec": "x"}, {"spec": None}, {}],
        [record(data="not a map")],
        [record(data={"tether-canary": 12})],
        [record(data={"tether-canary": ["n1"]})],
        [record(data={"tether-canary": "n" * 10_000})],  # no canary value is that long
    ],
)
def test_hostile_records_are_never_a_success_nor_an_error(items: list[Any]) -> None:
    assert probe.record_nonce(items, "default", "tether-canary", "tether-canary") is None


def test_the_target_reader_follows_the_field_path() -> None:
    obj = {"spec": {"configuration": {"tether-canary": "n1", "color": "blue"}}}
    assert probe.target_nonce(obj, ("spec", "configuration"), "tether-canary") == "n1"
    assert probe.target_nonce(obj, ("spec", "other"), "tether-canary") is None
    for hostile in ({"spec": "x"}, {"spec": {"configuration": ["n1"]}}, {}, {"spec": None}):
        assert probe.target_nonce(hostile, ("spec", "configuration"), "tether-canary") is None
