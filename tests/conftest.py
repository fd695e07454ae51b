"""Shared fixtures: real control planes (session-scoped) and a fresh namespace per test.

The planes are started only when a test asks for one; the first start builds the binaries
if they are not cached (several minutes, printed by hack/build-controlplane.sh).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from kubernetes import client

from common import controlplane


def pytest_report_header(config: pytest.Config) -> list[str]:
    try:
        return [f"control plane: {controlplane.kube_apiserver_version()}, "
                f"etcd {controlplane.pinned_versions()['ETCD_VERSION']}"]
    except controlplane.ControlPlaneError as e:
        return [f"control plane: NOT AVAILABLE ({e})"]


@pytest.fixture(scope="session")
def planes() -> Iterator[dict[str, controlplane.ControlPlane]]:
    with controlplane.planes("skr", "kcp") as started:
        yield started


@pytest.fixture(scope="session")
def skr(planes: dict[str, controlplane.ControlPlane]) -> controlplane.ControlPlane:
    """The runtime (SKR) plane."""
    return planes["skr"]


@pytest.fixture(scope="session")
def kcp(planes: dict[str, controlplane.ControlPlane]) -> controlplane.ControlPlane:
    """The management (KCP) plane."""
    return planes["kcp"]


@pytest.fixture(scope="session")
def skr_api(skr: controlplane.ControlPlane) -> Iterator[client.ApiClient]:
    api = skr.api_client()
    yield api
    api.close()


@pytest.fixture(scope="session")
def kcp_api(kcp: controlplane.ControlPlane) -> Iterator[client.ApiClient]:
    api = kcp.api_client()
    yield api
    api.close()


def _fresh_namespace(api: client.ApiClient, prefix: str) -> Iterator[str]:
    name = f"{prefix}-{uuid.uuid4().hex[:8]}"
    core = client.CoreV1Api(api)
    try:
        controlplane.retry_busy(lambda: core.create_namespace(
            client.V1Namespace(metadata=client.V1ObjectMeta(name=name))))
    except client.ApiException as e:
        if e.status != 409:
            raise
    yield name
    # No namespace controller runs in a test plane: delete what tests leave, then the
    # namespace (it stays Terminating, which is harmless).
    core.delete_collection_namespaced_config_map(name)
    core.delete_namespace(name)


@pytest.fixture
def namespace(skr_api: client.ApiClient) -> Iterator[str]:
    """A fresh namespace in the SKR plane."""
    yield from _fresh_namespace(skr_api, "t")


@pytest.fixture
def kcp_namespace(kcp_api: client.ApiClient) -> Iterator[str]:
    """A fresh namespace in the KCP plane."""
    yield from _fresh_namespace(kcp_api, "k")


@pytest.fixture(scope="session")
def kyma_crd(kcp_api: client.ApiClient) -> str:
    """Installs the stand-in Kyma CRD (operator.kyma-project.io/v1beta2) in the KCP plane
    and waits until it is served. Returns the CRD name."""
    return controlplane.install_crds(kcp_api, controlplane.KYMA_CRD)[0]
