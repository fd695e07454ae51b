"""The last refusal per reason in a RuntimeDelivery (``tether.wire.lastrefused`` through
``tether.wire.delivery`` and the listener's ``Deliveries``): kept beside the counts, bounded,
merged by time, tolerant of old and hand-written objects, and valid for the CRD."""

from __future__ import annotations

import datetime
import pathlib
from typing import Any

import yaml

from tether.wire import delivery, lastrefused

ROOT = pathlib.Path(__file__).resolve().parents[2]
CRD = ROOT / "manifests/kcp/crds/tether.kyma-project.io_runtimedeliveries.yaml"
T0 = datetime.datetime(2026, 12, 2, 10, 0, tzinfo=datetime.UTC)


def at(seconds: float) -> datetime.datetime:
    return T0 + datetime.timedelta(seconds=seconds)


def test_a_refusal_keeps_its_object_and_time_beside_the_count() -> None:
    d = delivery.Delta()
    d.record(at(0), "webhook", None, "refused", "team-a", "app")
    d.refuse(at(0), "quota_records", 413, "team-a", "app")
    d.refuse(at(5), "invalid_json", 400)
    d.refuse(at(6), "rate", 429)  # throttled: no last refusal
    status = delivery.merge(None, d, "rt-1", at(10))
    assert status["lastRefused"] == {
        "quota_records": {
            "at": delivery.fmt(at(0)),
            "status": 413,
            "namespace": "team-a",
            "name": "app",
        },
        "invalid_json": {"at": delivery.fmt(at(5)), "status": 400},
    }
    assert status["minutes"][0]["refused"] == {"quota_records": 1, "invalid_json": 1}


def test_merges_keep_the_newest_of_each_reason_in_any_order() -> None:
    a, b = delivery.Delta(), delivery.Delta()
    a.refuse(at(1), "quota_bytes", 413, "ns", "old")
    b.refuse(at(2), "quota_bytes", 413, "ns", "new")
    one = delivery.merge(delivery.merge(None, a, "rt", at(3)), b, "rt", at(3))
    other = delivery.merge(delivery.merge(None, b, "rt", at(3)), a, "rt", at(3))
    assert one["lastRefused"] == other["lastRefused"]
    assert one["lastRefused"]["quota_bytes"]["name"] == "new"


def test_bounded_one_entry_per_reason_the_oldest_forgotten_and_names_cut() -> None:
    d = delivery.Delta()
    for i in range(lastrefused.MAX_LAST + 5):
        d.refuse(at(i), f"reason_{i:02d}", 400, "n" * 1000, "x" * 1000)
    status = delivery.merge(None, d, "rt", at(100))
    kept = status["lastRefused"]
    assert len(kept) == lastrefused.MAX_LAST
    assert min(kept) == "reason_05"  # the five refused longest ago are forgotten
    assert all(len(e["name"]) <= 253 and len(e["namespace"]) <= 253 for e in kept.values())
    d = delivery.Delta()
    d.refuse(at(0), "r" * 500, 400)
    assert all(len(k) <= 40 for k in delivery.merge(None, d, "rt", at(1))["lastRefused"])


def test_old_and_hand_written_objects() -> None:
    # an object of an older version: no lastRefused, none written until a refusal
    d = delivery.Delta()
    d.record(at(0), "webhook", at(-1), "persisted", "team-a", "app")
    status = delivery.merge({"runtimeId": "rt", "minutes": []}, d, "rt", at(1))
    assert "lastRefused" not in status
    assert delivery.summarize(status, at(1)).last_refused == {}
    junk: dict[str, Any] = {
        "lastRefused": {
            "ok": {"at": delivery.fmt(at(0)), "status": 400, "namespace": 5, "name": "app"},
            "no_time": {"status": 400},
            "bad_time": {"at": "yesterday"},
            "not_a_map": [1, 2],
            "bool": {"at": delivery.fmt(at(0)), "status": True},
            **{f"many_{i}": {"at": delivery.fmt(at(i))} for i in range(100)},
        }
    }
    kept = lastrefused.from_status(junk)
    assert len(kept) <= lastrefused.MAX_LAST
    assert "no_time" not in kept and "bad_time" not in kept and "not_a_map" not in kept
    assert lastrefused.from_status({"lastRefused": {"ok": junk["lastRefused"]["ok"]}}) == {
        "ok": {"at": delivery.fmt(at(0)), "status": 400, "namespace": "", "name": "app"}
    }
    assert lastrefused.from_status({"lastRefused": "x"}) == {}
    assert lastrefused.from_status(None) == {}


def test_the_crd_allows_what_merge_writes() -> None:
    crd = yaml.safe_load(CRD.read_text())
    status = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["status"]
    schema = status["properties"]["lastRefused"]
    assert schema["maxProperties"] == lastrefused.MAX_LAST
    entry = schema["additionalProperties"]
    assert set(entry["properties"]) == {"at", "status", "namespace", "name"}
    assert entry["properties"]["name"]["maxLength"] == lastrefused.MAX_TEXT
    assert entry["properties"]["at"]["maxLength"] >= len(delivery.fmt(T0))
    assert "self.all(k, size(k) <= 40)" in schema["x-kubernetes-validations"][0]["rule"]
