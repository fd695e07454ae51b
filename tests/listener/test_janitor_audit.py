"""The janitor's audit never holds up its run (``tether.base.auditwriter``): with its audit file on
a full file system (``/dev/full``: every write fails with ENOSPC) a real ``tether janitor``
still marks and removes an orphaned runtime, and every audit line it could not write is
counted in ``tether_listener_janitor_audit_lost_total{reason="write_error"}`` (both reasons
exported at 0 from the start) and said on its stderr."""

from __future__ import annotations

import errno
import os
import uuid
from collections.abc import Iterator

import pytest
import requests
from kubernetes import client

from listener.fleet import heartbeat
from testing.janitorenv import GRACE, Janitor
from testing.listenerenv import Env, metric_value, own_namespace, remove_namespace
from testing.pollerenv import wait_until
from tether.base import auditwriter
from tether.kube import apitypes

pytestmark = pytest.mark.processes
LOST = "tether_listener_janitor_audit_lost_total"


@pytest.fixture(scope="module")
def env(listener_env: Env) -> Iterator[Env]:
    e = own_namespace(listener_env, "ja")
    yield e
    remove_namespace(e)


def orphan_lease(env: Env, runtime_id: str) -> None:
    """A runtime's heartbeat Lease whose Kyma CR does not exist (deleted long ago)."""
    client.CoordinationV1Api(env.api).create_namespaced_lease(
        env.namespace,
        client.V1Lease(
            metadata=client.V1ObjectMeta(
                name=heartbeat.lease_name(runtime_id),
                labels={apitypes.HEARTBEAT_LABEL: "true", apitypes.RUNTIME_ID_LABEL: runtime_id},
            ),
            spec=client.V1LeaseSpec(holder_identity=runtime_id),
        ),
    )


def lease_gone(env: Env, runtime_id: str) -> bool:
    try:
        client.CoordinationV1Api(env.api).read_namespaced_lease(
            heartbeat.lease_name(runtime_id), env.namespace
        )
    except client.ApiException as e:
        if e.status == 404:
            return True
        raise
    return False


def test_the_janitor_with_its_audit_on_a_full_disk_still_removes_an_orphan(env: Env) -> None:
    if not os.path.exists("/dev/full"):
        pytest.fail("/dev/full is missing: the full-disk case cannot be shown on this machine")
    rid = f"rt-{uuid.uuid4().hex[:12]}"
    j = Janitor(env, TETHER_LISTENER_AUDIT_LOG="/dev/full")
    try:

        def metrics() -> str:
            return requests.get(f"http://127.0.0.1:{j.port}/metrics", timeout=10).text

        before = metrics()
        for reason in auditwriter.REASONS:  # the series exist before the first loss
            assert f'{LOST}{{reason="{reason}"}} 0.0' in before, before[-3000:]
        orphan_lease(env, rid)
        # marked (an audit line), then after the grace removed (another): the run goes on
        wait_until(
            lambda: lease_gone(env, rid), what="the orphan's Lease removed", timeout=GRACE * 20
        )
        wait_until(
            lambda: metric_value(metrics(), LOST, reason="write_error") >= 2,
            what="both audit lines counted as lost",
            timeout=30,
        )
        assert j.metric("tether_listener_janitor_orphan_leases_deleted_total") >= 1
        assert metric_value(metrics(), "tether_listener_janitor_runs_total", outcome="failed") == 0
    finally:
        j.stop()
    log_text = j.log_file.read_text()
    assert "audit lines lost" in log_text and os.strerror(errno.ENOSPC) in log_text
    assert rid not in log_text.split("audit lines lost", 1)[1].splitlines()[0]  # no content
