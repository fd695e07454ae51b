"""Two ``tether enroller`` processes: only the Lease holder acts; when it dies the other
takes over and repairs what went missing meanwhile."""

from __future__ import annotations

import os
import pathlib
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kubernetes import client

from enroller import render
from testing import compassenv, controlplane, localnet
from tether import certs

pytestmark = pytest.mark.slow
CRD = controlplane.REPO_ROOT / "manifests" / "kcp" / "crds" / "tether.kyma-project.io_runtimeenrollments.yaml"


@pytest.fixture(scope="module")
def runtime_plane() -> Iterator[controlplane.ControlPlane]:
    with controlplane.planes("enr-p") as p:
        yield p["enr-p"]


class Enroller:
    def __init__(self, name: str, env: dict[str, str], work: pathlib.Path) -> None:
        self.port = controlplane.free_port()
        self.log = work / f"{name}.log"
        with open(self.log, "ab") as out:
            self.popen = subprocess.Popen(
                [sys.executable, "-m", "tether.cli", "enroller"],
                env={**{k: v for k, v in os.environ.items() if not k.startswith("TETHER_")}, **localnet.ENV, **env,
                     "TETHER_ENROLLER_BIND": f"127.0.0.1:{self.port}"},
                cwd=controlplane.REPO_ROOT, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)

    def leader(self) -> float | None:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/metrics", timeout=2) as r:
                for line in r.read().decode().splitlines():
                    if line.startswith("tether_enroller_leader "):
                        return float(line.split()[1])
        except OSError:
            return None
        return None

    def stop(self) -> None:
        controlplane.stop_group(self.popen, timeout=20)


def wait_for(what: str, probe: Callable[[], Any], timeout: float = 60.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = probe()
        if got:
            return got
        time.sleep(0.3)
    raise AssertionError(f"timed out waiting for {what}")


def test_only_the_lease_holder_acts_and_the_other_takes_over(
        kcp: controlplane.ControlPlane, kcp_api: client.ApiClient, kcp_namespace: str, kyma_crd: str,
        runtime_plane: controlplane.ControlPlane, tmp_path: pathlib.Path) -> None:
    controlplane.install_crds(kcp_api, CRD)
    ns = kcp_namespace
    labels = compassenv.kyma_labels("ga", "proc", **{"kyma-project.io/runtime-id": "rt-proc"})
    client.CustomObjectsApi(kcp_api).create_namespaced_custom_object(
        "operator.kyma-project.io", "v1beta2", ns, "kymas",
        {"apiVersion": "operator.kyma-project.io/v1beta2", "kind": "Kyma",
         "metadata": {"name": "proc", "labels": labels, "annotations": {"skr-domain": "proc.kyma.example.com"}},
         "spec": {"channel": "regular"}})
    compassenv.create_kubeconfig_secret(kcp_api, ns, "proc", runtime_plane)
    listener_ca = certs.CertificateAuthority.create("listener")
    (tmp_path / "listener-ca.crt").write_bytes(listener_ca.cert_pem)
    env = {"TETHER_ENROLLER_KUBECONFIG": str(kcp.kubeconfig), "TETHER_KCP_NAMESPACE": ns,
           "TETHER_ENROLLER_NAMESPACE": ns, "TETHER_ENROLLER_LISTENER_URL": "https://listener.example.com",
           "TETHER_ENROLLER_LISTENER_CA_FILE": str(tmp_path / "listener-ca.crt"),
           "TETHER_ENROLLER_INTERVAL_SECONDS": "2", "TETHER_ENROLLER_REACT_SECONDS": "1",
           "TETHER_LOG_FORMAT": "text"}
    procs = [Enroller("a", env, tmp_path), Enroller("b", env, tmp_path)]
    skr = runtime_plane.api_client()
    try:
        def hook() -> Any:
            try:
                return client.AdmissionregistrationV1Api(skr).read_validating_webhook_configuration(
                    render.WEBHOOK_CONFIG)
            except client.ApiException:
                return None
        wait_for("the runtime enrolled", hook)
        states = wait_for("one leader", lambda: (s := sorted(p.leader() or 0 for p in procs)) == [0, 1] and s)
        assert states == [0, 1]
        holder = next(p for p in procs if p.leader() == 1)
        other = next(p for p in procs if p is not holder)
        assert "applied" in holder.log.read_text() and "applied" not in other.log.read_text()

        os.killpg(holder.popen.pid, signal.SIGKILL)  # no Lease release: the other waits it out
        holder.popen.wait(timeout=10)
        client.AdmissionregistrationV1Api(skr).delete_validating_webhook_configuration(render.WEBHOOK_CONFIG)
        wait_for("the other to lead", lambda: other.leader() == 1, timeout=45)
        wait_for("the repair by the new leader", hook, timeout=30)
        # the other applied nothing while it stood by (asserted above); now it has: the repair
        # (its cause is "repaired", or "updated"/"installed" when its first pass as leader
        # compares against the state it never saw applied)
        assert "applied" in other.log.read_text(), other.log.read_text()[-3000:]
    finally:
        for p in procs:
            p.stop()
        skr.close()
        client.CustomObjectsApi(kcp_api).patch_namespaced_custom_object(
            "operator.kyma-project.io", "v1beta2", ns, "kymas", "proc", {"metadata": {"finalizers": None}})
