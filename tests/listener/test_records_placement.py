"""Where a record is stored and who owns it (``listener.storage.records``; pure, plain data)."""

from __future__ import annotations

from typing import Any

from listener.storage import records
from tether.kube import apitypes
from tether.wire import watches

REC: dict[str, Any] = {
    "runtimeId": "rt-1",
    "watch": "configuration",
    "namespace": "team-a",
    "name": "c1",
    "uid": "u1",
    "resourceVersion": "5",
    "observedAt": "2026-01-01T00:00:00Z",
    "deleted": False,
    "source": "webhook",
    "resource": {"group": "", "version": "v1", "kind": "ConfigMap"},
}
KYMA = records.Owner("kcp-system", "kyma-1", "uid-kyma-1")


def test_a_record_in_the_kyma_crs_namespace_is_owned_by_it_elsewhere_only_labelled() -> None:
    home = records.body(REC, "kcp-system", owner=KYMA)["metadata"]
    assert home["labels"][apitypes.KYMA_NAME_LABEL] == "kyma-1"
    assert home["ownerReferences"] == [
        {
            "apiVersion": "operator.kyma-project.io/v1beta2",
            "kind": "Kyma",
            "name": "kyma-1",
            "uid": "uid-kyma-1",
            "controller": False,
        }
    ]  # no blockOwnerDeletion
    away = records.body(REC, "tether-configuration", owner=KYMA)["metadata"]
    assert away["labels"][apitypes.KYMA_NAME_LABEL] == "kyma-1"
    assert "ownerReferences" not in away
    assert "ownerReferences" not in records.body(REC, "kcp-system")["metadata"]


def test_an_update_keeps_others_owner_references_and_follows_a_recreated_kyma_cr() -> None:
    other = {"apiVersion": "v1", "kind": "ConfigMap", "name": "x", "uid": "ux"}
    old_kyma = {**KYMA.reference(), "uid": "uid-before"}
    stored = {
        "metadata": {
            "name": "rcm-1",
            "namespace": "kcp-system",
            "resourceVersion": "9",
            "ownerReferences": [other, old_kyma],
            "labels": {"keep": "me"},
        }
    }
    meta = records.updated(stored, REC, owner=KYMA)["metadata"]
    assert meta["ownerReferences"] == [other, KYMA.reference()]
    assert meta["resourceVersion"] == "9" and meta["labels"]["keep"] == "me"
    # without a known Kyma CR the references stay as they are
    assert records.updated(stored, REC)["metadata"]["ownerReferences"] == [other, old_kyma]


def test_only_an_object_in_its_watchs_storage_namespace_is_placed() -> None:
    homes = {"configuration": "tether-configuration", "plain": "kcp-system"}

    def meta(ns: str, watch: str | None) -> dict[str, Any]:
        labels = {} if watch is None else {watches.WATCH_LABEL: watch}
        return {"namespace": ns, "labels": labels}

    assert records.placed(meta("tether-configuration", "configuration"), homes, "kcp-system")
    assert not records.placed(meta("kcp-system", "configuration"), homes, "kcp-system")
    assert not records.placed(meta("elsewhere", "configuration"), homes, "kcp-system")
    assert records.placed(meta("kcp-system", "plain"), homes, "kcp-system")
    assert records.placed(meta("kcp-system", None), homes, "kcp-system")  # legacy: at home
    assert not records.placed(meta("elsewhere", None), homes, "kcp-system")
    assert records.placed(meta("kcp-system", "deleted"), homes, "kcp-system")  # unknown Watch
    assert not records.placed(meta("elsewhere", "deleted"), homes, "kcp-system")
