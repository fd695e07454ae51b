"""The KCP's etcd over its space quota (issue 29): the ``NOSPACE`` alarm refuses every write.

A KCP plane of its own whose etcd has a small ``--quota-backend-bytes`` is filled with big
ConfigMaps (another tenant of the KCP) until etcd raises the alarm and the apiserver refuses
writes ("etcdserver: mvcc: database space exceeded"). Meanwhile a customer writes ConfigMaps
in the runtime. During the fault:

- the runtime's in-sync poll (the state summary GET) and the full digest still answer 200:
  the listener reads first and writes the heartbeat Lease after, best-effort;
- new changes are answered 503 (``tether_listener_kcp_unavailable_total{operation=persist}``
  grows, alert ``TetherListenerKCPUnavailable``): the senders keep them and retry.

Then the operator's runbook: delete what filled it (``etcdctl del``: deletes are allowed under
the alarm), compact, defragment, ``etcdctl alarm disarm``. The runtime's changes converge: the
KCP ends with exactly the runtime's state, no customer write failed; the time is reported.
"""

from __future__ import annotations

import json
import pathlib
import time
import uuid
from collections.abc import Callable, Iterator

import pytest
from kubernetes import client

from testing import controlplane, listenerenv
from testing.faultstack import POLL_INTERVAL, Stack, Workload, finish
from testing.history import History
from testing.listenerenv import metric_value
from testing.pollerenv import wait_until

QUOTA = 32 * 1024 * 1024
FILLER_BYTES = 900 * 1024  # under the apiserver's 1.5 MiB request limit
SPACE_EXCEEDED = "database space exceeded"


@pytest.fixture(scope="module")
def full_kcp() -> Iterator[controlplane.ControlPlane]:
    plane = controlplane.ControlPlane("fault-kcp-quota", quota_backend_bytes=QUOTA).start()
    try:
        yield plane
    finally:
        plane.stop()


@pytest.fixture(scope="module")
def full_env(
    full_kcp: controlplane.ControlPlane, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[listenerenv.Env]:
    api = full_kcp.api_client()
    listenerenv.install_crd(api)
    controlplane.install_crds(api, controlplane.KYMA_CRD)
    yield listenerenv.make_env(
        full_kcp, api, tmp_path_factory.mktemp("etcd-full"), f"kq-{uuid.uuid4().hex[:8]}"
    )
    api.close()


def fill(core: client.CoreV1Api, namespace: str, limit: int = 200) -> int:
    """Create big ConfigMaps until the apiserver refuses a write for lack of space; how many."""
    blob = "x" * FILLER_BYTES
    for i in range(limit):
        try:
            core.create_namespaced_config_map(
                namespace,
                client.V1ConfigMap(
                    metadata=client.V1ObjectMeta(name=f"filler-{i}"), data={"blob": blob}
                ),
            )
        except client.ApiException as e:
            if SPACE_EXCEEDED in str(e.body):
                return i
            raise
    raise AssertionError(
        f"{limit} ConfigMaps of {FILLER_BYTES} bytes did not fill a quota of {QUOTA} bytes"
    )


def alarms(plane: controlplane.ControlPlane) -> str:
    return plane.etcdctl("alarm", "list").stdout.strip()


def recover(plane: controlplane.ControlPlane, namespace: str) -> None:
    """The runbook: delete what filled etcd, compact, defragment, disarm the alarm."""
    prefix = f"/{plane.name}/configmaps/{namespace}/"
    deleted = plane.etcdctl("del", "--prefix", prefix)
    assert deleted.returncode == 0, deleted.stderr
    status = plane.etcdctl("endpoint", "status", "-w", "json")
    assert status.returncode == 0, status.stderr
    revision = json.loads(status.stdout)[0]["Status"]["header"]["revision"]
    for args in (("compact", str(revision)), ("defrag",), ("alarm", "disarm")):
        done = plane.etcdctl(*args, timeout=120)
        assert done.returncode == 0, f"etcdctl {' '.join(args)}: {done.stderr}"


def test_kcp_etcd_over_its_quota_then_cleared(
    fskr: controlplane.ControlPlane,
    full_kcp: controlplane.ControlPlane,
    full_env: listenerenv.Env,
    tmp_path: pathlib.Path,
    report: Callable[..., None],
) -> None:
    kcp_core = client.CoreV1Api(full_env.api)
    filler_ns = f"filler-{uuid.uuid4().hex[:6]}"
    kcp_core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=filler_ns)))
    # a heartbeat write on every call: the summary GET during the fault meets a refused write
    s = Stack(
        fskr, full_env, tmp_path, listener={"TETHER_LISTENER_HEARTBEAT_INTERVAL_SECONDS": "0"}
    ).start()
    try:
        _run(s, full_kcp, kcp_core, filler_ns, report)
        assert "heartbeat Lease not written" in s.listener.log_file.read_text()  # type: ignore[union-attr]
    finally:
        s.close()


def _run(
    s: Stack,
    plane: controlplane.ControlPlane,
    kcp_core: client.CoreV1Api,
    filler_ns: str,
    report: Callable[..., None],
) -> None:
    assert s.listener is not None
    listener = s.listener
    hist = History(s.env.api, s.env.namespace, s.runtime.id, s.namespace).start()
    w = Workload(s.core, s.namespace, s.labels).start()
    w.wait_writes(10)
    s.wait_converged(time.monotonic(), 60)  # in sync before the fault
    began = time.monotonic()
    fillers = fill(kcp_core, filler_ns)
    assert "NOSPACE" in alarms(plane), alarms(plane)
    # the in-sync poll: a read, answered although every write is refused
    session = s.runtime.session()
    summary = session.get(f"{listener.url}/v1/runtimes/{s.runtime.id}/state/summary", timeout=30)
    assert summary.status_code == 200, summary.text[:300]
    before = metric_value(
        listener.metrics(), "tether_listener_kcp_unavailable_total", operation="persist"
    )
    w.wait_writes(10)  # changes keep coming: answered 503, kept by the senders
    wait_until(
        lambda: (
            metric_value(
                listener.metrics(), "tether_listener_kcp_unavailable_total", operation="persist"
            )
            > before
        ),
        30,
        "the listener to answer 503 to a change while etcd is full",
    )
    summary = session.get(f"{listener.url}/v1/runtimes/{s.runtime.id}/state/summary", timeout=30)
    assert summary.status_code == 200, summary.text[:300]
    # the fault lasts two poll intervals at least: the pollers' runs meet it too
    time.sleep(max(0.0, began + 2 * POLL_INTERVAL + 2 - time.monotonic()))
    listing = session.get(f"{listener.url}/v1/runtimes/{s.runtime.id}/state", timeout=30)
    assert listing.status_code == 200, listing.text[:300]  # the full digest: a read as well
    assert "NOSPACE" in alarms(plane)  # still full: nothing written meanwhile
    t_recover = time.monotonic()
    recover(plane, filler_ns)
    healed = time.monotonic()
    assert alarms(plane) == ""
    w.wait_writes(5)
    converged = finish(
        s,
        w,
        report,
        fault="KCP etcd over its quota (NOSPACE), then cleared",
        began=began,
        healed=healed,
        timeout=60,
        fillers=fillers,
        recover_seconds=round(healed - t_recover, 1),
        history=hist.summary(),
    )
    hist.stop()  # no record went back to an older state meanwhile
    print(
        f"\netcd full: {fillers} fillers of {FILLER_BYTES} B filled {QUOTA} B; "
        f"recovery {healed - t_recover:.1f}s; converged {converged:.1f}s after it"
    )
