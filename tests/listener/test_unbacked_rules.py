"""Unbacked tombstones, the pure parts (``listener.storage.rules``, "Unbacked tombstones";
``listener.storage.records``): which tombstones are unbacked, what the quota counts of them,
which are evicted, and that no digest, summary or usage count sees them. Plain data."""

from __future__ import annotations

from typing import Any

from listener import settings
from listener.janitor import settings as janitor_settings
from listener.storage import records, rules, unbacked
from tether.wire import conversion, storagebudget

RID = "rt-1"


def tombstone(
    name: str,
    rv: str = "9",
    observed: str = "2026-11-30T10:00:00.000000Z",
) -> dict[str, Any]:
    rec = conversion.tombstone(
        runtime_id=RID,
        namespace="team-a",
        name=name,
        uid="u",
        resource_version=rv,
        source="webhook",
        observed_at=observed,
    )
    return {**rec, "watch": "w", "resource": {"group": "", "version": "v1", "kind": "ConfigMap"}}


def live(name: str, rv: str = "10") -> dict[str, Any]:
    rec = conversion.from_configmap(
        {
            "metadata": {"namespace": "team-a", "name": name, "uid": "u", "resourceVersion": rv},
            "data": {"k": "v"},
        },
        runtime_id=RID,
        source="webhook",
    )
    return {**rec, "watch": "w", "resource": {"group": "", "version": "v1", "kind": "ConfigMap"}}


def stored(obj: dict[str, Any], rv: str = "100", uid: str = "uid-1") -> dict[str, Any]:
    meta = dict(obj["metadata"])
    meta.update(resourceVersion=rv, uid=uid)
    rules.annotate({**obj, "metadata": meta})
    return meta


def test_a_tombstone_is_unbacked_only_when_its_key_is_not_stored_or_only_as_one() -> None:
    ghost = stored(records.body(tombstone("a"), "ns", unbacked=True))
    real = stored(records.body(live("a"), "ns"))
    real_tombstone = stored(records.body(tombstone("a"), "ns"))
    assert rules.unbacked(None, True)
    assert rules.unbacked(ghost, True)
    assert not rules.unbacked(real, True)  # the deletion of a stored record: as ever
    assert not rules.unbacked(real_tombstone, True)
    assert not rules.unbacked(None, False) and not rules.unbacked(ghost, False)


def test_the_quota_counts_no_unbacked_tombstone_and_a_record_replacing_one_as_new() -> None:
    ghost = stored(records.body(tombstone("a"), "ns", unbacked=True))
    real = stored(records.body(live("b"), "ns"))
    assert rules.stored_size(ghost) > 0  # it has a size, the quota does not count it
    assert rules.quota_size(ghost) is None and rules.quota_size(None) is None
    assert rules.quota_size(real) == rules.stored_size(real)
    assert rules.usage_of([ghost, real, ghost]) == rules.Used(1, rules.stored_size(real))
    # a live record over an unbacked tombstone is a new record to the quota: at the cap, 413
    limits = rules.Limits(records=1, bytes=10**6)
    assert rules.admit(rules.Used(1, 10), limits, rules.quota_size(ghost), 50) is not None
    assert rules.admit(rules.Used(0, 0), limits, rules.quota_size(ghost), 50) is None


def test_an_unbacked_tombstone_is_in_no_digest_and_a_live_record_drops_its_label() -> None:
    ghost = records.body(tombstone("a"), "ns", unbacked=True)
    assert records.is_unbacked(ghost["metadata"])
    assert records.digest_item(ghost["metadata"]) is None
    again = records.updated(ghost, tombstone("a", rv="11"), unbacked=True)
    assert records.is_unbacked(again["metadata"])
    back = records.updated(ghost, live("a", rv="12"))
    assert not records.is_unbacked(back["metadata"])
    assert records.digest_item(back["metadata"]) is not None
    # labels others added stay
    ghost["metadata"]["labels"]["team"] = "x"
    assert records.updated(ghost, live("a"))["metadata"]["labels"]["team"] == "x"


def test_evictions_take_the_oldest_observed_first_and_keep_the_cap() -> None:
    metas = []
    for i, when in enumerate(
        [
            "2026-11-30T10:00:03.000000Z",
            "2026-11-30T10:00:01.000000Z",
            "not a time",
            "2026-11-30T10:00:02.000000Z",
        ]
    ):
        m = stored(
            records.body(tombstone(f"k{i}", observed=when), "ns", unbacked=True),
            rv=str(100 + i),
            uid=f"uid-{i}",
        )
        metas.append(m)
    doomed = rules.evictions(metas, 2, records.ANN_OBSERVED)
    # the unreadable time counts as the oldest, then 10:00:01
    assert [t.uid for t in doomed] == ["uid-2", "uid-1"]
    assert all(t.namespace == "ns" and t.resource_version for t in doomed)
    assert rules.evictions(metas, 4, records.ANN_OBSERVED) == []
    assert len(rules.evictions(metas, 0, records.ANN_OBSERVED)) == 4


def test_the_unbacked_cap_defaults_to_a_tenth_of_the_records_quota() -> None:
    assert storagebudget.unbacked_per_runtime() == storagebudget.records_per_runtime() // 10 == 20
    assert settings.Storage().unbacked_tombstones == 20
    s = janitor_settings.from_env({"TETHER_LISTENER_UNBACKED_TOMBSTONES": "3"})
    assert s.storage.unbacked_tombstones == 3


def test_a_worker_lists_a_runtime_only_when_one_more_may_pass_the_cap() -> None:
    tally = unbacked.Tally(cap=4)
    token = tally.created("rt")
    assert token is not None  # never listed: list
    tally.listed("rt", token, 1)
    assert [tally.created("rt") for _ in range(3)] == [None, None, None]  # 2, 3, 4
    token = tally.created("rt")  # a fifth may pass the cap: list, and evict down to half
    assert token is not None and tally.target(5) == 2 and tally.target(4) == 4
    assert tally.created("rt") is not None  # created while the listing ran: listed again
    tally.listed("rt", token, 2)  # 2 left, and the one created meanwhile
    assert tally.created("rt") is None  # 4
    assert tally.created("rt") is not None
    assert unbacked.Tally(cap=1).target(2) == 1  # a cap of 1 keeps 1
