"""Tether on a KCP that already runs compass-manager (issue 27, item 2).

A KCP plane of its own holds compass-manager's real CRD (hack/crds/compass-manager, copied
from kyma-project/compass-manager) and mappings as compass-manager writes them. An operator
applies ``manifests/kcp`` (``kubectl apply -k``): compass-manager's CRD and objects stay as
they were, byte for byte apart from what the API server manages; Tether's own
``compassmappings.tether.kyma-project.io`` is there. The opt-in Component
``manifests/kcp/compass/compat-compass-manager`` then lets compass read compass-manager's
mappings (``compass.legacy``) and never write them.

A plane of its own: the real apply creates cluster-wide objects (ClusterRoles, Namespaces)
the session planes' tests create themselves."""

from __future__ import annotations

import copy
import os
import pathlib
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from compass import legacy
from testing import controlplane
from tether.kube import apitypes, gateway

pytestmark = [pytest.mark.plane, pytest.mark.processes]  # a plane of its own

REPO = controlplane.REPO_ROOT
CM_CRD_FILE = (
    REPO
    / "hack"
    / "crds"
    / "compass-manager"
    / "operator.kyma-project.io_compassmanagermappings.yaml"
)
KCP_DIR = REPO / "manifests" / "kcp"
COMPAT_DIR = KCP_DIR / "compass" / "compat-compass-manager"
OLD_CRD_FILE = REPO / "hack" / "crds" / "tether-0.1.0_compassmanagermappings.yaml"
OLD_FINALIZER = "tether.kyma-project.io/compass-registration"  # 0.1.0 compass's, on its mappings
NS = "kcp-system"
SA_USER = "system:serviceaccount:tether-system:tether-compass"
CRDS = gateway.Resource("apiextensions.k8s.io", "v1", "customresourcedefinitions", namespaced=False)
CM = apitypes.COMPASS_MANAGER_LEGACY_MAPPINGS
CM_CRD = f"{CM.plural}.{CM.group}"
OURS = f"{apitypes.COMPASS_MAPPINGS.plural}.{apitypes.COMPASS_MAPPINGS.group}"
# (name, runtime ID label, dry run) as compass-manager's
# UpsertCompassMapping/CreateCompassMapping write them
CM_OBJECTS = [
    ("kyma-a", "4a1f0000-0000-4000-8000-00000000000a", False),
    ("kyma-b", "", False),
    ("kyma-c", "dry-run-id", True),
]


class Landscape:
    def __init__(self, plane: controlplane.ControlPlane, kube: gateway.Kube) -> None:
        self.plane, self.kube = plane, kube
        self.not_served = ""
        self.crd_before: dict[str, Any] = {}
        self.objects_before: list[dict[str, Any]] = []
        self.applied = ""

    def crd(self) -> dict[str, Any]:
        return self.kube.get(CRDS, None, CM_CRD)

    def objects(self) -> list[dict[str, Any]]:
        return sorted(self.kube.list_items(CM, NS), key=lambda o: str(o["metadata"]["name"]))

    def kubectl(self, *args: str) -> str:
        out = self.plane.kubectl(*args, timeout=300)
        assert out.returncode == 0, (args, out.stderr)
        return out.stdout


def _cm_object(name: str, rid: str, dry: bool) -> dict[str, Any]:
    labels = {
        legacy.KYMA_NAME_LABEL: name,
        legacy.RUNTIME_ID_LABEL: rid,
        "kyma-project.io/global-account-id": "ga-cm",
        "kyma-project.io/subaccount-id": "sa-cm",
        "operator.kyma-project.io/managed-by": "compass-manager",
    }
    if dry:
        labels[legacy.DRY_RUN_LABEL] = "Yes"
    return {
        "apiVersion": CM.api_version,
        "kind": "CompassManagerMapping",
        "metadata": {
            "name": name,
            "namespace": NS,
            "labels": labels,
            "finalizers": ["kyma-project.io/cm-protection"],
        },
    }


@pytest.fixture(scope="module")
def landscape() -> Iterator[Landscape]:
    with controlplane.ControlPlane("coexist-kcp") as plane:
        kube = gateway.from_kubeconfig(str(plane.kubeconfig))
        try:
            land = Landscape(plane, kube)
            kube.create(gateway.NAMESPACES, None, {"metadata": {"name": NS}})
            try:
                legacy.read(kube, NS)
            except legacy.Unavailable as e:
                land.not_served = str(e)
            _install(plane, CM_CRD_FILE)
            for name, rid, dry in CM_OBJECTS:
                kube.create(CM, NS, _cm_object(name, rid, dry))
                kube.patch(
                    CM,
                    NS,
                    name,
                    {
                        "status": {
                            "registered": bool(rid),
                            "configured": bool(rid),
                            "state": "Ready" if rid else "Processing",
                        }
                    },
                    subresource="status",
                )
            land.crd_before, land.objects_before = land.crd(), land.objects()
            # as an operator would, on a KCP where compass-manager runs
            land.applied = land.kubectl("apply", "-k", str(KCP_DIR))
            yield land
        finally:
            kube.close()


