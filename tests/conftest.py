"""Shared fixtures: real control planes (session-scoped), a fresh namespace per test, and the
listener (used by the listener, poller and webhook tests): ``listener_env`` (PKI, the
RuntimeConfigMap CRD, a KCP namespace, a least-privilege kubeconfig; see
``testing.listenerenv``), ``listener`` (one gunicorn listener for the session) and ``runtime``
(a factory of Kyma CRs with matching client certificates).

The planes are started only when a test asks for one; the first start builds the binaries
if they are not cached (several minutes, printed by hack/build-controlplane.sh).
"""

from __future__ import annotations

import fcntl
import os
import pathlib
import uuid
from collections.abc import Callable, Iterator

import pytest
from kubernetes import client

from testing import controlplane
from testing.listenerenv import Env, ListenerProcess, Runtime, create_kyma, install_crd, make_env
from tether import apitypes


def pytest_report_header(config: pytest.Config) -> list[str]:
    try:
        return [f"control plane: {controlplane.kube_apiserver_version()}, "
                f"etcd {controlplane.pinned_versions()['ETCD_VERSION']}"]
    except controlplane.ControlPlaneError as e:
        return [f"control plane: NOT AVAILABLE ({e})"]


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark every test that needs a control plane (directly or through a fixture) ``plane``:
    ``make unit`` runs the others, the tests of plain data, in seconds."""
    for item in items:
        if "planes" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.plane)


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


# -- the listener ---------------------------------------------------------------------

@pytest.fixture(scope="session")
def listener_env(
    kcp: controlplane.ControlPlane, kcp_api: client.ApiClient, kyma_crd: str,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Env]:
    d = tmp_path_factory.mktemp("listener")
    install_crd(kcp_api)
    env = make_env(kcp, kcp_api, d, f"kl-{uuid.uuid4().hex[:8]}", foreign=True)
    ns = env.namespace
    yield env
    objects = client.CustomObjectsApi(kcp_api)
    for plural, group, version in ((apitypes.RUNTIME_CONFIGMAPS.plural, apitypes.RUNTIME_CONFIGMAPS.group, apitypes.RUNTIME_CONFIGMAPS.version),
                                   (apitypes.KYMAS.plural, apitypes.KYMAS.group, apitypes.KYMAS.version)):
        objects.delete_collection_namespaced_custom_object(group, version, ns, plural)
    client.CoreV1Api(kcp_api).delete_namespace(ns)



@pytest.fixture(scope="session")
def listener(listener_env: Env) -> Iterator[ListenerProcess]:
    p = ListenerProcess(listener_env, "main", TETHER_LISTENER_HEARTBEAT_INTERVAL_SECONDS="0",
                        TETHER_LISTENER_SILENT_CACHE_SECONDS="0")
    yield p
    p.stop()



@pytest.fixture
def runtime(listener_env: Env) -> Callable[..., Runtime]:
    def make(*, kyma_cr: bool = True, domain: str | None = None) -> Runtime:
        rid = f"rt-{uuid.uuid4().hex[:12]}"
        dom = domain or f"c-{rid[3:9]}.kyma.example.com"
        if kyma_cr:
            create_kyma(listener_env.api, listener_env.namespace, rid, dom)
        pair = listener_env.runtime_ca.issue(rid, dns_names=[dom], client=True)
        c, k = listener_env.dir / f"{rid}.crt", listener_env.dir / f"{rid}.key"
        pair.write(c, k)
        return Runtime(rid, dom, c, k, listener_env)
    return make



@pytest.fixture
def unread_fifo(tmp_path: pathlib.Path) -> Iterator[pathlib.Path]:
    """A FIFO with a reader that never reads, its buffer one page: a blocked log pipe (the
    audit tests of the listener and the admin)."""
    path = tmp_path / "audit.fifo"
    os.mkfifo(path)
    reader = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    fcntl.fcntl(reader, getattr(fcntl, "F_SETPIPE_SZ", 1031), 4096)
    yield path
    os.close(reader)  # after the part stopped: its blocked writer thread never returned
