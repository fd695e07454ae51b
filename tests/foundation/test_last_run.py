"""The last run of every leader-elected part, on its Lease (``tether.runtime.elected.record_runs``,
``tether.runtime.leader.LeaderElector.annotate``), against a real KCP; and the printer columns of
the RuntimeConfigMap CRD as the Table API and kubectl show them."""

from __future__ import annotations

import datetime
import queue
import time
import uuid
from collections.abc import Callable
from typing import Any, NamedTuple

import prometheus_client as prom
import pytest
from apscheduler.schedulers.background import BackgroundScheduler
from apscheduler.triggers.interval import IntervalTrigger
from kubernetes import client

from testing import controlplane
from tether.kube import apitypes, gateway
from tether.runtime import elected, leader

pytestmark = pytest.mark.processes  # starts processes of its own (testing/tiers.py)

RCM_CRD = (
    controlplane.REPO_ROOT
    / "manifests"
    / "kcp"
    / "crds"
    / "tether.kyma-project.io_runtimeconfigmaps.yaml"
)
TABLE = "application/json;as=Table;v=v1;g=meta.k8s.io"


class Outcome(NamedTuple):
    ok: bool = True
    skipped: bool = False


def notes(api: client.ApiClient, ns: str, name: str) -> dict[str, str]:
    """The Lease's annotations ({} while the elector has not created it yet)."""
    try:
        obj = client.CoordinationV1Api(api).read_namespaced_lease(name, ns)
    except client.ApiException as e:
        if e.status == 404:
            return {}
        raise
    return dict(obj.metadata.annotations or {})


def wait(predicate: Callable[[], Any], timeout: float = 20.0, what: str = "") -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = predicate()
        if got:
            return got
        time.sleep(0.1)
    raise AssertionError(f"not within {timeout:.0f}s: {what}")


def part(
    api: client.ApiClient, ns: str, job: Callable[[], Any], *, identity: str, name: str
) -> tuple[BackgroundScheduler, leader.LeaderElector]:
    """A part as ``tether.runtime.elected`` wires compass, the janitor and the enroller."""
    sched = BackgroundScheduler(
        timezone=datetime.UTC,
        job_defaults={"coalesce": True, "max_instances": 1, "misfire_grace_time": None},
    )
    sched.add_job(
        job,
        IntervalTrigger(seconds=0.3),
        id="interval",
        next_run_time=datetime.datetime.now(datetime.UTC),
    )
    sched.start(paused=True)
    el = elected.elector(
        gateway.Kube(api),
        leader.LeaseSettings(
            namespace=ns,
            name=name,
            identity=identity,
            lease_duration=2,
            renew_deadline=1.5,
            retry_period=0.2,
        ),
        sched,
        prom.Gauge(f"leader_{uuid.uuid4().hex[:8]}", "test", registry=prom.CollectorRegistry()),
    )
    return sched, el


def test_each_run_is_published_on_the_holders_lease_and_only_there(
    kcp_api: client.ApiClient,
    kcp_namespace: str,
) -> None:
    ns, name = kcp_namespace, "last-run"
    steps: queue.Queue[object] = queue.Queue()

    def job() -> Outcome:
        try:
            step = steps.get(timeout=0.2)
        except queue.Empty:
            return Outcome(skipped=True)  # nothing to do: not a run, not published
        if step == "raise":
            time.sleep(0.4)  # a run that takes time, then fails
            raise RuntimeError("the job's own bug")
        time.sleep(0.05)  # a run takes time
        assert isinstance(step, Outcome)
        return step

    sched, el = part(kcp_api, ns, job, identity="a", name=name)
    other_sched, other = part(kcp_api, ns, Outcome, identity="b", name=name)
    try:
        el.start()
        wait(lambda: el.is_leader, what="a leads")
        other.start()
        steps.put(Outcome())
        first = wait(
            lambda: (n := notes(kcp_api, ns, name)) and apitypes.LAST_RUN_AT_ANNOTATION in n and n,
            what="first run published",
        )
        assert first[apitypes.LAST_RUN_RESULT_ANNOTATION] == "ok"
        assert first[apitypes.LAST_RUN_AT_ANNOTATION].endswith("Z")
        at = datetime.datetime.fromisoformat(
            first[apitypes.LAST_RUN_AT_ANNOTATION].replace("Z", "+00:00")
        )
        assert abs((datetime.datetime.now(datetime.UTC) - at).total_seconds()) < 10
        assert 0.04 <= float(first[apitypes.LAST_RUN_SECONDS_ANNOTATION]) < 0.3
        # a run that reports ok=False, then one that raises: both "failed"
        steps.put(Outcome(ok=False))
        wait(
            lambda: notes(kcp_api, ns, name)[apitypes.LAST_RUN_RESULT_ANNOTATION] == "failed",
            what="failed run published",
        )
        steps.put("raise")
        wait(
            lambda: float(notes(kcp_api, ns, name)[apitypes.LAST_RUN_SECONDS_ANNOTATION]) >= 0.4,
            what="raising run published",
        )
        assert notes(kcp_api, ns, name)[apitypes.LAST_RUN_RESULT_ANNOTATION] == "failed"
        # the standby never ran, never wrote
        assert not other.is_leader
        assert (
            client.CoordinationV1Api(kcp_api).read_namespaced_lease(name, ns).spec.holder_identity
            == "a"
        )
        # the holder steps down: "b" takes over, and its runs are published
        el.stop()
        sched.shutdown(wait=True)
        wait(lambda: other.is_leader, what="b leads")
        wait(
            lambda: notes(kcp_api, ns, name)[apitypes.LAST_RUN_RESULT_ANNOTATION] == "ok",
            what="b's run",
        )
        lease = client.CoordinationV1Api(kcp_api).read_namespaced_lease(name, ns)
        assert lease.spec.holder_identity == "b"
    finally:
        for e, sch in ((el, sched), (other, other_sched)):
            e.stop()
            if sch.running:
                sch.shutdown(wait=True)