def _install(plane: controlplane.ControlPlane, crd: pathlib.Path) -> None:
    api = plane.api_client()
    try:
        controlplane.install_crds(api, crd)
    finally:
        api.close()


def _stable(obj: dict[str, Any]) -> dict[str, Any]:
    """The object without what the API server itself writes after creation (a CRD's status
    and the resourceVersion and managed-fields entry of such a status write)."""
    out = copy.deepcopy(obj)
    out.pop("status", None)
    meta = out["metadata"]
    meta.pop("resourceVersion", None)
    meta["managedFields"] = [
        f for f in meta.get("managedFields") or [] if f.get("subresource") != "status"
    ]
    return out


def test_compass_managers_crd_is_left_byte_for_byte(landscape: Landscape) -> None:
    after = landscape.crd()
    assert _stable(after) == _stable(landscape.crd_before)
    assert after["metadata"]["generation"] == landscape.crd_before["metadata"]["generation"] == 1
    assert not [
        f["manager"]
        for f in after["metadata"].get("managedFields") or []
        if f["manager"].startswith("kubectl")
    ]  # the apply never wrote it
    shipped = yaml.safe_load(CM_CRD_FILE.read_text())
    # compass-manager's spec as its repository has it; the server only adds defaults
    assert {k: after["spec"][k] for k in shipped["spec"]} == shipped["spec"]
    assert set(after["spec"]) - set(shipped["spec"]) <= {"conversion"}
    assert after["metadata"]["annotations"] == shipped["metadata"]["annotations"]
    assert "app.kubernetes.io/part-of" not in (after["metadata"].get("labels") or {})
    assert CM_CRD not in landscape.applied  # kubectl names every object it applied


def test_compass_managers_objects_are_unchanged(landscape: Landscape) -> None:
    after = landscape.objects()
    assert [o["metadata"]["name"] for o in after] == ["kyma-a", "kyma-b", "kyma-c"]
    assert after == landscape.objects_before  # resourceVersion included: never written
    assert after[0]["status"] == {"registered": True, "configured": True, "state": "Ready"}


def test_tethers_own_mapping_crd_is_served_beside_it(landscape: Landscape) -> None:
    ours = landscape.kube.get(CRDS, None, OURS)
    assert ours["spec"]["group"] == "tether.kyma-project.io"
    assert ours["spec"]["names"]["kind"] == apitypes.COMPASS_MAPPING_KIND
    assert any(
        c["type"] == "Established" and c["status"] == "True"
        for c in (ours.get("status") or {}).get("conditions") or []
    )
    assert f"customresourcedefinition.apiextensions.k8s.io/{OURS} created" in landscape.applied
    assert list(landscape.kube.list_items(apitypes.COMPASS_MAPPINGS, NS)) == []
    names = landscape.kubectl("get", "compassmanagermappings", "-n", NS, "-o", "name")
    assert names.split() == [f"compassmanagermapping.{CM.group}/{n}" for n, _, _ in CM_OBJECTS]
    rendered = yaml.safe_load_all(landscape.kubectl("kustomize", str(KCP_DIR)))
    assert {
        d["spec"]["group"] for d in rendered if d and d["kind"] == "CustomResourceDefinition"
    } == {apitypes.TETHER_GROUP}  # no CRD of compass-manager's (or lifecycle-manager's) group


def _can(landscape: Landscape, verb: str, *extra: str) -> bool:
    out = landscape.plane.kubectl("auth", "can-i", verb, CM_CRD, "-n", NS, "--as", SA_USER, *extra)
    assert out.stdout.strip() in ("yes", "no"), out.stderr
    return out.stdout.strip() == "yes"


def _overlay(tmp: pathlib.Path) -> pathlib.Path:
    """The landscape's own kustomization: manifests/kcp plus the Component (kustomize takes
    relative paths only)."""
    (tmp / "kustomization.yaml").write_text(
        yaml.safe_dump(
            {
                "apiVersion": "kustomize.config.k8s.io/v1beta1",
                "kind": "Kustomization",
                "resources": [os.path.relpath(KCP_DIR, tmp)],
                "components": [os.path.relpath(COMPAT_DIR, tmp)],
            }
        )
    )
    return tmp


