"""The injector's pure decisions: the merge, the apply body, the condition, the bounds of
one runtime's records, the store's bound, the read budget, the pacing (plain data)."""

from __future__ import annotations

import threading
import time
from typing import Any

from injector import bounds, merge, pacing, readbudget, settings
from injector.store import Store
from tether.wire import storagebudget

FIELD = ("spec", "configuration")
TARGET: dict[str, Any] = {
    "apiVersion": "sample.kyma-project.io/v1",
    "kind": "Sample",
    "metadata": {"name": "s1", "namespace": "kcp-system", "generation": 3},
}


def src(ns: str, name: str, data: dict[str, str], rev: int = 1) -> merge.Source:
    return merge.Source(ns, name, data, rev)


def test_merge_order_is_namespace_then_name_and_a_later_key_wins() -> None:
    sources = [
        src("b", "a", {"k": "3"}),
        src("a", "z", {"k": "2", "y": "y"}),
        src("a", "b", {"k": "1", "x": "x"}),
    ]
    assert merge.merged(sources) == {"k": "3", "x": "x", "y": "y"}
    assert merge.merged(reversed(sources)) == merge.merged(sources)


def test_digest_is_canonical() -> None:
    assert merge.digest({"a": "1", "b": "2"}) == merge.digest({"b": "2", "a": "1"})
    assert merge.digest({"a": "1"}) != merge.digest({"a": "2"})
    assert merge.digest({}).startswith("sha256:")


def test_source_keeps_string_values_only() -> None:
    s = merge.source_of(
        {"namespace": "n", "name": "c", "data": {"a": "1", "b": 2}, "binaryData": {"c": "AA=="}}, 7
    )
    assert s == merge.Source("n", "c", {"a": "1"}, 7)
    assert merge.source_of({"namespace": "n", "name": "c"}, 1).data == {}


def test_apply_body_sets_the_field_and_annotations() -> None:
    want = merge.intent("w1", [src("a", "x", {"k": "v"}, 5), src("a", "y", {"j": "u"}, 9)])
    body = merge.apply_body(TARGET, FIELD, want)
    assert body["spec"] == {"configuration": {"k": "v", "j": "u"}}
    assert body["metadata"] == {
        "name": "s1",
        "namespace": "kcp-system",
        "annotations": {
            merge.DIGEST_ANNOTATION: merge.digest({"k": "v", "j": "u"}),
            merge.FROM_ANNOTATION: "w1:9",
        },
    }
    assert (body["apiVersion"], body["kind"]) == ("sample.kyma-project.io/v1", "Sample")
    assert merge.intent("w1", [src("a", "x", {"k": "v"}, 5)], 12).origin == "w1:12"
    deep = merge.apply_body(TARGET, ("spec", "a", "b"), want)
    assert deep["spec"] == {"a": {"b": {"k": "v", "j": "u"}}}


def test_no_live_record_is_a_body_without_field_and_annotations() -> None:
    want = merge.intent("w1", [])
    body = merge.apply_body(TARGET, FIELD, want)
    assert "spec" not in body and "annotations" not in body["metadata"]
    assert want.values is None and want.records == 0


def applied(want: merge.Intent, values: Any = None) -> dict[str, Any]:
    obj: dict[str, Any] = {
        **TARGET,
        "metadata": {
            **TARGET["metadata"],
            "annotations": {
                merge.DIGEST_ANNOTATION: want.digest,
                merge.FROM_ANNOTATION: want.origin,
            },
        },
    }
    obj["spec"] = {"configuration": dict(want.values or {}) if values is None else values}
    return obj


def test_needed() -> None:
    want = merge.intent("w1", [src("a", "x", {"k": "v"})])
    assert merge.needed(TARGET, FIELD, want)  # never applied
    assert not merge.needed(applied(want), FIELD, want)
    assert merge.needed(applied(want, {"k": "edited"}), FIELD, want)  # edited by someone
    assert merge.needed(applied(want, {}), FIELD, want)
    assert not merge.needed(applied(want, {"k": "v", "other": "1"}), FIELD, want)
    other = merge.intent("w1", [src("a", "x", {"k": "w"})])
    assert merge.needed(applied(want), FIELD, other)
    empty = merge.intent("w1", [])
    assert merge.needed(applied(want), FIELD, empty)  # our annotations still there
    assert not merge.needed(TARGET, FIELD, empty)


