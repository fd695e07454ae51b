"""The staged rollout's decisions (``enroller.rollout``) on plain data."""

from __future__ import annotations

import dataclasses
import datetime

import pytest

from enroller import rollout

T0 = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)
GATE = rollout.Gate(
    timeout=datetime.timedelta(seconds=300), max_refusals=5, heartbeat=True, max_unhealthy=0
)
IDS = [f"rt-{i:03d}" for i in range(200)]


def healthy(beat_after: datetime.datetime = T0) -> rollout.Health:
    return rollout.Health(
        applied=True,
        failure=None,
        serving=True,
        beat=beat_after + datetime.timedelta(seconds=1),
        refusals=0,
    )


def test_waves_are_cumulative_percentages_with_at_least_one_runtime() -> None:
    w = rollout.waves(IDS, (1, 10, 100))
    assert [len(x) for x in w] == [2, 18, 180]
    assert sorted(sum(w, [])) == sorted(IDS)
    assert [len(x) for x in rollout.waves(IDS[:3], (1, 10, 100))] == [1, 1, 1]
    assert [len(x) for x in rollout.waves(IDS[:2], (1, 10, 100))] == [1, 1]
    assert rollout.waves([], (1, 10, 100)) == []


def test_waves_are_stable_when_the_fleet_changes() -> None:
    """A runtime's place depends on its ID's hash, not on the list's order or its neighbours."""
    assert rollout.waves(IDS, (1, 10, 100)) == rollout.waves(list(reversed(IDS)), (1, 10, 100))
    order = rollout.order(IDS)
    assert rollout.order(IDS[:150]) == [r for r in order if r in set(IDS[:150])]


@pytest.mark.parametrize(
    "text,want",
    [("1,10,100", (1.0, 10.0, 100.0)), ("5, 50", (5.0, 50.0, 100.0)), ("100", (100.0,))],
)
def test_parse_waves(text: str, want: tuple[float, ...]) -> None:
    assert rollout.parse_waves(text) == want


@pytest.mark.parametrize("text", ["", "10,5", "0,50", "1,x", "150"])
def test_parse_waves_refuses(text: str) -> None:
    with pytest.raises(ValueError):
        rollout.parse_waves(text)


def test_begin_new_bundle_and_assignment() -> None:
    first = rollout.begin(None, "aaa", IDS[:3], (1, 10, 100), T0)
    assert (first.phase, first.good) == ("Complete", "aaa")
    s = rollout.begin(first, "bbb", IDS[:3], (1, 10, 100), T0)
    assert (s.phase, s.good, s.target, s.wave) == ("Progressing", "aaa", "bbb", 0)
    w0, w1, w2 = s.waves
    assert rollout.assign(s, w0[0]) == "target"
    assert (
        rollout.assign(s, w1[0])
        == rollout.assign(s, w2[0])
        == rollout.assign(s, "newcomer")
        == "good"
    )
    assert rollout.begin(s, "bbb", IDS, (1, 10, 100), T0) is s  # the same bundle: the same rollout


def test_gate_passes_waits_and_fails_on_timeout() -> None:
    s = rollout.begin(
        rollout.begin(None, "a", IDS[:3], (1, 10, 100), T0), "b", IDS[:3], (1, 10, 100), T0
    )
    wave = s.waves[0]
    ok = rollout.gate(wave, {wave[0]: healthy()}, T0, T0 + datetime.timedelta(seconds=30), GATE)
    assert ok.kind == "pass"
    s2 = rollout.advance(s, ok, T0 + datetime.timedelta(seconds=30))
    assert (s2.phase, s2.wave) == ("Progressing", 1)
    assert rollout.assign(s2, s.waves[1][0]) == "target"
    stale = rollout.Health(
        applied=True, failure=None, serving=True, beat=T0, refusals=0
    )  # beat not after
    waiting = rollout.gate(wave, {wave[0]: stale}, T0, T0 + datetime.timedelta(seconds=60), GATE)
    assert waiting.kind == "wait" and "heartbeat" in waiting.unhealthy[0][1]
    notserving = rollout.Health(applied=True, failure=None, serving=False, beat=None, refusals=0)
    failed = rollout.gate(
        wave, {wave[0]: notserving}, T0, T0 + datetime.timedelta(seconds=300), GATE
    )
    assert failed.kind == "fail" and "webhook not serving" in failed.reason
    halted = rollout.advance(s, failed, T0 + datetime.timedelta(seconds=300))
    assert halted.phase == "Halted" and "wave 1 failed" in halted.reason
    assert all(rollout.assign(halted, r) == "good" for r in IDS[:3])
    assert rollout.restored(halted, []).phase == "Halted"
    assert rollout.restored(halted, wave).phase == "RolledBack"