def test_the_compat_overlay_lets_compass_read_compass_managers_mappings_never_write(
    landscape: Landscape, tmp_path: pathlib.Path
) -> None:
    assert "is not served" in landscape.not_served  # before compass-manager's CRD
    sa = gateway.from_kubeconfig(
        str(landscape.plane.issue_client_cert(SA_USER, ("system:serviceaccounts",)))
    )
    try:
        assert not _can(landscape, "list")  # manifests/kcp alone: not even a read
        with pytest.raises(legacy.Unavailable, match="forbidden"):
            legacy.read(sa, NS)
        assert legacy.Source(sa, NS)("kyma-a") is None  # logged; adoption goes on without
        landscape.kubectl("apply", "-k", str(_overlay(tmp_path)))
        assert _can(landscape, "list") and _can(landscape, "get")
        for verb in ("create", "update", "patch", "delete", "deletecollection", "watch"):
            assert not _can(landscape, verb), verb
        for verb in ("update", "patch"):
            assert not _can(landscape, verb, "--subresource=status"), verb
        regs = legacy.read(sa, NS)
        assert regs.by_kyma == {"kyma-a": CM_OBJECTS[0][1]}  # b: not registered, c: a dry run
        assert regs.skipped == 2 and regs.ambiguous == frozenset()
        assert legacy.Source(sa, NS)("kyma-a") == CM_OBJECTS[0][1]  # what compass plugs in
        dep = landscape.kube.get(apitypes.DEPLOYMENTS, "tether-system", "tether-compass")
        env = {
            e["name"]: e.get("value")
            for e in dep["spec"]["template"]["spec"]["containers"][0]["env"]
        }
        assert env["TETHER_COMPASS_READ_COMPASS_MANAGER_MAPPINGS"] == "true"
        assert landscape.objects() == landscape.objects_before
        assert _stable(landscape.crd()) == _stable(landscape.crd_before)
    finally:
        sa.close()


def _old_mapping(name: str, rid: str) -> dict[str, Any]:
    """A mapping as Tether 0.1.0's compass wrote it (compass/mappings.py at v0.1.0)."""
    labels = {
        legacy.KYMA_NAME_LABEL: name,
        legacy.RUNTIME_ID_LABEL: rid,
        "kyma-project.io/global-account-id": "ga-old",
    }
    return {
        "apiVersion": CM.api_version,
        "kind": "CompassManagerMapping",
        "metadata": {
            "name": name,
            "namespace": NS,
            "labels": labels,
            "finalizers": [OLD_FINALIZER],
        },
        "spec": {},
    }


def test_upgrading_from_0_1_0_leaves_its_mappings_until_the_operator_deletes_them() -> None:
    """docs/compass.md, "Upgrading from 0.1.0": the new manifests leave 0.1.0's CRD and
    objects alone, compass.legacy reads their runtime IDs (the Component's path), and the
    documented clean-up (Tether's finalizer removed, objects and CRD deleted) works."""
    ids = {
        "old-a": "4a1f0000-0000-4000-8000-0000000000a1",
        "old-b": "4a1f0000-0000-4000-8000-0000000000b2",
    }
    with controlplane.ControlPlane("upgrade-kcp") as plane:
        kube = gateway.from_kubeconfig(str(plane.kubeconfig))
        land = Landscape(plane, kube)
        try:
            kube.create(gateway.NAMESPACES, None, {"metadata": {"name": NS}})
            _install(plane, OLD_CRD_FILE)
            cond = {
                "type": "Ready",
                "status": "True",
                "reason": "Ready",
                "message": "",
                "lastTransitionTime": "2026-12-01T00:00:00Z",
            }
            for name, rid in ids.items():
                kube.create(CM, NS, _old_mapping(name, rid))
                kube.patch(
                    CM,
                    NS,
                    name,
                    {
                        "status": {
                            "registered": True,
                            "configured": True,
                            "state": "Ready",
                            "conditions": [cond],
                        }
                    },
                    subresource="status",
                )
            crd_before, before = land.crd(), land.objects()
            land.kubectl("apply", "-k", str(KCP_DIR))
            assert land.objects() == before
            assert _stable(land.crd()) == _stable(crd_before)
            assert legacy.read(kube, NS).by_kyma == ids
            cached = legacy.Source(kube, NS, max_age=3600)
            assert cached("old-a") == ids["old-a"]
            # step 4: the objects with Tether's finalizer, then step 5: the CRD
            ours = [
                o["metadata"]["name"]
                for o in before
                if OLD_FINALIZER in o["metadata"]["finalizers"]
            ]
            assert ours == sorted(ids)
            for name in ours:
                land.kubectl(
                    "-n",
                    NS,
                    "patch",
                    "compassmanagermapping",
                    name,
                    "--type=merge",
                    "-p",
                    '{"metadata":{"finalizers":null}}',
                )
                land.kubectl("-n", NS, "delete", "compassmanagermapping", name, "--timeout=60s")
            assert land.objects() == []
            land.kubectl("delete", "crd", CM_CRD, "--timeout=120s")
            assert cached("old-a") == ids["old-a"]  # read once per max_age, not per call
            assert legacy.Source(kube, NS)("old-a") is None  # the CRD is gone: no ID, no error
            assert kube.get_or_none(CRDS, None, OURS) is not None  # Tether's own stays
        finally:
            kube.close()
