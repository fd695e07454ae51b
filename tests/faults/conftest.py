"""Fixtures of the fault suite: planes of its own (tests stop and restart their
apiservers, so the session's ``skr``/``kcp`` planes of other modules are never disturbed),
the listener's environment on them, a factory of ``testing.faultstack.Stack``, and the
report: every test records its fault's numbers with ``report(...)``; they are printed as
one table at the end of the run (in CI's log, without ``-s``) and attached to the JUnit
XML as properties.
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
COLUMNS = (("fault", "fault", 44), ("writes", "customer writes", 15), ("failed", "failed", 6),
           ("retried", "retried", 7), ("fault_seconds", "fault (s)", 9),
           ("converged_seconds", "converged in (s)", 16))


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
def fault_env(fkcp: controlplane.ControlPlane, fkcp_api: client.ApiClient,
              tmp_path_factory: pytest.TempPathFactory) -> listenerenv.Env:
    """The listener's environment (CRDs, namespace, RBAC, PKI) on the fault KCP."""
    listenerenv.install_crd(fkcp_api)
    controlplane.install_crds(fkcp_api, controlplane.KYMA_CRD)
    return listenerenv.make_env(fkcp, fkcp_api, tmp_path_factory.mktemp("fault-listener"),
                                f"kf-{uuid.uuid4().hex[:8]}")


@pytest.fixture
def stack(fskr: controlplane.ControlPlane, fkcp: controlplane.ControlPlane,
          fault_env: listenerenv.Env, tmp_path: pathlib.Path,
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
def report(request: pytest.FixtureRequest,
           record_property: Callable[[str, object], None]) -> Callable[..., None]:
    """``report(fault=..., writes=..., failed=..., retried=..., fault_seconds=...,
    converged_seconds=...)``: one row of the suite's table."""
    rows = request.config.stash.setdefault(RESULTS, [])

    def add(**row: Any) -> None:
        row = {"test": request.node.name, **row}
        rows.append(row)
        for k, v in row.items():
            record_property(k, v)
        print(f"\n{row['fault']}: converged in {row['converged_seconds']:.1f} s "
              f"({row['writes']} customer writes, {row['failed']} failed)")

    return add


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    rows = config.stash.get(RESULTS, [])
    if not rows:
        return
    tr = terminalreporter
    tr.write_sep("=", "fault suite: time for the KCP to hold exactly the runtime's state")
    tr.write_line("  ".join(title.ljust(width) for _, title, width in COLUMNS))
    for row in rows:
        cells = []
        for key, _, width in COLUMNS:
            v = row.get(key, "")
            cells.append((f"{v:.1f}" if isinstance(v, float) else str(v)).ljust(width))
        tr.write_line("  ".join(cells))
    tr.write_line("converged in: from the later of the fault's end and the last customer write")

