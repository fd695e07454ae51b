"""Fixtures of the fault suite: planes of its own (tests stop and restart their
apiservers, so the session's ``skr``/``kcp`` planes of other modules are never disturbed),
the listener's environment on them, a factory of ``testing.faultstack.Stack``, and the
report: every test records its fault's numbers with ``report(...)``; they are printed as
one table at the end of the run (in CI's log, without ``-s``), attached to the test's
``user_properties`` (JUnit XML properties with ``junit_family=legacy``) and printed with
the test's output (``-rP``).
"""

from __future__ import annotations

import contextlib
import pathlib
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kubernetes import client

from testing import controlplane, faultstack, listenerenv

RESULTS = pytest.StashKey[list[dict[str, Any]]]()
COLUMNS = (
    ("fault", "fault", 44),
    ("writes", "writes", 6),
    ("failed", "failed", 6),
    ("retried", "retried", 7),
    ("fault_seconds", "fault (s)", 9),
    ("after_fault_seconds", "converged after the fault (s)", 29),
    ("converged_seconds", "after the last write (s)", 24),
)


@pytest.fixture(scope="package")
def fault_planes() -> Iterator[dict[str, controlplane.ControlPlane]]:
    with controlplane.planes("fault-skr", "fault-kcp") as started:
        yield started


@pytest.fixture(scope="package")
def fskr(fault_planes: dict[str, controlplane.ControlPlane]) -> controlplane.ControlPlane:
    return fault_planes["fault-skr"]


@pytest.fixture(scope="package")
def fkcp(fault_planes: dict[str, controlplane.ControlPlane]) -> controlplane.ControlPlane:
    return fault_planes["fault-kcp"]


@pytest.fixture(scope="package")
def fkcp_api(fkcp: controlplane.ControlPlane) -> Iterator[client.ApiClient]:
    api = fkcp.api_client()
    yield api
    api.close()


@pytest.fixture(scope="package")
def fault_env(
    fkcp: controlplane.ControlPlane,
    fkcp_api: client.ApiClient,
    tmp_path_factory: pytest.TempPathFactory,
) -> listenerenv.Env:
    """The listener's environment (CRDs, namespace, RBAC, PKI) on the fault KCP."""
    listenerenv.install_crd(fkcp_api)
    controlplane.install_crds(fkcp_api, controlplane.KYMA_CRD)
    return listenerenv.make_env(
        fkcp, fkcp_api, tmp_path_factory.mktemp("fault-listener"), f"kf-{uuid.uuid4().hex[:8]}"
    )


@pytest.fixture
def stack(
    fskr: controlplane.ControlPlane,
    fkcp: controlplane.ControlPlane,
    fault_env: listenerenv.Env,
    tmp_path: pathlib.Path,
) -> Iterator[Callable[..., faultstack.Stack]]:
    """``stack(pollers=1, webhook={...}, poller={...}, listener={...})``: a started
    ``faultstack.Stack`` (settings override the suite's); closed after the test. Both
    apiservers are running again after every test, whatever it did."""
    made: list[faultstack.Stack] = []

    def make(**kw: Any) -> faultstack.Stack:
        s = faultstack.Stack(fskr, fault_env, tmp_path, **kw).start()
        made.append(s)
        return s

    yield make
    for plane in (fskr, fkcp):  # a test that failed while its apiserver was down
        with contextlib.suppress(controlplane.ControlPlaneError):  # "already running"
            plane.start_apiserver()
    for s in made:
        s.close()


@pytest.fixture
def report(request: pytest.FixtureRequest) -> Callable[..., None]:
    """``report(fault=..., writes=..., failed=..., retried=..., fault_seconds=...,
    after_fault_seconds=..., converged_seconds=..., **more)``: one row of the suite's
    table (``more`` only in the JUnit properties and the captured output)."""
    rows = request.config.stash.setdefault(RESULTS, [])

    def add(**row: Any) -> None:
        row = {"test": request.node.name, **row}
        rows.append(row)
        # what record_property does, without its warning under junit_family xunit2
        request.node.user_properties.extend(row.items())
        print(
            f"\n{row['fault']}: converged {row['after_fault_seconds']:.1f} s after the fault "
            f"ended, {row['converged_seconds']:.1f} s after the last write; "
            + ", ".join(f"{k}={v}" for k, v in row.items() if k not in ("fault", "test"))
        )

    return add


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    rows = config.stash.get(RESULTS, [])
    if not rows:
        return
    tr = terminalreporter
    tr.write_sep("=", "fault suite: time until the state is exact again")
    tr.write_line("  ".join(title.ljust(width) for _, title, width in COLUMNS))
    for row in rows:
        cells = []
        for key, _, width in COLUMNS:
            v = row.get(key, "")
            cells.append((f"{v:.1f}" if isinstance(v, float) else str(v)).ljust(width))
        tr.write_line("  ".join(cells))
    tr.write_line(
        "converged: the KCP holds exactly the runtime's ConfigMaps (the Director exactly "
        "the Kyma CRs, each with a valid token); writes: the customer's (Kyma CRs: "
        "provisioning's), none may fail"
    )