def test_condition_holds_counts_never_values() -> None:
    want = merge.intent("w1", [src("a", "x", {"k": "secret-value"}, 4)])
    c = merge.condition(want, 3, "2026-01-01T00:00:00Z")
    assert (c["type"], c["status"], c["reason"], c["observedGeneration"]) == (
        "ConfigurationInjected",
        "True",
        "Injected",
        3,
    )
    assert "secret-value" not in str(c) and "1 keys from 1 ConfigMaps" in c["message"]
    failed = merge.condition(None, 3, "t", reason="ApplyFailed", message="forbidden")
    assert (failed["status"], failed["reason"]) == ("False", "ApplyFailed")
    assert merge.condition(merge.intent("w1", []), 1, "t")["reason"] == "NoRecords"


def test_conditions_with_replaces_by_type_and_keeps_the_transition_time() -> None:
    old = [
        {"type": "Ready", "status": "True"},
        {
            "type": "ConfigurationInjected",
            "status": "True",
            "reason": "Injected",
            "lastTransitionTime": "old",
        },
    ]
    new = merge.condition(merge.intent("w", [src("a", "x", {"k": "v"})]), 2, "now")
    out = merge.conditions_with(old, new)
    assert [c["type"] for c in out] == ["Ready", "ConfigurationInjected"]
    assert out[1]["lastTransitionTime"] == "old" and out[1]["observedGeneration"] == 2
    flipped = merge.conditions_with(old, merge.condition(None, 2, "now", reason="X"))
    assert flipped[1]["lastTransitionTime"] == "now"
    assert merge.conditions_with(None, new) == [new]


def test_condition_current() -> None:
    want = merge.intent("w", [src("a", "x", {"k": "v"})])
    obj = {**TARGET, "status": {"conditions": [merge.condition(want, 3, "t")]}}
    assert merge.condition_current(obj, want)
    assert not merge.condition_current({**obj, "metadata": {"generation": 4}}, want)
    assert not merge.condition_current(TARGET, want)


LIMITS = bounds.Limits(records=3, bytes=1000, keys=5, keys_per_record=3)


def meta(rv: int, size: int | None = None) -> dict[str, Any]:
    ann = {} if size is None else {bounds.SIZE_ANNOTATION: str(size)}
    return {"metadata": {"resourceVersion": str(rv), "annotations": ann}}


def test_census_refuses_over_the_records_and_bytes_quota_before_any_value_is_read() -> None:
    c = bounds.Census.of([meta(5, 100), meta(9, 200), meta(7)])
    assert c == bounds.Census(3, 300, 9) and c.refusal(LIMITS) is None
    assert bounds.Census.of([meta(i, 1) for i in range(4)]).refusal(LIMITS) == bounds.Refusal(
        "records", 4, 3
    )
    assert bounds.Census.of([meta(1, 1001)]).refusal(LIMITS) == bounds.Refusal("bytes", 1001, 1000)
    # a hostile annotation is no number: 0, never an exception
    assert (
        bounds.Census.of(
            [meta(1, None), {"metadata": {"annotations": {bounds.SIZE_ANNOTATION: "9" * 40}}}, {}]
        ).bytes
        == 0
    )
    assert c.fingerprint() != bounds.Census.of([meta(5, 100), meta(9, 200)]).fingerprint()


def test_tally_stops_at_the_first_bound_and_says_which() -> None:
    t = bounds.Tally(LIMITS)
    assert t.add({"a": "1", "b": "2"}, 10, True) is None
    assert t.add({"x": "1", "y": "1", "z": "1", "w": "1"}, 0, False) is None  # a tombstone
    r = t.add({"a": "1", "b": "2", "c": "3", "d": "4"}, 10, True)
    assert r == bounds.Refusal("keys_per_record", 4, 3)
    assert t.add({}, 0, True) == r  # stays refused
    keys = bounds.Tally(LIMITS)
    keys.add({"a": "", "b": "", "c": ""}, 0, True)
    assert keys.add({"a": "", "d": "", "e": ""}, 0, True) is None  # 5 distinct keys merged
    assert keys.add({"f": ""}, 0, True) == bounds.Refusal("keys", 6, 5)
    big = bounds.Tally(LIMITS)
    assert big.add({"k": "v" * 2000}, 0, True) == bounds.Refusal("bytes", 2001, 1000)
    msg = bounds.Refusal("keys_per_record", 10000, 1000).message()
    assert "10000" in msg and "TETHER_INJECTOR_MAX_KEYS_PER_RECORD" in msg


