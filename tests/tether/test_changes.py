"""The change record: schema and the ordering rule, with plain data."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from tether.wire import changes, conversion

V = changes.Version


def record(**over: Any) -> dict[str, Any]:
    rec: dict[str, Any] = {
        "apiVersion": "tether.kyma-project.io/v1",
        "kind": "ConfigMapChange",
        "runtimeId": "rt-1",
        "namespace": "team-a",
        "name": "app-config",
        "uid": "9c2e",
        "resourceVersion": "48213",
        "observedAt": "2026-11-30T10:00:00.123456Z",
        "deleted": False,
        "source": "webhook",
        "labels": {},
        "annotations": {},
        "data": {"k": "v"},
        "binaryData": {},
    }
    rec.update(over)
    return rec


class TestCompare:
    def test_nothing_stored_is_newer(self) -> None:
        assert changes.compare(None, V("5", "2026-01-01T00:00:00Z", False)) == "newer"

    def test_equal_resource_version_is_duplicate(self) -> None:
        v = V("5", "2026-01-01T00:00:00Z", False)
        assert changes.compare(v, v._replace(observed_at="2027-01-01T00:00:00Z")) == "duplicate"

    def test_integer_order_not_string_order(self) -> None:
        stored = V("9", "2026-01-01T00:00:01Z", False)
        assert changes.compare(stored, V("10", "2026-01-01T00:00:00Z", False)) == "newer"
        assert changes.compare(V("10", "2026-01-01T00:00:00Z", False), stored) == "stale"

    def test_late_older_record_is_stale_even_if_observed_later(self) -> None:
        stored = V("200", "2026-01-01T00:00:00Z", False)
        assert changes.compare(stored, V("150", "2026-06-01T00:00:00Z", False)) == "stale"

    def test_tombstone_with_same_version_deletes(self) -> None:
        live = V("7", "2026-01-01T00:00:00Z", False)
        assert changes.compare(live, live._replace(deleted=True)) == "newer"
        assert changes.compare(live._replace(deleted=True), live) == "stale"

    def test_older_tombstone_is_stale(self) -> None:
        assert (
            changes.compare(
                V("8", "2026-01-01T00:00:00Z", False), V("7", "2026-01-02T00:00:00Z", True)
            )
            == "stale"
        )

    def test_unparsable_versions_fall_back_to_observed_at(self) -> None:
        a = V("abc", "2026-01-01T00:00:00.000001Z", False)
        b = V("xyz", "2026-01-01T00:00:00.000002Z", False)
        assert changes.compare(a, b) == "newer"
        assert changes.compare(b, a) == "stale"
        assert changes.compare(a, V("5", "2026-01-01T00:00:00.000001Z", False)) == "duplicate"

    def test_nanosecond_timestamps_are_accepted(self) -> None:
        a = V("a", "2026-01-01T00:00:00.123456789Z", False)
        b = V("b", "2026-01-01T00:00:00.123457Z", False)
        assert changes.compare(a, b) == "newer"


class TestSchema:
    def test_valid_record(self) -> None:
        assert changes.validate_record(record()) == []

    def test_valid_tombstone_from_builder(self) -> None:
        t = conversion.tombstone(
            runtime_id="rt-1",
            namespace="a",
            name="b",
            uid="",
            resource_version="12",
            source="poller",
        )
        assert changes.validate_record(t) == []
        assert t["deleted"] is True and "data" not in t

    def test_tombstone_with_data_is_refused(self) -> None:
        errs = changes.validate_record(record(deleted=True))
        assert errs and any("data" in e.path for e in errs)

    @pytest.mark.parametrize(
        "field,value,where",
        [
            ("namespace", "Team_A", "$.namespace"),
            ("resourceVersion", "", "$.resourceVersion"),
            ("observedAt", "yesterday", "$.observedAt"),
            ("source", "someone", "$.source"),
            ("data", {"k": 1}, "$.data.k"),
            ("binaryData", {"k": "not base64!"}, "$.binaryData.k"),
            ("apiVersion", "v2", "$.apiVersion"),
        ],
    )
    def test_violations_name_the_path(self, field: str, value: object, where: str) -> None:
        errs = changes.validate_record(record(**{field: value}))
        assert [e.path for e in errs] == [where]

    def test_unknown_and_missing_fields(self) -> None:
        rec = record(extra=1)
        del rec["uid"]
        msgs = " ".join(e.message for e in changes.validate_record(rec))
        assert "uid" in msgs and "extra" in msgs

    def test_batch(self) -> None:
        good = changes.batch([record(), record(name="other")])  # type: ignore[list-item]
        assert changes.validate_batch(good) == []
        assert [r["name"] for r in changes.records_of(good)] == ["app-config", "other"]
        bad = copy.deepcopy(good)
        bad["items"][1]["deleted"] = "yes"
        assert [e.path for e in changes.validate_batch(bad)] == ["$.items[1].deleted"]
        assert changes.validate_batch(changes.batch([])) != []

    def test_messages_are_bounded(self) -> None:
        errs = changes.validate_record(record(namespace="x" * 100_000))
        assert errs and all(len(e.message) <= 200 for e in errs)

    def test_from_configmap(self) -> None:
        cm = {
            "metadata": {
                "namespace": "a",
                "name": "b",
                "uid": "u",
                "resourceVersion": "3",
                "labels": {"l": "1"},
            },
            "data": {"x": "y"},
        }
        rec = conversion.from_configmap(cm, runtime_id="rt", source="poller")
        assert changes.validate_record(rec) == []
        assert rec["labels"] == {"l": "1"} and rec["data"] == {"x": "y"}
        assert rec["resourceVersion"] == "3" and rec["observedAt"].endswith("Z")
