"""The local control planes are real: ConfigMaps, CRDs and webhook configurations on a
real kube-apiserver, two planes independent of each other."""

from __future__ import annotations

import base64
import json
import os
import pathlib
import socket
import subprocess

import pytest
from kubernetes import client

from testing import controlplane
from tether.base import certs

pytestmark = pytest.mark.processes


def test_binary_reports_the_pinned_version() -> None:
    pinned = controlplane.pinned_versions()["KUBERNETES_VERSION"]
    assert controlplane.kube_apiserver_version() == f"Kubernetes {pinned}"


def test_server_version_endpoint(skr_api: client.ApiClient) -> None:
    info = client.VersionApi(skr_api).get_code()
    pinned = controlplane.pinned_versions()["KUBERNETES_VERSION"]
    assert info.git_version == pinned
    assert info.major == "1" and info.minor == pinned.split(".")[1]


def test_configmap_create_update_delete(skr_api: client.ApiClient, namespace: str) -> None:
    core = client.CoreV1Api(skr_api)
    created = core.create_namespaced_config_map(
        namespace,
        client.V1ConfigMap(metadata=client.V1ObjectMeta(name="app-config"), data={"k": "v1"}),
    )
    updated = core.patch_namespaced_config_map("app-config", namespace, {"data": {"k": "v2"}})
    assert int(updated.metadata.resource_version) > int(created.metadata.resource_version)
    assert core.read_namespaced_config_map("app-config", namespace).data == {"k": "v2"}
    core.delete_namespaced_config_map("app-config", namespace)
    with pytest.raises(client.ApiException) as e:
        core.read_namespaced_config_map("app-config", namespace)
    assert e.value.status == 404


def test_paginated_list(skr_api: client.ApiClient, namespace: str) -> None:
    core = client.CoreV1Api(skr_api)
    for i in range(25):
        core.create_namespaced_config_map(
            namespace,
            client.V1ConfigMap(
                metadata=client.V1ObjectMeta(name=f"cm-{i:02d}"), data={"i": str(i)}
            ),
        )
    names, pages, token = [], 0, None
    while True:
        page = core.list_namespaced_config_map(namespace, limit=10, _continue=token)
        pages += 1
        names += [cm.metadata.name for cm in page.items]
        token = page.metadata._continue
        if not token:
            break
    assert pages == 3
    assert names == [f"cm-{i:02d}" for i in range(25)]


def test_crd_is_served(kcp_api: client.ApiClient, kyma_crd: str, kcp_namespace: str) -> None:
    custom = client.CustomObjectsApi(kcp_api)
    body = {
        "apiVersion": "operator.kyma-project.io/v1beta2",
        "kind": "Kyma",
        "metadata": {"name": "kyma-1", "labels": {"kyma-project.io/runtime-id": "rt-1"}},
        "spec": {"channel": "regular"},
    }
    custom.create_namespaced_custom_object(
        "operator.kyma-project.io", "v1beta2", kcp_namespace, "kymas", body
    )
    found = custom.list_namespaced_custom_object(
        "operator.kyma-project.io",
        "v1beta2",
        kcp_namespace,
        "kymas",
        label_selector="kyma-project.io/runtime-id=rt-1",
    )
    assert [k["metadata"]["name"] for k in found["items"]] == ["kyma-1"]


def test_validating_webhook_configuration(skr_api: client.ApiClient) -> None:
    ca = certs.CertificateAuthority.create("webhook-ca")
    adm = client.AdmissionregistrationV1Api(skr_api)
    name = "tether-foundation-test"
    body = client.V1ValidatingWebhookConfiguration(
        metadata=client.V1ObjectMeta(name=name),
        webhooks=[
            client.V1ValidatingWebhook(
                name="configmaps.tether.kyma-project.io",
                admission_review_versions=["v1"],
                side_effects="NoneOnDryRun",
                failure_policy="Ignore",
                timeout_seconds=2,
                client_config=client.AdmissionregistrationV1WebhookClientConfig(
                    url="https://127.0.0.1:1/validate",
                    ca_bundle=base64.b64encode(ca.cert_pem).decode(),
                ),
                namespace_selector=client.V1LabelSelector(
                    match_labels={"tether-test": "never-matches"}
                ),
                rules=[
                    client.V1RuleWithOperations(
                        api_groups=[""],
                        api_versions=["v1"],
                        resources=["configmaps"],
                        operations=["CREATE", "UPDATE", "DELETE"],
                    )
                ],
            )
        ],
    )
    adm.create_validating_webhook_configuration(body)
    try:
        got = adm.read_validating_webhook_configuration(name)
        assert got.webhooks[0].failure_policy == "Ignore"
        assert got.webhooks[0].side_effects == "NoneOnDryRun"
    finally:
        adm.delete_validating_webhook_configuration(name)


