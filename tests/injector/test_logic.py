"""The injector's pure decisions: the merge, the apply body, the condition, the store's
bounds and relists, the pacing (plain data)."""

from __future__ import annotations

from typing import Any

from injector import merge, pacing, settings
from injector.store import Store
from listener.storage import budget

FIELD = ("spec", "configuration")
TARGET: dict[str, Any] = {"apiVersion": "sample.kyma-project.io/v1", "kind": "Sample",
          "metadata": {"name": "s1", "namespace": "kcp-system", "generation": 3}}


def src(ns: str, name: str, data: dict[str, str], rev: int = 1) -> merge.Source:
    return merge.Source(ns, name, data, rev)


def test_merge_order_is_namespace_then_name_and_a_later_key_wins() -> None:
    sources = [src("b", "a", {"k": "3"}), src("a", "z", {"k": "2", "y": "y"}),
               src("a", "b", {"k": "1", "x": "x"})]
    assert merge.merged(sources) == {"k": "3", "x": "x", "y": "y"}
    assert merge.merged(reversed(sources)) == merge.merged(sources)


def test_digest_is_canonical() -> None:
    assert merge.digest({"a": "1", "b": "2"}) == merge.digest({"b": "2", "a": "1"})
    assert merge.digest({"a": "1"}) != merge.digest({"a": "2"})
    assert merge.digest({}).startswith("sha256:")


def test_source_keeps_string_values_only() -> None:
    s = merge.source_of({"namespace": "n", "name": "c", "data": {"a": "1", "b": 2},
                         "binaryData": {"c": "AA=="}}, 7)
    assert s == merge.Source("n", "c", {"a": "1"}, 7)
    assert merge.source_of({"namespace": "n", "name": "c"}, 1).data == {}


def test_apply_body_sets_the_field_and_annotations() -> None:
    want = merge.intent("w1", [src("a", "x", {"k": "v"}, 5), src("a", "y", {"j": "u"}, 9)])
    body = merge.apply_body(TARGET, FIELD, want)
    assert body["spec"] == {"configuration": {"k": "v", "j": "u"}}
    assert body["metadata"] == {"name": "s1", "namespace": "kcp-system", "annotations": {
        merge.DIGEST_ANNOTATION: merge.digest({"k": "v", "j": "u"}),
        merge.FROM_ANNOTATION: "w1:9"}}
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
    obj: dict[str, Any] = {**TARGET, "metadata": {**TARGET["metadata"], "annotations": {
        merge.DIGEST_ANNOTATION: want.digest, merge.FROM_ANNOTATION: want.origin}}}
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
        "ConfigurationInjected", "True", "Injected", 3)
    assert "secret-value" not in str(c) and "1 keys from 1 ConfigMaps" in c["message"]
    failed = merge.condition(None, 3, "t", reason="ApplyFailed", message="forbidden")
    assert (failed["status"], failed["reason"]) == ("False", "ApplyFailed")
    assert merge.condition(merge.intent("w1", []), 1, "t")["reason"] == "NoRecords"


def test_conditions_with_replaces_by_type_and_keeps_the_transition_time() -> None:
    old = [{"type": "Ready", "status": "True"},
           {"type": "ConfigurationInjected", "status": "True", "reason": "Injected",
            "lastTransitionTime": "old"}]
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


def rec(ns: str, name: str, data: dict[str, str], deleted: bool = False) -> dict[str, Any]:
    return {"namespace": ns, "name": name, "data": data, "deleted": deleted}


