"""The enroller beside lifecycle-manager (``TETHER_ENROLLER_MODE=module``) on real planes,
deployed as tests/deployed deploys it: the Kyma module's manifest (manifests/module's shape:
the runtime side with the module label, on the local runner's SKR overlay) applied to the
runtime as lifecycle-manager applies it (server-side, its field manager
``declarative.kyma-project.io/applier``, forced); the enroller then writes only what is per
runtime (the Secrets, each webhook's caBundle, its notes) under its own field manager, the
module's Deployments run, a customer's ConfigMap reaches the KCP, and a second module
version applies without a field conflict (not forced) and keeps the enroller's fields.

Not shown: lifecycle-manager itself (its apply is imitated with kubectl and its field
manager), and a staged rollout in this mode."""

from __future__ import annotations

import base64
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from testing import controlplane, deployed, overlays, watchenv
from tether.kube import apitypes

pytestmark = [pytest.mark.processes, pytest.mark.timeout(900)]

APPLIER = "declarative.kyma-project.io/applier"
ENROLLER = "tether-enroller"
CUSTOMER_NS = "shop"


def module_manifest(work: Path, version: str) -> Path:
    """The module's manifest of ``version``: the SKR overlay the local runner runs, with the
    module label (as manifests/module) and the version as an annotation on every object."""
    base = overlays.render_skr_bundle(work / "module-base")
    folder = work / f"module-{version}"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "kustomization.yaml").write_text(
        yaml.safe_dump(
            {
                "apiVersion": "kustomize.config.k8s.io/v1beta1",
                "kind": "Kustomization",
                "resources": [os.path.relpath(base, folder)],
                "labels": [
                    {
                        "pairs": {"operator.kyma-project.io/module-name": "tether"},
                        "includeSelectors": False,
                    }
                ],
                "commonAnnotations": {"tether.kyma-project.io/module-version": version},
            }
        )
    )
    return folder


def apply_module(skr: controlplane.ControlPlane, folder: Path, *, force: bool) -> tuple[int, str]:
    rendered = deployed.kubectl(skr, "kustomize", str(folder)).stdout
    path = folder / "rendered.yaml"
    path.write_text(rendered)
    args = ["apply", "--server-side", f"--field-manager={APPLIER}", "-f", str(path)]
    done = skr.kubectl(*args, *(["--force-conflicts"] if force else []))
    return done.returncode, done.stdout + done.stderr


def managers(plane: controlplane.ControlPlane, *what: str) -> dict[str, Any]:
    """Field manager -> its fieldsV1 of one object."""
    got = json.loads(
        deployed.kubectl(plane, "get", *what, "-o", "json", "--show-managed-fields").stdout
    )
    return {m["manager"]: m.get("fieldsV1", {}) for m in got["metadata"]["managedFields"]}


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[deployed.Fleet]:
    work = tmp_path_factory.mktemp("module-mode")
    with controlplane.planes("modmode-skr", "modmode-kcp") as planes:
        code, out = apply_module(planes["modmode-skr"], module_manifest(work, "0.1.0"), force=True)
        assert code == 0, out
        f = deployed.install(
            planes["modmode-skr"],
            planes["modmode-kcp"],
            work / "fleet",
            timeout=240,
            backoff_seconds=1.0,
            enroller_env={
                "TETHER_ENROLLER_MODE": "module",
                "TETHER_ENROLLER_INTERVAL_SECONDS": "5",
                "TETHER_ENROLLER_RESYNC_SECONDS": "10",  # a full apply every 10 s
            },
        )
        try:
            yield f
        finally:
            f.stop()


def test_the_enroller_writes_only_what_is_per_runtime(fleet: deployed.Fleet) -> None:
    secret = deployed.runtime_secret(fleet)
    assert base64.b64decode(secret["data"]["runtime-id"]).decode() == deployed.RUNTIME_ID
    hook = json.loads(
        deployed.kubectl(
            fleet.skr, "get", "validatingwebhookconfiguration", "tether-configmaps", "-o", "json"
        ).stdout
    )
    assert all(w["clientConfig"].get("caBundle") for w in hook["webhooks"])
    assert all("service" in w["clientConfig"] for w in hook["webhooks"])  # the module's, kept
    fields = managers(fleet.skr, "validatingwebhookconfiguration", "tether-configmaps")
    mine = json.dumps(fields[ENROLLER])
    assert "caBundle" in mine and "service" not in mine and "rules" not in mine, mine
    assert "service" in json.dumps(fields[APPLIER])
    for name in ("tether-webhook", "tether-poller"):
        owners = managers(fleet.skr, "deployment", name, "-n", overlays.NAMESPACE)
        assert ENROLLER not in owners, (name, list(owners))
        assert APPLIER in owners
    owners = managers(fleet.skr, "namespace", overlays.NAMESPACE)
    assert ENROLLER not in owners and APPLIER in owners


