"""tether.kube.skr_clients against the real KCP and SKR planes: kubeconfig Secrets read by name,
cached per resourceVersion, read again after their age or ``forget``."""

from __future__ import annotations

import base64

import pytest
from kubernetes import client

from testing import compassenv as h
from testing import controlplane, localnet
from tether.kube import apitypes, gateway, skr_clients


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def test_client_per_kubeconfig_secret_cached_per_resource_version(
    kcp_api: client.ApiClient,
    kcp_namespace: str,
    skr: controlplane.ControlPlane,
) -> None:
    h.create_kubeconfig_secret(kcp_api, kcp_namespace, "rt-a", skr)
    clock = Clock()
    clients = skr_clients.SkrClients(
        gateway.Kube(kcp_api), kcp_namespace, localnet.policy(max_age=60), clock=clock
    )
    try:
        api = clients.get("rt-a")
        assert api.request("GET", "/version")["gitVersion"].startswith("v1.")
        assert clients.get("rt-a") is api and (clients.builds, clients.reads) == (1, 1)
        # rotated kubeconfig (new resourceVersion): used once the entry is older than max_age
        core = client.CoreV1Api(kcp_api)
        core.patch_namespaced_secret(
            "kubeconfig-rt-a", kcp_namespace, {"metadata": {"annotations": {"rotated": "1"}}}
        )
        assert clients.get("rt-a") is api and clients.reads == 1  # within max_age: no read
        clock.t += 61
        api2 = clients.get("rt-a")
        assert api2 is not api and (clients.builds, clients.reads) == (2, 2)
        clock.t += 61
        assert clients.get("rt-a") is api2 and (clients.builds, clients.reads) == (
            2,
            3,
        )  # same version
        clients.forget("rt-a")
        assert clients.get("rt-a") is not api2 and clients.reads == 4
    finally:
        clients.close()


def test_secret_name_and_namespace_are_settings(
    kcp_api: client.ApiClient,
    kcp_namespace: str,
    skr: controlplane.ControlPlane,
) -> None:
    body = client.V1Secret(
        metadata=client.V1ObjectMeta(name="rt-b-admin", namespace=kcp_namespace),
        data={"config": base64.b64encode(skr.kubeconfig.read_bytes()).decode()},
    )
    client.CoreV1Api(kcp_api).create_namespaced_secret(kcp_namespace, body)
    clients = skr_clients.SkrClients(
        gateway.Kube(kcp_api),
        "elsewhere",
        localnet.policy(namespace=kcp_namespace, secret_name="{kyma}-admin"),
    )
    try:
        assert clients.get("rt-b").request("GET", "/version")["gitVersion"].startswith("v1.")
    finally:
        clients.close()


def test_missing_or_broken_kubeconfig_is_a_clear_error(
    kcp_api: client.ApiClient,
    kcp_namespace: str,
) -> None:
    clients = skr_clients.SkrClients(gateway.Kube(kcp_api), kcp_namespace, localnet.policy())
    with pytest.raises(skr_clients.SkrClientError, match="no kubeconfig Secret"):
        clients.get("rt-none")
    garbage = "users: [what: {is-this: secret-data-123]"
    body = client.V1Secret(
        metadata=client.V1ObjectMeta(
            name="kubeconfig-rt-bad",
            namespace=kcp_namespace,
            labels={apitypes.KYMA_NAME_LABEL: "rt-bad"},
        ),
        data={"config": base64.b64encode(garbage.encode()).decode()},
    )
    client.CoreV1Api(kcp_api).create_namespaced_secret(kcp_namespace, body)
    with pytest.raises(skr_clients.SkrClientError) as e:
        clients.get("rt-bad")
    assert "secret-data-123" not in str(e.value) and "rt-bad" in str(e.value)
