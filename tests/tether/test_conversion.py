"""tether.wire.conversion: the v1 record at the two edges, with plain data."""

from __future__ import annotations

import json

import pytest

from tether.wire import changes, conversion, listenerapi, watches

CM = {
    "metadata": {
        "namespace": "team-a",
        "name": "app-config",
        "uid": "9c2e",
        "resourceVersion": "48213",
        "labels": {"l": "1"},
        "annotations": {"a": "2"},
    },
    "data": {"k": "v"},
    "binaryData": {"b": "AA=="},
}
AT = "2026-11-30T10:00:00.123456Z"
V1_LIVE = {
    "apiVersion": "tether.kyma-project.io/v1",
    "kind": "ConfigMapChange",
    "runtimeId": "rt-1",
    "namespace": "team-a",
    "name": "app-config",
    "uid": "9c2e",
    "resourceVersion": "48213",
    "observedAt": AT,
    "deleted": False,
    "source": "webhook",
    "labels": {"l": "1"},
    "annotations": {"a": "2"},
    "data": {"k": "v"},
    "binaryData": {"b": "AA=="},
}


def builtin_record() -> changes.ChangeRecord:
    return changes.from_object(
        CM, watch=conversion.BUILTIN, runtime_id="rt-1", source="webhook", observed_at=AT
    )


def test_a_built_in_watch_record_leaves_as_the_previous_versions_record() -> None:
    (sent,) = conversion.on_wire([builtin_record()])
    assert sent == V1_LIVE
    assert changes.validate_record(sent) == []


def test_the_v1_constructors_write_what_the_previous_version_wrote() -> None:
    rec = conversion.from_configmap(
        CM, runtime_id="rt-1", source="webhook", observed_at=AT, epoch=3
    )
    assert rec == {**V1_LIVE, "epoch": 3}
    gone = conversion.tombstone(
        runtime_id="rt-1",
        namespace="team-a",
        name="app-config",
        uid="9c2e",
        resource_version="48300",
        source="poller",
        observed_at=AT,
    )
    assert gone == {
        "apiVersion": "tether.kyma-project.io/v1",
        "kind": "ConfigMapChange",
        "runtimeId": "rt-1",
        "namespace": "team-a",
        "name": "app-config",
        "uid": "9c2e",
        "resourceVersion": "48300",
        "observedAt": AT,
        "deleted": True,
        "source": "poller",
    }
    assert changes.validate_record(gone) == []


def test_records_of_other_watches_leave_unchanged() -> None:
    w = watches.Watch("team", watches.CONFIGMAP, mode="metadata")
    rec = changes.from_object(CM, watch=w, runtime_id="rt-1", source="poller", observed_at=AT)
    (sent,) = conversion.on_wire([rec])
    assert sent is rec and sent["apiVersion"] == changes.API_VERSION_V2
    assert "data" in sent and sent["data"] == {}


def test_a_batch_on_the_wire_is_of_the_version_its_records_left_as() -> None:
    doc = json.loads(listenerapi.changes_body([builtin_record(), builtin_record()]))
    assert doc["apiVersion"] == changes.API_VERSION and doc["kind"] == changes.LIST_KIND
    assert all("watch" not in r and "resource" not in r for r in doc["items"])
    assert changes.validate_batch(doc) == []


def test_the_built_in_watch_name_is_no_watch_in_the_kcp() -> None:
    with pytest.raises(watches.WatchError):
        watches.parse(
            {
                "metadata": {"name": conversion.BUILTIN_NAME},
                "spec": {"resource": watches.CONFIGMAP.wire(), "send": {"mode": "full"}},
            }
        )


def test_the_intake_makes_a_v1_record_the_record_of_its_compat_watch() -> None:
    rec = conversion.on_wire([builtin_record()])[0]
    assert conversion.is_v1(rec)
    compat = watches.Watch("configs", watches.CONFIGMAP)
    conversion.upgrade(rec, compat)
    assert not conversion.is_v1(rec)
    assert rec["watch"] == "configs"
    assert rec["resource"] == {"group": "", "version": "v1", "kind": "ConfigMap"}
    assert not conversion.is_v1(builtin_record())
