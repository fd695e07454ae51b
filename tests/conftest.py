"""Shared fixtures: real control planes (session-scoped), a fresh namespace per test, and the
listener (used by the listener, poller and webhook tests): ``listener_env`` (PKI, the
RuntimeConfigMap CRD, a KCP namespace, a least-privilege kubeconfig; see
``testing.listenerenv``), ``listener`` (one gunicorn listener for the session) and ``runtime``
(a factory of Kyma CRs with matching client certificates).

The planes are started only when a test asks for one; the first start builds the binaries
if they are not cached (several minutes, printed by hack/build-controlplane.sh).

Each test is put in one tier (``unit``, ``check``, ``full``; ``testing.tiers``). In a parallel
run (pytest-xdist, ``-n N``) a module's tests go to one worker (``ModuleGroups``), so that what a
module starts once is started once; modules of the heavy directories are handed out first.
"""

from __future__ import annotations

import collections
import contextlib
import fcntl
import os
import pathlib
import uuid
from collections.abc import Callable, Iterator

import pytest
from kubernetes import client

from testing import controlplane, tiers
from testing.listenerenv import Env, ListenerProcess, Runtime, create_kyma, install_crd, make_env
from tether.kube import apitypes


def pytest_report_header(config: pytest.Config) -> list[str]:
    try:
        return [
            f"control plane: {controlplane.kube_apiserver_version()}, "
            f"etcd {controlplane.pinned_versions()['ETCD_VERSION']}"
        ]
    except controlplane.ControlPlaneError as e:
        return [f"control plane: NOT AVAILABLE ({e})"]


# the directories whose modules take longest, handed to the workers first (the rest after)
HEAVY_FIRST = (
    "deployed",
    "faults",
    "certmanager",
    "e2e_injector",
    "monitoring",
    "skew",
    "release",
    "enroller",
    "compass",
    "foundation",
)
# modules that share something outside their planes go to one worker: buildah's storage
SHARED_GROUPS = {
    "tests/foundation/test_image.py": "image",
    "tests/release/test_release.py": "image",
}

_GUARD = tiers.Guard(os.environ.get("TETHER_TIER_SURVEY", ""))


def pytest_configure(config: pytest.Config) -> None:
    _GUARD.install()


def pytest_unconfigure(config: pytest.Config) -> None:
    _GUARD.uninstall()


def _tier(item: pytest.Item) -> str:
    return next((t for t in tiers.TIERS if item.get_closest_marker(t)), "full")


def _weight(item: pytest.Item) -> int:
    parts = item.nodeid.split("/")
    d = parts[1] if len(parts) > 2 else ""
    return HEAVY_FIRST.index(d) if d in HEAVY_FIRST else len(HEAVY_FIRST)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark every test that needs a control plane (directly or through a fixture) ``plane``
    and put it in its tier (``testing.tiers.decide``)."""
    for item in items:
        fixtures = getattr(item, "fixturenames", ())
        if "planes" in fixtures:
            item.add_marker(pytest.mark.plane)
        tier = tiers.decide(fixtures, (m.name for m in item.iter_markers()))
        item.add_marker(getattr(pytest.mark, tier))
    items.sort(key=_weight)  # stable: a module's tests keep their order


def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object:
    """pytest-xdist's scheduler, whatever ``--dist`` says: a module's tests (or a shared group's,
    ``SHARED_GROUPS``) are one unit of work, handed out in collection order (heavy first).
    (xdist's own ``loadgroup`` marks no longer take with pytest 9's node ids.)"""
    from xdist.scheduler import LoadScopeScheduling

    class ModuleGroups(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            module = nodeid.split("::", 1)[0]
            return SHARED_GROUPS.get(module, module)

    config.option.loadscopereorder = False
    return ModuleGroups(config, log)  # type: ignore[arg-type]


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> object:
    _GUARD.current = (item.nodeid, _tier(item))
    try:
        return (yield)
    finally:
        _GUARD.current = None


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """Each tier's tests and their time (setup, call and teardown, summed over workers)."""
    seconds: dict[str, float] = collections.defaultdict(float)
    tests: dict[str, set[str]] = collections.defaultdict(set)
    for reports in terminalreporter.stats.values():
        for r in reports:
            if not isinstance(r, pytest.TestReport):
                continue
            tier = next((t for t in tiers.TIERS if t in r.keywords), "?")
            seconds[tier] += r.duration
            tests[tier].add(r.nodeid)
    if tests:
        terminalreporter.section("time per tier")
        for tier in (*tiers.TIERS, "?"):
            if tests.get(tier):
                terminalreporter.write_line(
                    f"{tier:6} {len(tests[tier]):5} tests {seconds[tier]:8.1f} s of test time"
                )


@pytest.fixture(scope="session")
def planes() -> Iterator[dict[str, controlplane.ControlPlane]]:
    """The session's SKR and KCP planes: the only processes a ``check`` test may rely on."""
    with contextlib.ExitStack() as stack:
        with _GUARD.allowed():
            started = stack.enter_context(controlplane.planes("skr", "kcp"))
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
        controlplane.retry_busy(
            lambda: core.create_namespace(
                client.V1Namespace(metadata=client.V1ObjectMeta(name=name))
            )
        )
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
    kcp: controlplane.ControlPlane,
    kcp_api: client.ApiClient,
    kyma_crd: str,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Env]:
    d = tmp_path_factory.mktemp("listener")
    install_crd(kcp_api)
    env = make_env(kcp, kcp_api, d, f"kl-{uuid.uuid4().hex[:8]}", foreign=True)
    ns = env.namespace
    yield env
    objects = client.CustomObjectsApi(kcp_api)
    for plural, group, version in (
        (
            apitypes.RUNTIME_CONFIGMAPS.plural,
            apitypes.RUNTIME_CONFIGMAPS.group,
            apitypes.RUNTIME_CONFIGMAPS.version,
        ),
        (apitypes.KYMAS.plural, apitypes.KYMAS.group, apitypes.KYMAS.version),
    ):
        objects.delete_collection_namespaced_custom_object(group, version, ns, plural)
    client.CoreV1Api(kcp_api).delete_namespace(ns)


@pytest.fixture(scope="session")
def listener(listener_env: Env) -> Iterator[ListenerProcess]:
    p = ListenerProcess(
        listener_env,
        "main",
        TETHER_LISTENER_HEARTBEAT_INTERVAL_SECONDS="0",
        TETHER_LISTENER_SILENT_CACHE_SECONDS="0",
    )
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