def test_annotations_given_while_not_leading_are_dropped_and_kept_ones_come_back(
    kcp_api: client.ApiClient,
    kcp_namespace: str,
) -> None:
    ns, name = kcp_namespace, "notes"
    api = gateway.Kube(kcp_api)
    el = leader.LeaderElector(
        api,
        leader.LeaseSettings(
            namespace=ns,
            name=name,
            identity="a",
            lease_duration=2,
            renew_deadline=1.5,
            retry_period=0.2,
        ),
        on_started=lambda: None,
        on_stopped=lambda: None,
    )
    el.annotate({"example.com/once": "before"})  # not leading: dropped
    el.annotate({"example.com/state": "one"}, keep=True)  # kept: written at acquisition
    try:
        el.start()
        got = wait(
            lambda: (n := notes(kcp_api, ns, name)) and "example.com/state" in n and n,
            what="kept value written on acquisition",
        )
        assert got["example.com/state"] == "one" and "example.com/once" not in got
        el.annotate({"example.com/once": "now"})
        wait(lambda: notes(kcp_api, ns, name).get("example.com/once") == "now", what="renewal")
    finally:
        el.stop()
    # released: the holder is gone, the annotations stay for the admin pages
    lease = client.CoordinationV1Api(kcp_api).read_namespaced_lease(name, ns)
    assert not lease.spec.holder_identity
    assert (lease.metadata.annotations or {}).get("example.com/once") == "now"


@pytest.mark.parametrize("how", ["table", "kubectl"])
def test_runtimeconfigmap_columns_sort_as_dates(
    kcp: controlplane.ControlPlane, kcp_api: client.ApiClient, kcp_namespace: str, how: str
) -> None:
    controlplane.install_crds(kcp_api, RCM_CRD)
    ns = kcp_namespace
    client.CustomObjectsApi(kcp_api).create_namespaced_custom_object(
        "tether.kyma-project.io",
        "v1",
        ns,
        "runtimeconfigmaps",
        {
            "apiVersion": "tether.kyma-project.io/v1",
            "kind": "RuntimeConfigMap",
            "metadata": {"name": "rcm-cols"},
            "spec": {
                "runtimeId": "rt-1",
                "namespace": "team-a",
                "name": "app",
                "uid": "u",
                "resourceVersion": "7",
                "observedAt": "2026-11-30T10:00:00.123456Z",
                "deleted": False,
                "source": "poller",
            },
        },
    )
    if how == "table":
        t = gateway.Kube(kcp_api).request(
            "GET",
            f"/apis/tether.kyma-project.io/v1/namespaces/{ns}/runtimeconfigmaps",
            accept=TABLE,
        )
        cols = {c["name"]: c["type"] for c in t["columnDefinitions"]}
        assert cols["Observed"] == "date" and cols["Age"] == "date" and cols["Deleted"] == "boolean"
    else:
        out = kcp.kubectl("get", "runtimeconfigmaps", "-n", ns, "--sort-by=.spec.observedAt")
        assert out.returncode == 0, out.stderr
        header = out.stdout.splitlines()[0].split()
        assert header[-2:] == ["OBSERVED", "AGE"]
        row = out.stdout.splitlines()[1].split()
        assert not row[-2].startswith("2026-")  # a date column shows an age, not the string
