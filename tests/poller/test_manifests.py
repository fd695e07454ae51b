"""manifests/skr/poller: rendered by kustomize; its environment is one the poller's settings
accept. The server-side dry run of all of manifests/skr, poller included, is
tests/webhook/test_manifests.py."""

from __future__ import annotations

import pathlib
from typing import Any

import pytest
import yaml

from poller import settings
from testing import controlplane

pytestmark = pytest.mark.processes
SKR = controlplane.REPO_ROOT / "manifests" / "skr"


def _poller_docs(skr: controlplane.ControlPlane) -> dict[str, dict[str, Any]]:
    out = skr.kubectl("kustomize", str(SKR))
    assert out.returncode == 0, out.stderr
    return {
        d["kind"]: d
        for d in yaml.safe_load_all(out.stdout)
        if d["metadata"]["name"] == "tether-poller"
    }


def test_the_deployment_runs_two_replicas_with_settings_the_poller_accepts(
    skr: controlplane.ControlPlane,
    tmp_path: pathlib.Path,
) -> None:
    docs = _poller_docs(skr)
    assert set(docs) == {
        "Deployment",
        "Service",
        "PodDisruptionBudget",
        "NetworkPolicy",
        "ServiceAccount",
        "ClusterRole",
        "ClusterRoleBinding",
    }
    spec = docs["Deployment"]["spec"]
    assert spec["replicas"] == 2
    pod = spec["template"]["spec"]
    c = pod["containers"][0]
    assert c["command"] == ["tether", "poller"]
    assert pod["serviceAccountName"] == "tether-poller"
    assert c["securityContext"]["readOnlyRootFilesystem"] is True
    env: dict[str, str] = {}
    for var in c["env"]:
        if "value" in var:
            env[var["name"]] = var["value"]
    for name in ("ca.crt", "tls.crt", "tls.key"):
        (tmp_path / name).write_text("x")
    env.update(
        {
            "TETHER_RUNTIME_ID": "rt-1",
            "TETHER_LISTENER_URL": "https://listener.example.com",
            "TETHER_POLLER_IDENTITY": "pod-0",
            "TETHER_LISTENER_CA_FILE": str(tmp_path / "ca.crt"),
            "TETHER_CLIENT_CERT_FILE": str(tmp_path / "tls.crt"),
            "TETHER_CLIENT_KEY_FILE": str(tmp_path / "tls.key"),
        }
    )
    s = settings.from_env(env)
    assert (s.lease.namespace, s.lease.name) == ("tether-system", "tether-poller")
    assert s.bind.endswith(":8080")
    port = c["ports"][0]["containerPort"]
    assert port == 8080 and c["readinessProbe"]["httpGet"]["path"] == "/readyz"