def test_planes_are_independent(
    skr_api: client.ApiClient,
    kcp_api: client.ApiClient,
    skr: controlplane.ControlPlane,
    kcp: controlplane.ControlPlane,
) -> None:
    assert skr.port != kcp.port and skr.etcd_port != kcp.etcd_port
    skr_core, kcp_core = client.CoreV1Api(skr_api), client.CoreV1Api(kcp_api)
    skr_core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name="only-in-skr")))
    try:
        names = {n.metadata.name for n in kcp_core.list_namespace().items}
        assert "only-in-skr" not in names
    finally:
        skr_core.delete_namespace("only-in-skr")
    # the admin identity of one plane is a stranger to the other (separate client CAs)
    cfg = client.Configuration()
    cfg.host = skr.url
    cfg.ssl_ca_cert = str(skr.ca_file)
    cfg.cert_file = str(kcp.dir / "pki" / "admin.crt")
    cfg.key_file = str(kcp.dir / "pki" / "admin.key")
    stranger = client.ApiClient(cfg)
    with pytest.raises(client.ApiException) as e:
        client.CoreV1Api(stranger).list_namespace()
    assert e.value.status == 401
    stranger.close()


def test_rbac_is_enforced(skr: controlplane.ControlPlane, namespace: str) -> None:
    kubeconfig = skr.issue_client_cert("jane")
    from tether.kube import gateway

    api = gateway.from_kubeconfig(str(kubeconfig)).api_client
    with pytest.raises(client.ApiException) as e:
        client.CoreV1Api(api).list_namespaced_config_map(namespace)
    assert e.value.status == 403
    api.close()


def test_kubectl_uses_the_kubeconfig(skr: controlplane.ControlPlane, namespace: str) -> None:
    out = skr.kubectl(
        "-n", namespace, "create", "configmap", "from-kubectl", "--from-literal=a=b", "-o", "json"
    )
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["data"] == {"a": "b"}


def test_stop_removes_processes_and_folder() -> None:
    plane = controlplane.ControlPlane("scratch").start()
    folder: pathlib.Path = plane.dir
    pids = [p.popen.pid for p in (plane._etcd, plane._apiserver) if p is not None]
    assert plane.start_seconds is not None
    plane.stop()
    assert not folder.exists()
    for pid in pids:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)


def test_apiserver_restart_keeps_data(skr: controlplane.ControlPlane) -> None:
    plane = controlplane.ControlPlane("restart").start()
    try:
        api = plane.api_client()
        core = client.CoreV1Api(api)
        core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name="kept")))
        plane.stop_apiserver()
        with pytest.raises(Exception):  # noqa: B017 - connection refused, any urllib3 error
            core.read_namespace("kept", _request_timeout=2)
        plane.start_apiserver()
        assert core.read_namespace("kept").metadata.name == "kept"
        api.close()
    finally:
        plane.stop()


def test_start_retries_when_a_port_is_taken() -> None:
    plane = controlplane.ControlPlane("portrace")
    taken = plane.port
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", taken))
        squatter.listen()
        plane.start()
    try:
        assert plane.port != taken
        assert client.CoreV1Api(plane.api_client()).list_namespace().items
    finally:
        plane.stop()


def test_processes_die_with_a_killed_parent() -> None:
    """Interrupted hard (SIGKILL, no atexit), the plane's processes still go away."""
    script = (
        f"import sys; sys.path.insert(0, {str(controlplane.REPO_ROOT)!r})\n"
        "from testing import controlplane\n"
        "p = controlplane.ControlPlane('orphan').start()\n"
        "print(p._etcd.popen.pid, p._apiserver.popen.pid, flush=True)\n"
        "import time; time.sleep(600)\n"
    )
    import signal
    import sys
    import time

    parent = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    assert parent.stdout is not None
    pids = [int(x) for x in parent.stdout.readline().split()]
    assert len(pids) == 2
    parent.send_signal(signal.SIGKILL)
    parent.wait()
    parent.stdout.close()
    deadline = time.monotonic() + 20
    alive = pids
    while alive and time.monotonic() < deadline:
        alive = []
        for pid in pids:
            try:
                os.kill(pid, 0)
                with open(f"/proc/{pid}/stat") as f:
                    if f.read().split()[2] != "Z":
                        alive.append(pid)
            except (ProcessLookupError, FileNotFoundError):
                pass
        time.sleep(0.2)
    assert alive == [], f"still running after the parent was killed: {alive}"
