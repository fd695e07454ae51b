"""manifests/skr/poller: rendered by kustomize and accepted by the real SKR apiserver
(server-side dry run); its environment is one the poller's settings accept."""

from __future__ import annotations

import pathlib
import subprocess
from typing import Any

import pytest
import yaml
from kubernetes import client

from common import controlplane
from poller import settings

pytestmark = pytest.mark.slow
SKR = controlplane.REPO_ROOT / "manifests" / "skr"


def _kubectl(plane: controlplane.ControlPlane, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(controlplane.binaries() / "kubectl"), f"--kubeconfig={plane.kubeconfig}", *args],
                          capture_output=True, text=True, timeout=120, check=False)


def _poller_docs(skr: controlplane.ControlPlane) -> dict[str, dict[str, Any]]:
    out = _kubectl(skr, "kustomize", str(SKR))
    assert out.returncode == 0, out.stderr
    return {d["kind"]: d for d in yaml.safe_load_all(out.stdout) if d["metadata"]["name"] == "tether-poller"}


def test_the_deployment_runs_two_replicas_with_settings_the_poller_accepts(
    skr: controlplane.ControlPlane, tmp_path: pathlib.Path,
) -> None:
    docs = _poller_docs(skr)
    assert set(docs) == {"Deployment", "Service", "PodDisruptionBudget", "NetworkPolicy"}
    spec = docs["Deployment"]["spec"]
    assert spec["replicas"] == 2
    pod = spec["template"]["spec"]
    c = pod["containers"][0]
    assert c["command"] == ["tether", "poller"]
    assert pod["serviceAccountName"] == "tether"
    assert c["securityContext"]["readOnlyRootFilesystem"] is True
    env: dict[str, str] = {}
    for var in c["env"]:
        if "value" in var:
            env[var["name"]] = var["value"]
    for name in ("ca.crt", "tls.crt", "tls.key"):
        (tmp_path / name).write_text("x")
    env.update({"TETHER_RUNTIME_ID": "rt-1", "TETHER_LISTENER_URL": "https://listener.example.com",
                "TETHER_POLLER_IDENTITY": "pod-0",
                "TETHER_LISTENER_CA_FILE": str(tmp_path / "ca.crt"),
                "TETHER_CLIENT_CERT_FILE": str(tmp_path / "tls.crt"),
                "TETHER_CLIENT_KEY_FILE": str(tmp_path / "tls.key")})
    s = settings.from_env(env)
    assert (s.lease.namespace, s.lease.name) == ("tether-system", "tether-poller")
    assert s.bind.endswith(":8080")
    port = c["ports"][0]["containerPort"]
    assert port == 8080 and c["readinessProbe"]["httpGet"]["path"] == "/readyz"


def test_server_side_dry_run_accepts_the_poller(skr: controlplane.ControlPlane, skr_api: client.ApiClient) -> None:
    try:
        client.CoreV1Api(skr_api).create_namespace(
            client.V1Namespace(metadata=client.V1ObjectMeta(name="tether-system")))
    except client.ApiException as e:
        if e.status != 409:
            raise
    out = _kubectl(skr, "apply", "-k", str(SKR), "--dry-run=server", "--server-side",
                   "--field-manager=tether-poller-test")
    assert out.returncode == 0, out.stderr
    for name in ("deployment.apps/tether-poller", "service/tether-poller",
                 "poddisruptionbudget.policy/tether-poller", "networkpolicy.networking.k8s.io/tether-poller"):
        assert name in out.stdout, out.stdout
    with pytest.raises(client.ApiException) as err:
        client.AppsV1Api(skr_api).read_namespaced_deployment("tether-poller", "tether-system")
    assert err.value.status == 404
