"""common.skr_clients against the real KCP and SKR planes."""

from __future__ import annotations

import base64

import pytest
from kubernetes import client

from common import gateway, skr_clients
from testing import compassenv as h
from testing import controlplane


def test_client_per_kubeconfig_secret_cached_per_resource_version(
    kcp_api: client.ApiClient, kcp_namespace: str, skr: controlplane.ControlPlane,
) -> None:
    h.create_kubeconfig_secret(kcp_api, kcp_namespace, "rt-a", skr)
    clients = skr_clients.SkrClients(gateway.Kube(kcp_api), kcp_namespace)
    try:
        api = clients.get("rt-a")
        assert api.request("GET", "/version")["gitVersion"].startswith("v1.")
        assert clients.get("rt-a") is api and clients.builds == 1
        # rotated kubeconfig (new resourceVersion): a new client after refresh
        core = client.CoreV1Api(kcp_api)
        core.patch_namespaced_secret("kubeconfig-rt-a", kcp_namespace,
                                     {"metadata": {"annotations": {"rotated": "1"}}})
        assert clients.get("rt-a") is api  # the index still holds the old version
        assert clients.refresh() == 1
        api2 = clients.get("rt-a")
        assert api2 is not api and clients.builds == 2
        assert clients.get("rt-a", fresh=True) is api2  # same version: cached
    finally:
        clients.close()


def test_missing_or_broken_kubeconfig_is_a_clear_error(
    kcp_api: client.ApiClient, kcp_namespace: str,
) -> None:
    clients = skr_clients.SkrClients(gateway.Kube(kcp_api), kcp_namespace)
    with pytest.raises(skr_clients.SkrClientError, match="no Secret labelled"):
        clients.get("rt-none")
    garbage = "users: [what: {is-this: secret-data-123]"
    body = client.V1Secret(
        metadata=client.V1ObjectMeta(name="kubeconfig-rt-bad", namespace=kcp_namespace,
                                     labels={skr_clients.KYMA_NAME_LABEL: "rt-bad"}),
        data={"config": base64.b64encode(garbage.encode()).decode()})
    client.CoreV1Api(kcp_api).create_namespaced_secret(kcp_namespace, body)
    with pytest.raises(skr_clients.SkrClientError) as e:
        clients.get("rt-bad")
    assert "secret-data-123" not in str(e.value) and "rt-bad" in str(e.value)