def test_store_remembers_runtimes_up_to_its_bound_and_counts_the_rest() -> None:
    s = Store(max_runtimes=2)
    assert s.touch("rt1", 5) and s.touch("rt1", 3) and s.runtimes["rt1"].revision == 5
    assert s.touch("rt2", 1) and not s.touch("rt3", 1) and not s.touch("rt3", 2)
    assert s.full == 1  # runtimes, not events
    s.listed()
    assert s.full == 0
    s.forget("rt1")
    assert s.touch("rt3", 1) and set(s.runtimes) == {"rt2", "rt3"}


def test_store_refuses_again_until_the_records_change() -> None:
    s = Store(max_runtimes=10)
    s.touch("rt1", 1)
    r = bounds.Refusal("keys_per_record", 10_000, 1_000)
    s.refuse("rt1", r, (20, 99))
    assert s.still_refused("rt1", (20, 99)) == r and s.refused_by()["keys_per_record"] == 1
    assert s.still_refused("rt1", (20, 100)) is None  # a write: read again
    s.accept("rt1")
    assert s.still_refused("rt1", (20, 99)) is None and s.refused_by()["keys_per_record"] == 0


def test_read_budget_holds_shares_and_waits_for_room() -> None:
    b = readbudget.ReadBudget(100, floor=10)
    stop = threading.Event()
    with b.hold(60, stop) as first:
        assert first and b.held == 60
        with b.hold(1, stop) as small:
            assert small and b.held == 70  # the floor
        waited: list[int] = []
        done = threading.Event()

        def second() -> None:
            with b.hold(60, stop) as got:
                waited.append(b.held if got else -1)
                done.wait(5)

        t = threading.Thread(target=second)
        t.start()
        t.join(0.3)
        assert t.is_alive() and not waited  # no room until the first is done
    deadline = time.monotonic() + 5
    while not waited and time.monotonic() < deadline:
        done.wait(0.01)
    assert waited == [60] and b.peak == 70
    stop.set()
    with b.hold(60, stop) as late:
        assert not late  # stopped while waiting: nothing held
    assert b.held == 60
    done.set()
    t.join(5)
    assert b.held == 0


def test_pacer_never_delays_the_first_and_coalesces_the_rest() -> None:
    p = pacing.Pacer(0.1)
    p.offer("rt1", 10.0)
    assert p.take(10.0) == ["rt1"]
    p.offer("rt1", 10.01)
    p.offer("rt1", 10.05)
    assert p.take(10.05) == [] and abs(p.wait(10.05, 5) - 0.05) < 1e-9
    assert p.take(10.1) == ["rt1"] and p.pending() == 0
    p.offer("rt2", 10.1)
    assert p.take(10.1) == ["rt2"]


def test_pacer_backs_off_failures() -> None:
    p = pacing.Pacer(0.1, backoff_base=1.0, backoff_cap=4.0)
    for expected in (1.0, 2.0, 4.0, 4.0):
        p.offer("rt1", 0.0)
        p.take(100.0)
        p.done("rt1", False, 100.0)
        assert p.wait(100.0, 60) == expected
        p.take(200.0)
    p.done("rt1", True, 200.0)
    p.done("rt1", False, 200.0)
    assert p.wait(200.0, 60) == 1.0


def test_pacer_memory_is_bounded() -> None:
    p = pacing.Pacer(1.0, max_entries=3)
    for i in range(10):
        p.offer(f"rt{i}", 0.0)
    assert len(p.take(0.0)) == 10 and len(p._last) == 3


def test_max_records_default_is_the_listeners_quota_default() -> None:
    assert settings.RECORDS_PER_RUNTIME == storagebudget.records_per_runtime()
    assert settings.from_env({}).max_records == storagebudget.records_per_runtime()


def test_per_runtime_bounds_follow_the_listeners_quota_variables() -> None:
    s = settings.from_env(
        {"TETHER_LISTENER_QUOTA_RECORDS": "300", "TETHER_LISTENER_QUOTA_BYTES": str(4 << 20)}
    )
    assert (s.max_records, s.max_bytes, s.read_bytes) == (300, 4 << 20, 8 << 20)
    d = settings.from_env({})
    assert (
        d.max_bytes == storagebudget.RECORD_BYTES_FLOOR
        and d.max_runtimes == 2 * storagebudget.RUNTIMES
    )
    assert d.max_keys_per_record < 10_000 <= d.max_keys
