"""Two ``tether enroller`` processes: only the Lease holder acts; when it dies the other
takes over and repairs what went missing meanwhile."""

from __future__ import annotations

import os
import pathlib
import signal
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client

from enroller import render
from testing import compassenv, controlplane
from testing.enrollenv import CRD, EnrollerProcess
from testing.pollerenv import wait_until
from tether.base import certs

pytestmark = pytest.mark.processes


@pytest.fixture(scope="module")
def runtime_plane() -> Iterator[controlplane.ControlPlane]:
    with controlplane.planes("enr-p") as p:
        yield p["enr-p"]


def test_only_the_lease_holder_acts_and_the_other_takes_over(
    kcp: controlplane.ControlPlane,
    kcp_api: client.ApiClient,
    kcp_namespace: str,
    kyma_crd: str,
    runtime_plane: controlplane.ControlPlane,
    tmp_path: pathlib.Path,
) -> None:
    controlplane.install_crds(kcp_api, CRD)
    ns = kcp_namespace
    labels = compassenv.kyma_labels("ga", "proc", **{"kyma-project.io/runtime-id": "rt-proc"})
    client.CustomObjectsApi(kcp_api).create_namespaced_custom_object(
        "operator.kyma-project.io",
        "v1beta2",
        ns,
        "kymas",
        {
            "apiVersion": "operator.kyma-project.io/v1beta2",
            "kind": "Kyma",
            "metadata": {
                "name": "proc",
                "labels": labels,
                "annotations": {"skr-domain": "proc.kyma.example.com"},
            },
            "spec": {"channel": "regular"},
        },
    )
    compassenv.create_kubeconfig_secret(kcp_api, ns, "proc", runtime_plane)
    listener_ca = certs.CertificateAuthority.create("listener")
    (tmp_path / "listener-ca.crt").write_bytes(listener_ca.cert_pem)
    env = {
        "TETHER_ENROLLER_KUBECONFIG": str(kcp.kubeconfig),
        "TETHER_KCP_NAMESPACE": ns,
        "TETHER_ENROLLER_NAMESPACE": ns,
        "TETHER_ENROLLER_LISTENER_URL": "https://listener.example.com",
        "TETHER_ENROLLER_LISTENER_CA_FILE": str(tmp_path / "listener-ca.crt"),
        "TETHER_ENROLLER_INTERVAL_SECONDS": "2",
        "TETHER_ENROLLER_REACT_SECONDS": "1",
        "TETHER_LOG_FORMAT": "text",
    }
    procs = [EnrollerProcess("a", env, tmp_path), EnrollerProcess("b", env, tmp_path)]
    skr = runtime_plane.api_client()
    try:

        def hook() -> Any:
            try:
                return client.AdmissionregistrationV1Api(skr).read_validating_webhook_configuration(
                    render.WEBHOOK_CONFIG
                )
            except client.ApiException:
                return None

        wait_until(hook, 60, "the runtime enrolled", interval=0.3)
        states = wait_until(
            lambda: (s := sorted(p.leader() or 0 for p in procs)) == [0, 1] and s,
            60,
            "one leader",
            interval=0.3,
        )
        assert states == [0, 1]
        holder = next(p for p in procs if p.leader() == 1)
        other = next(p for p in procs if p is not holder)
        assert "applied" in holder.log.read_text() and "applied" not in other.log.read_text()

        os.killpg(holder.popen.pid, signal.SIGKILL)  # no Lease release: the other waits it out
        holder.popen.wait(timeout=10)
        client.AdmissionregistrationV1Api(skr).delete_validating_webhook_configuration(
            render.WEBHOOK_CONFIG
        )
        wait_until(lambda: other.leader() == 1, 45, "the other to lead", interval=0.3)
        wait_until(hook, 30, "the repair by the new leader", interval=0.3)
        # the other applied nothing while it stood by (asserted above); now it has: the repair
        # (its cause is "repaired", or "updated"/"installed" when its first pass as leader
        # compares against the state it never saw applied)
        assert "applied" in other.log.read_text(), other.log.read_text()[-3000:]
    finally:
        for p in procs:
            p.stop()
        skr.close()
        client.CustomObjectsApi(kcp_api).patch_namespaced_custom_object(
            "operator.kyma-project.io",
            "v1beta2",
            ns,
            "kymas",
            "proc",
            {"metadata": {"finalizers": None}},
        )
