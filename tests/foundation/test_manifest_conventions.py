"""The rendered manifests (``kubectl kustomize manifests/kcp`` and ``manifests/skr``) follow
the Kubernetes conventions an operator relies on: the recommended labels on every object,
every workload hardened and probed the same way, the CRDs' columns printing real values.

Needs the control plane's kubectl only (no plane is started)."""

from __future__ import annotations

import subprocess
from typing import Any

import pytest
import yaml

from testing import controlplane

pytestmark = pytest.mark.processes  # starts processes of its own (testing/tiers.py)

# what Tether renders but does not own (none since issue 27: compass writes its own
# CompassMapping, compass-manager's CRD is not shipped)
NOT_OURS: set[tuple[str, str]] = set()
# "date" columns print an age: only for times in the past (a future time prints <invalid>)
PAST_TIMES = {
    ".metadata.creationTimestamp",
    ".spec.observedAt",
    ".status.lastChangeAt",
    ".status.updatedAt",
}


def _render(base: str) -> list[dict[str, Any]]:
    kubectl = controlplane.binaries() / "kubectl"
    out = subprocess.run(
        [str(kubectl), "kustomize", str(controlplane.REPO_ROOT / base)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    return [d for d in yaml.safe_load_all(out.stdout) if d]


@pytest.fixture(scope="module")
def objects() -> list[dict[str, Any]]:
    return _render("manifests/kcp") + _render("manifests/skr")


def _key(d: dict[str, Any]) -> tuple[str, str]:
    return d["kind"], d["metadata"]["name"]


def test_every_object_is_labelled_part_of_tether(objects: list[dict[str, Any]]) -> None:
    unlabelled = [
        _key(d)
        for d in objects
        if _key(d) not in NOT_OURS
        and (d["metadata"].get("labels") or {}).get("app.kubernetes.io/part-of") != "tether"
    ]
    assert unlabelled == []


def test_every_workload_carries_the_recommended_labels_and_is_hardened_and_probed(
    objects: list[dict[str, Any]],
) -> None:
    deployments = [d for d in objects if d["kind"] == "Deployment"]
    assert {d["metadata"]["name"] for d in deployments} == {
        "tether-admin",
        "tether-compass",
        "tether-enroller",
        "tether-janitor",
        "tether-listener",
        "tether-poller",
        "tether-webhook",
    }
    for d in deployments:
        name = d["metadata"]["name"]
        pod = d["spec"]["template"]
        labels = pod["metadata"]["labels"]
        assert labels["app.kubernetes.io/name"] == name
        assert labels["app.kubernetes.io/component"] == name.removeprefix("tether-")
        assert (
            labels["app.kubernetes.io/part-of"] == labels["app.kubernetes.io/instance"] == "tether"
        )
        # the version: the release the image is tagged with, on the Deployment and its pods
        tags = {c["image"].rpartition(":")[2] for c in pod["spec"]["containers"]}
        assert {labels.get("app.kubernetes.io/version")} == tags, name
        assert (
            d["metadata"]["labels"]["app.kubernetes.io/version"]
            == labels["app.kubernetes.io/version"]
        )
        assert {k: v for k, v in d["metadata"]["labels"].items()} == labels, name
        assert d["spec"].get("revisionHistoryLimit") is not None, name
        ctx = pod["spec"]["securityContext"]
        assert ctx["runAsNonRoot"] is True and ctx["runAsUser"] == ctx["fsGroup"] == 65532, name
        assert ctx["seccompProfile"] == {"type": "RuntimeDefault"}, name
        for c in pod["spec"]["containers"]:
            sc = c["securityContext"]
            assert sc["allowPrivilegeEscalation"] is False and sc["readOnlyRootFilesystem"] is True
            assert sc["capabilities"] == {"drop": ["ALL"]}, name
            assert "memory" in c["resources"]["limits"], name
            assert "startupProbe" in c, f"{name}: no startup probe"
            for probe in ("livenessProbe", "readinessProbe"):
                assert c[probe].get("timeoutSeconds"), f"{name}: {probe} without a timeout"


def test_tether_crds_are_in_their_categories_and_their_columns_print_values(
    objects: list[dict[str, Any]],
) -> None:
    crds = [
        d
        for d in objects
        if d["kind"] == "CustomResourceDefinition"
        and d["spec"]["group"] == "tether.kyma-project.io"
    ]
    assert len(crds) == 6  # records, deliveries, summaries, enrollments, watches, compass mappings
    for crd in crds:
        # the records have a category of their own: `kubectl get tether` would list every one
        # of them, up to 200 per runtime, beside the one enrollment of each
        own = (
            "tether-records" if crd["spec"]["names"]["plural"] == "runtimeconfigmaps" else "tether"
        )
        assert crd["spec"]["names"].get("categories") == [own], crd["metadata"]["name"]
        for version in crd["spec"]["versions"]:
            for col in version.get("additionalPrinterColumns", ()):
                if col["type"] == "date":
                    assert col["jsonPath"] in PAST_TIMES, (crd["metadata"]["name"], col)


def test_the_runtime_webhook_runs_at_a_priority_of_its_own(objects: list[dict[str, Any]]) -> None:
    by = {_key(d): d for d in objects}
    webhook = by[("Deployment", "tether-webhook")]["spec"]["template"]["spec"]
    priority = by[("PriorityClass", webhook["priorityClassName"])]
    assert 0 < priority["value"] < 1_000_000_000  # below the system-critical classes
    assert priority["globalDefault"] is False
