"""compass.legacy.registrations: compass-manager's mappings -> runtime ID by Kyma name (pure;
the read on a real KCP is in test_crd_coexistence.py)."""

from __future__ import annotations

import logging
from typing import Any

from kubernetes import client

from compass import legacy, metrics, service, settings
from tether.kube import gateway


def cm_mapping(
    name: str,
    rid: str | None,
    *,
    kyma: str | None = None,
    dry: bool = False,
    deleting: bool = False,
) -> dict[str, Any]:
    """A CompassManagerMapping as compass-manager writes it (UpsertCompassMapping)."""
    labels = {
        "operator.kyma-project.io/managed-by": "compass-manager",
        "kyma-project.io/global-account-id": "ga-1",
    }
    if kyma is not None:
        labels[legacy.KYMA_NAME_LABEL] = kyma
    if rid is not None:
        labels[legacy.RUNTIME_ID_LABEL] = rid
    if dry:
        labels[legacy.DRY_RUN_LABEL] = "Yes"
    meta: dict[str, Any] = {
        "name": name,
        "namespace": "kcp-system",
        "labels": labels,
        "finalizers": ["kyma-project.io/cm-protection"],
    }
    if deleting:
        meta["deletionTimestamp"] = "2026-12-05T04:00:00Z"
    return {
        "apiVersion": "operator.kyma-project.io/v1beta1",
        "kind": "CompassManagerMapping",
        "metadata": meta,
        "status": {"registered": bool(rid), "configured": bool(rid)},
    }


def test_registered_mappings_give_the_runtime_id_by_kyma_name() -> None:
    regs = legacy.registrations(
        [cm_mapping("a", "rid-a", kyma="a"), cm_mapping("b", "rid-b", kyma="b")]
    )
    assert regs.by_kyma == {"a": "rid-a", "b": "rid-b"}
    assert regs.runtime_id("a") == "rid-a" and regs.runtime_id("zz") is None
    assert regs.ambiguous == frozenset() and regs.skipped == 0


def test_the_kyma_name_label_wins_over_the_object_name() -> None:
    regs = legacy.registrations(
        [cm_mapping("other-name", "rid-a", kyma="kyma-a"), cm_mapping("no-label", "rid-n")]
    )
    assert regs.by_kyma == {"kyma-a": "rid-a", "no-label": "rid-n"}


def test_unregistered_dry_run_and_deleted_mappings_are_left_out() -> None:
    regs = legacy.registrations(
        [
            cm_mapping("empty", "", kyma="empty"),  # CreateCompassMapping: ID "" until registered
            cm_mapping("none", None, kyma="none"),
            cm_mapping(
                "dry", "fake-id", kyma="dry", dry=True
            ),  # a dry run's ID is not in the Director
            cm_mapping("gone", "rid-g", kyma="gone", deleting=True),
            cm_mapping("ok", "rid-ok", kyma="ok"),
        ]
    )
    assert regs.by_kyma == {"ok": "rid-ok"}
    assert regs.skipped == 4


def test_two_mappings_naming_different_runtimes_are_ambiguous_never_guessed() -> None:
    regs = legacy.registrations(
        [
            cm_mapping("x1", "rid-1", kyma="x"),
            cm_mapping("x2", "rid-2", kyma="x"),
            cm_mapping("y1", "rid-y", kyma="y"),
            cm_mapping("y2", "rid-y", kyma="y"),
        ]
    )  # same ID twice: agreed
    assert regs.runtime_id("x") is None
    assert regs.ambiguous == frozenset({"x"})
    assert regs.by_kyma == {"y": "rid-y"}


def test_the_setting_plugs_a_source_into_the_reconciler() -> None:
    """compass/service.py: TETHER_COMPASS_READ_COMPASS_MANAGER_MAPPINGS=true gives the
    reconciler a ``legacy.Source`` (nothing is called at build time; the read itself is in
    test_crd_coexistence.py)."""
    for on in (False, True):
        s = settings.Settings(
            director_url="https://director.invalid/graphql",
            token_url="https://director.invalid/token",
            client_id="c",
            client_secret="s",
            read_compass_manager=on,
            interval=60.0,
        )
        svc = service.build(
            s,
            gateway.Kube(client.ApiClient()),
            metrics.Metrics(),
            logging.getLogger("tether.audit.test.legacy"),
        )
        try:
            assert isinstance(svc.reconciler.known_runtime_id, legacy.Source) is on
        finally:
            svc.close()
