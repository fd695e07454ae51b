"""The packaged SKR bundle is ``kubectl kustomize manifests/skr``, current (``make bundle``)."""

from __future__ import annotations

import pytest
import yaml

from enroller import render
from testing import controlplane

pytestmark = pytest.mark.processes  # starts processes of its own (testing/tiers.py)


def test_the_packaged_bundle_is_the_kustomize_output_of_manifests_skr() -> None:
    kubectl = controlplane.binaries() / "kubectl"
    import subprocess

    out = subprocess.run(
        [str(kubectl), "kustomize", str(controlplane.REPO_ROOT / "manifests" / "skr")],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    packaged = render.BUNDLE_FILE.read_text()
    assert list(yaml.safe_load_all(packaged)) == list(yaml.safe_load_all(out)), "run: make bundle"
    kinds = {o["kind"] for o in render.load_bundle(packaged)}
    assert {
        "Deployment",
        "ValidatingWebhookConfiguration",
        "ServiceAccount",
        "ClusterRole",
    } <= kinds