def test_store_keeps_live_records_and_drops_tombstones() -> None:
    s = Store(max_records=10, max_runtimes=10, max_bytes=1 << 20)
    assert s.change("rt1", ("a", "x"), "kyma1", rec("a", "x", {"k": "1"}), 5, resync=False) == "rt1"
    s.change("rt1", ("a", "y"), "kyma1", rec("a", "y", {"j": "2"}), 6, resync=False)
    assert {x.name for x in s.sources("rt1")} == {"x", "y"} and s.kyma("rt1") == "kyma1"
    s.change("rt1", ("a", "x"), "kyma1", rec("a", "x", {}, deleted=True), 7, resync=False)
    assert [x.name for x in s.sources("rt1")] == ["y"] and s.revision("rt1") == 7
    s.change("rt1", ("a", "y"), "kyma1", None, 8, resync=False)
    assert s.sources("rt1") == () and s.runtimes == {} and s.bytes == 0


def test_store_synced_drops_what_the_relist_did_not_deliver() -> None:
    s = Store(max_records=10, max_runtimes=10, max_bytes=1 << 20)
    s.change("rt1", ("a", "x"), "", rec("a", "x", {"k": "1"}), 1, resync=True)
    s.change("rt2", ("a", "x"), "", rec("a", "x", {"k": "1"}), 2, resync=True)
    assert s.synced() == {"rt1", "rt2"}
    s.change("rt1", ("a", "x"), "", rec("a", "x", {"k": "2"}), 3, resync=False)
    s.change("rt1", ("a", "y"), "", rec("a", "y", {"k": "3"}), 4, resync=True)  # relist
    assert s.synced() == {"rt1", "rt2"}
    assert [x.name for x in s.sources("rt1")] == ["y"] and s.sources("rt2") == ()
    assert s.synced() == {"rt1"}  # an empty relist drops everything
    assert s.runtimes == {}


def test_a_listed_tombstone_before_its_runtimes_live_records_still_counts_in_its_origin() -> None:
    """A list comes in object-name order (hashes): a runtime's tombstone may come before any
    live record of it; its revision is the runtime's highest all the same."""
    s = Store(max_records=10, max_runtimes=10, max_bytes=1 << 20)
    s.change("rt1", ("a", "gone"), "", rec("a", "gone", {}, deleted=True), 9, resync=True)
    s.change("rt1", ("a", "x"), "", rec("a", "x", {"k": "1"}), 4, resync=True)
    assert s.revision("rt1") == 9
    s.synced()
    s.change("rt2", ("a", "gone"), "", None, 12, resync=False)  # outside a list: no runtime kept
    s.change("rt2", ("a", "x"), "", rec("a", "x", {"k": "1"}), 13, resync=False)
    assert s.revision("rt2") == 13 and s.revision("rt1") == 9
    s.change("rt3", ("a", "gone"), "", None, 20, resync=True)  # only tombstones: nothing kept
    s.synced()
    s.change("rt3", ("a", "x"), "", rec("a", "x", {"k": "1"}), 5, resync=True)
    assert s.revision("rt3") == 5  # a new list forgets the last one's tombstones


def test_store_bounds_refuse_a_runtime_instead_of_injecting_part_of_it() -> None:
    s = Store(max_records=2, max_runtimes=1, max_bytes=1 << 20)
    for i in range(3):
        s.change("rt1", ("a", str(i)), "", rec("a", str(i), {"k": str(i)}), i, resync=True)
    assert s.refused("rt1") and len(s.sources("rt1")) == 2
    s.change("rt2", ("a", "x"), "", rec("a", "x", {"k": "1"}), 9, resync=True)
    assert s.refused("rt2") and "rt2" not in s.runtimes  # max_runtimes
    s.synced()
    s.change("rt1", ("a", "0"), "", rec("a", "0", {"k": "0"}), 10, resync=True)  # a relist
    assert not s.refused("rt1") and not s.refused("rt2")
    small = Store(max_records=10, max_runtimes=10, max_bytes=200)
    small.change("rt1", ("a", "x"), "", rec("a", "x", {"k": "v" * 300}), 1, resync=False)
    assert small.refused("rt1") and small.bytes == 0


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
    assert settings.RECORDS_PER_RUNTIME == budget.records_per_runtime()
    assert settings.from_env({}).max_records == budget.records_per_runtime()