def test_refusals_over_the_bound_fail_at_once() -> None:
    s = rollout.begin(
        rollout.begin(None, "a", IDS[:3], (1, 10, 100), T0), "b", IDS[:3], (1, 10, 100), T0
    )
    wave = s.waves[0]
    h = rollout.Health(
        applied=True,
        failure=None,
        serving=True,
        beat=T0 + datetime.timedelta(seconds=1),
        refusals=6,
    )
    v = rollout.gate(wave, {wave[0]: h}, T0, T0 + datetime.timedelta(seconds=1), GATE)
    assert v.kind == "fail" and "refusal" in v.reason


def test_last_wave_completes_and_makes_the_bundle_good() -> None:
    s = rollout.begin(rollout.begin(None, "a", IDS[:2], (50, 100), T0), "b", IDS[:2], (50, 100), T0)
    for i, wave in enumerate(s.waves):
        assert s.wave == i
        s = rollout.advance(
            s, rollout.gate(wave, {r: healthy() for r in wave}, s.started, s.started, GATE), T0
        )
    assert (s.phase, s.good) == ("Complete", "b")
    assert rollout.begin(s, "c", IDS[:2], (50, 100), T0).good == "b"


def test_a_halted_bundle_replaced_by_the_good_one_is_complete_and_another_rolls_from_good() -> None:
    s = rollout.begin(
        rollout.begin(None, "a", IDS[:3], (1, 10, 100), T0), "b", IDS[:3], (1, 10, 100), T0
    )
    halted = rollout.advance(s, rollout.Verdict("fail", "x", ()), T0)
    assert rollout.begin(halted, "a", IDS[:3], (1, 10, 100), T0).phase == "Complete"
    again = rollout.begin(halted, "c", IDS[:3], (1, 10, 100), T0)
    assert (again.phase, again.good) == ("Progressing", "a")


def test_unhealthy_allowance_and_state_round_trip() -> None:
    g = rollout.Gate(
        timeout=datetime.timedelta(seconds=1), max_refusals=0, heartbeat=False, max_unhealthy=1
    )
    assert rollout.gate(["x", "y"], {"x": healthy()}, T0, T0, g).kind == "pass"
    assert rollout.gate(["x", "y"], {}, T0, T0 + datetime.timedelta(seconds=2), g).kind == "fail"
    s = rollout.begin(
        rollout.begin(None, "a", IDS[:5], (1, 10, 100), T0), "b", IDS[:5], (1, 10, 100), T0
    )
    assert rollout.State.from_json(s.to_json()) == s
    with pytest.raises(ValueError):
        rollout.State.from_json({**s.to_json(), "phase": "Bogus"})


def test_identity_covers_text_and_image() -> None:
    assert rollout.identity("x", None) == rollout.identity("x", "")
    assert (
        len(
            {
                rollout.identity("x", None),
                rollout.identity("y", None),
                rollout.identity("x", "img:1"),
            }
        )
        == 3
    )


def test_rolled_out_is_kubectl_rollout_status() -> None:
    from enroller import rollouts

    def dep(gen: int, **st: int) -> dict[str, object]:
        return {"metadata": {"generation": gen}, "spec": {"replicas": 2}, "status": st}

    assert rollouts.rolled_out(
        dep(3, observedGeneration=3, replicas=2, updatedReplicas=2, availableReplicas=2)
    )
    # a broken new template: its pod never available, the old ones kept (still serving)
    assert not rollouts.rolled_out(
        dep(3, observedGeneration=3, replicas=3, updatedReplicas=1, availableReplicas=2)
    )
    assert not rollouts.rolled_out(
        dep(4, observedGeneration=3, replicas=2, updatedReplicas=2, availableReplicas=2)
    )
    assert not rollouts.rolled_out(
        dep(3, observedGeneration=3, replicas=2, updatedReplicas=2, availableReplicas=1)
    )


def test_refusals_count_the_minutes_since_the_wave_began() -> None:
    from enroller import rollouts

    d = {
        "spec": {"runtimeId": "rt-1"},
        "status": {
            "minutes": [
                {"start": "2026-01-01T00:00:00Z", "refused": {"schema": 7}},
                {"start": "2026-01-01T00:05:00Z", "refused": {"schema": 2, "quota_bytes": 1}},
                {"start": "2026-01-01T00:06:00Z"},
            ]
        },
    }
    assert rollouts.refusals([d], T0 + datetime.timedelta(minutes=5, seconds=30)) == {"rt-1": 3}
    assert rollouts.refusals([d], T0 + datetime.timedelta(minutes=7)) == {}


def test_a_heartbeat_counts_only_after_the_runtime_holds_the_bundle() -> None:
    applied = T0 + datetime.timedelta(seconds=60)
    before = rollout.Health(
        applied=True,
        failure=None,
        serving=True,
        beat=T0 + datetime.timedelta(seconds=30),
        refusals=0,
        since=applied,
    )
    assert rollout.problem(before, T0, GATE) == "no heartbeat since the bundle was applied"
    after = dataclasses.replace(before, beat=applied + datetime.timedelta(seconds=1))
    assert rollout.problem(after, T0, GATE) is None