def test_a_configmap_change_reaches_the_kcp(fleet: deployed.Fleet) -> None:
    deployed.kubectl(fleet.skr, "create", "namespace", CUSTOMER_NS, check=False)
    send_configmap(fleet, "EUR")


def send_configmap(fleet: deployed.Fleet, currency: str) -> None:
    manifest = fleet.work / f"configmap-{currency}.json"
    manifest.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {
                    "name": "checkout",
                    "namespace": CUSTOMER_NS,
                    "labels": {watchenv.OPT_IN_LABEL: "true"},
                },
                "data": {"currency": currency},
            }
        )
    )
    deployed.kubectl(fleet.skr, "apply", "-f", str(manifest))

    def arrived() -> bool:
        done = deployed.kubectl(
            fleet.kcp, "get", apitypes.RUNTIME_CONFIGMAPS.plural, "-A", "-o", "json"
        )
        return any(
            r["spec"].get("data") == {"currency": currency}
            for r in json.loads(done.stdout)["items"]
        )

    fleet.wait_for(
        f"the customer's ConfigMap ({currency}) in the KCP",
        arrived,
        timeout=120,
        logs_of="tether-listener",
    )


def test_a_second_module_version_applies_without_a_conflict(fleet: deployed.Fleet) -> None:
    before = deployed.runtime_secret(fleet)["metadata"]["resourceVersion"]
    code, out = apply_module(fleet.skr, module_manifest(fleet.work, "0.1.1"), force=False)
    assert code == 0, f"the module's second version conflicts: {out}"
    hook = json.loads(
        deployed.kubectl(
            fleet.skr, "get", "validatingwebhookconfiguration", "tether-configmaps", "-o", "json"
        ).stdout
    )
    assert hook["metadata"]["annotations"]["tether.kyma-project.io/module-version"] == "0.1.1"
    assert all(w["clientConfig"].get("caBundle") for w in hook["webhooks"])  # still the enroller's
    assert deployed.runtime_secret(fleet)["metadata"]["resourceVersion"] == before
    send_configmap(fleet, "CHF")  # changes still flow


def test_a_tenant_holding_the_ca_bundle_is_reported_not_overwritten(fleet: deployed.Fleet) -> None:
    """Last: it leaves the runtime's webhook with the tenant's caBundle."""
    hook = json.loads(
        deployed.kubectl(
            fleet.skr, "get", "validatingwebhookconfiguration", "tether-configmaps", "-o", "json"
        ).stdout
    )
    theirs = base64.b64encode(fleet.skr.ca_file.read_bytes()).decode()  # some other CA
    seized = fleet.work / "seized.json"
    seized.write_text(
        json.dumps(
            {
                "apiVersion": "admissionregistration.k8s.io/v1",
                "kind": "ValidatingWebhookConfiguration",
                "metadata": {"name": "tether-configmaps"},
                "webhooks": [
                    {"name": w["name"], "clientConfig": {"caBundle": theirs}}
                    for w in hook["webhooks"]
                ],
            }
        )
    )
    deployed.kubectl(
        fleet.skr,
        "apply",
        "--server-side",
        "--force-conflicts",
        "--field-manager=runtime-admin",
        "-f",
        str(seized),
    )

    def reported() -> bool:
        status = (deployed.enrollment(fleet.kcp) or {}).get("status") or {}
        return any(c.get("reason") == "FieldConflict" for c in status.get("conditions") or [])

    fleet.wait_for("FieldConflict on the RuntimeEnrollment", reported, timeout=120)
    now = json.loads(
        deployed.kubectl(
            fleet.skr, "get", "validatingwebhookconfiguration", "tether-configmaps", "-o", "json"
        ).stdout
    )
    assert all(w["clientConfig"]["caBundle"] == theirs for w in now["webhooks"])
