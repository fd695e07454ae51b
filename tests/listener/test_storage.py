"""Storage quota and retention against the real KCP plane (issue 9, section 4).

Listeners run under gunicorn with mTLS and the janitor runs as ``tether janitor``, all
with the least-privilege Role of manifests/kcp/listener bound in a namespace of their
own (so the janitor's short retention and grace touch nothing of the other tests).
"""

from __future__ import annotations

import datetime
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import requests
from kubernetes import client

from listener.fleet import heartbeat, statesummary, summaryobject
from listener.storage import rules
from testing import controlplane, listenerenv
from testing.janitorenv import RETENTION, Janitor
from testing.listenerenv import (
    Env,
    ListenerProcess,
    Runtime,
    create_kyma,
    kcp_requests,
    kcp_requests_since,
    metric_value,
    own_namespace,
    remove_namespace,
)
from testing.pollerenv import wait_until
from tether.base import times
from tether.kube import apitypes, gateway
from tether.wire import changes, statehash

pytestmark = pytest.mark.processes
MIB = 1024 * 1024
QUOTA_RECORDS = 4
QUOTA_BYTES = 2 * MIB + MIB // 2
STORAGE = {
    "TETHER_LISTENER_QUOTA_RECORDS": str(QUOTA_RECORDS),
    "TETHER_LISTENER_QUOTA_BYTES": str(QUOTA_BYTES),
    "TETHER_LISTENER_QUOTA_CACHE_SECONDS": "600",  # only a state listing refreshes it
    "TETHER_LISTENER_TOMBSTONE_RETENTION_SECONDS": str(RETENTION),
    "TETHER_LISTENER_HEARTBEAT_INTERVAL_SECONDS": "0",
}


@pytest.fixture(scope="module")
def env(listener_env: Env) -> Iterator[Env]:
    e = own_namespace(listener_env, "ks")
    yield e
    remove_namespace(e)


@pytest.fixture(scope="module")
def listener_a(env: Env) -> Iterator[ListenerProcess]:
    p = ListenerProcess(env, "quota-a", **STORAGE)
    yield p
    p.stop()


@pytest.fixture(scope="module")
def listener_b(env: Env) -> Iterator[ListenerProcess]:
    p = ListenerProcess(env, "quota-b", **STORAGE)
    yield p
    p.stop()


@pytest.fixture
def make_runtime(env: Env) -> Callable[[], Runtime]:
    def make() -> Runtime:
        rid = f"rt-{uuid.uuid4().hex[:12]}"
        dom = f"c-{rid[3:9]}.kyma.example.com"
        create_kyma(env.api, env.namespace, rid, dom)
        pair = env.runtime_ca.issue(rid, dns_names=[dom], client=True)
        c, k = env.dir / f"{rid}.crt", env.dir / f"{rid}.key"
        pair.write(c, k)
        return Runtime(rid, dom, c, k, env)

    return make


def post(p: ListenerProcess, rt: Runtime, *recs: dict[str, Any]) -> requests.Response:
    doc: Any = recs[0] if len(recs) == 1 else changes.batch(list(recs))  # type: ignore[arg-type]
    with rt.session() as s:
        return s.post(f"{p.url}/v1/runtimes/{rt.id}/changes", json=doc, timeout=60)


def outcomes(r: requests.Response) -> list[str]:
    assert r.status_code == 200, r.text
    return [i["outcome"] for i in r.json()["results"]]


def ago(seconds: float) -> str:
    return times.format_time(
        datetime.datetime.now(datetime.UTC) - datetime.timedelta(seconds=seconds)
    )


# -- quota ---------------------------------------------------------------------------------


def test_a_runtime_at_its_record_quota_gets_413_for_a_new_key_and_may_still_update(
    listener_a: ListenerProcess, make_runtime: Callable[[], Runtime], env: Env
) -> None:
    rt, other = make_runtime(), make_runtime()
    before = metric_value(
        listener_a.metrics(), "tether_listener_quota_refusals_total", limit="records"
    )
    for i in range(QUOTA_RECORDS):
        assert outcomes(post(listener_a, rt, rt.record(f"k{i}", 10))) == ["persisted"]
    r = post(listener_a, rt, rt.record("one-too-many", 10))
    assert r.status_code == 413, r.text
    body = r.json()
    assert body["error"] == "exceeded quota"
    assert body["details"]["reason"] == "quota_records"
    assert body["details"]["object"] == "team-a/one-too-many"
    assert body["details"]["limits"]["records"] == QUOTA_RECORDS
    assert "exceeded quota" in body["details"]["message"]
    assert env.stored_one(rt.id, "team-a", "one-too-many") is None
    assert len(env.stored(rt.id)) == QUOTA_RECORDS
    # updates and deletions of stored keys go on
    assert outcomes(post(listener_a, rt, rt.record("k0", 11, data={"v": "new"}))) == ["persisted"]
    stored = env.stored_one(rt.id, "team-a", "k0")
    assert stored is not None and stored["spec"]["data"] == {"v": "new"}
    assert outcomes(post(listener_a, rt, rt.record("k1", 12, deleted=True))) == ["persisted"]
    # a batch with a new key: 413; what came before it in the batch is stored and comes
    # back as a duplicate when the sender re-sends the batch record by record
    r = post(listener_a, rt, rt.record("k2", 13), rt.record("another-new", 13))
    assert r.status_code == 413 and r.json()["details"]["object"] == "team-a/another-new"
    assert outcomes(post(listener_a, rt, rt.record("k2", 13))) == ["duplicate"]
    after = metric_value(
        listener_a.metrics(), "tether_listener_quota_refusals_total", limit="records"
    )
    assert after == before + 2
    refused = [
        a for a in listener_a.audit() if a.get("event") == "refused" and a.get("runtime") == rt.id
    ]
    assert [a["reason"] for a in refused] == ["quota_records", "quota_records"]
    assert refused[0]["status"] == 413 and refused[0]["object"] == "team-a/one-too-many"
    # another runtime is not affected by the first one's quota
    assert outcomes(post(listener_a, other, other.record("k0", 1))) == ["persisted"]


def test_the_byte_quota_refuses_what_does_not_fit_and_admits_what_does(
    listener_a: ListenerProcess, make_runtime: Callable[[], Runtime], env: Env
) -> None:
    rt = make_runtime()
    big = "x" * 900_000
    for name in ("a", "b"):
        assert outcomes(post(listener_a, rt, rt.record(name, 1, data={"v": big}))) == ["persisted"]
    assert outcomes(post(listener_a, rt, rt.record("c", 1, data={"v": "y" * 700_000}))) == [
        "persisted"
    ]
    sizes = [rules.stored_size(o["metadata"]) for o in env.stored(rt.id)]
    assert all(s > 700_000 for s in sizes) and sum(sizes) < QUOTA_BYTES
    r = post(listener_a, rt, rt.record("d", 1, data={"v": "z" * 200_000}))  # does not fit
    assert r.status_code == 413 and r.json()["details"]["reason"] == "quota_bytes", r.text
    r = post(listener_a, rt, rt.record("c", 2, data={"v": big}))  # an update growing too much
    assert r.status_code == 413 and r.json()["details"]["reason"] == "quota_bytes", r.text
    assert outcomes(post(listener_a, rt, rt.record("c", 3, data={"v": "y" * 750_000}))) == [
        "persisted"
    ]  # growing a little still fits
    assert (
        metric_value(listener_a.metrics(), "tether_listener_quota_refusals_total", limit="bytes")
        >= 2
    )


def test_across_two_listeners_the_quota_overshoots_by_at_most_the_others_admissions(
    listener_a: ListenerProcess,
    listener_b: ListenerProcess,
    make_runtime: Callable[[], Runtime],
    env: Env,
) -> None:
    rt = make_runtime()
    assert outcomes(post(listener_a, rt, rt.record("a0", 1))) == ["persisted"]  # a: 1 of 4
    # a merges its write into the runtime's summary right after its answer (the flush on
    # close); another listener's count sees it from then on, not before: wait for the merge
    summaries = client.CustomObjectsApi(env.api)
    res = apitypes.RUNTIME_STATE_SUMMARIES

    def merged() -> bool:
        try:
            obj = summaries.get_namespaced_custom_object(
                res.group, res.version, env.namespace, res.plural, summaryobject.name_of(rt.id)
            )
        except client.ApiException:
            return False
        held = statehash.stored_of(obj.get("status") if isinstance(obj, dict) else None)
        return held is not None and statehash.footprint_of(held) == (
            1,
            rules.stored_size(env.stored(rt.id)[0]["metadata"]),
        )

    deadline = time.monotonic() + 30
    while not merged():
        assert time.monotonic() < deadline, "listener a never merged its write into the summary"
        time.sleep(0.1)
    for i in range(3):  # b lists (1 stored) and fills the quota
        assert outcomes(post(listener_b, rt, rt.record(f"b{i}", 1))) == ["persisted"]
    assert post(listener_b, rt, rt.record("b-refused", 1)).status_code == 413
    admitted_by_a = 0  # a's view (1 record) is within its cache lifetime: b's 3 are unseen
    for i in range(1, 10):
        r = post(listener_a, rt, rt.record(f"a{i}", 1))
        if r.status_code == 413:
            break
        assert outcomes(r) == ["persisted"]
        admitted_by_a += 1
    stored = len(env.stored(rt.id))
    assert admitted_by_a == 3 and stored == QUOTA_RECORDS + 3  # the overshoot: b's 3
    # a state listing refreshes a's view at once: from then on it is exact again
    with rt.session() as s:
        assert s.get(f"{listener_a.url}/v1/runtimes/{rt.id}/state", timeout=30).status_code == 200
    assert listener_a_refuses(listener_a, rt, "after-listing")
    assert len(env.stored(rt.id)) == stored


def listener_a_refuses(p: ListenerProcess, rt: Runtime, name: str) -> bool:
    r = post(p, rt, rt.record(name, 1))
    return r.status_code == 413 and r.json()["details"]["reason"] == "quota_records"


def test_threads_of_one_listener_admit_exactly_the_quota(
    listener_a: ListenerProcess, make_runtime: Callable[[], Runtime], env: Env
) -> None:
    import concurrent.futures

    rt = make_runtime()
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        codes = list(
            pool.map(lambda i: post(listener_a, rt, rt.record(f"n{i}", 1)).status_code, range(12))
        )
    assert sorted(codes) == [200] * QUOTA_RECORDS + [413] * (12 - QUOTA_RECORDS)
    assert len(env.stored(rt.id)) == QUOTA_RECORDS


COUNTED = {
    **STORAGE,
    "TETHER_LISTENER_QUOTA_RECORDS": "40",
    "TETHER_LISTENER_QUOTA_CACHE_SECONDS": "0",
}  # every admission counts afresh


@pytest.fixture(scope="module")
def counting(env: Env) -> Iterator[tuple[ListenerProcess, ListenerProcess]]:
    a, b = ListenerProcess(env, "count-a", **COUNTED), ListenerProcess(env, "count-b", **COUNTED)
    yield a, b
    a.stop()
    b.stop()


def summary_footprint(env: Env, runtime_id: str) -> tuple[int, int] | None:
    try:
        obj = client.CustomObjectsApi(env.api).get_namespaced_custom_object(
            apitypes.RUNTIME_STATE_SUMMARIES.group,
            apitypes.RUNTIME_STATE_SUMMARIES.version,
            env.namespace,
            apitypes.RUNTIME_STATE_SUMMARIES.plural,
            statesummary.name_of(runtime_id),
        )
    except client.ApiException as e:
        if e.status == 404:
            return None
        raise
    stored = statehash.stored_of(obj.get("status"))
    return None if stored is None else statehash.footprint_of(stored)


def stored_footprint(env: Env, runtime_id: str) -> tuple[int, int]:
    metas = [o["metadata"] for o in env.stored(runtime_id)]
    return len(metas), sum(rules.stored_size(m) for m in metas)


def test_the_quota_counts_from_the_state_summary_at_one_read_whatever_the_records(
    counting: tuple[ListenerProcess, ListenerProcess],
    make_runtime: Callable[[], Runtime],
    env: Env,
) -> None:
    """A quota count used to list every record of the runtime (cost growing with its
    records, every QUOTA_CACHE_SECONDS per worker); it is one read of the runtime's
    RuntimeStateSummary, whose footprint (objects and bytes per bucket) its writes keep."""
    a, b = counting
    rt = make_runtime()
    # the first count builds the summary from one listing; then writes keep it
    for i in range(0, 30, 10):
        assert (
            outcomes(post(a, rt, *[rt.record(f"k{j}", 1) for j in range(i, i + 10)]))
            == ["persisted"] * 10
        )
    assert outcomes(post(a, rt, rt.record("k0", 2, data={"v": "x" * 5000}))) == ["persisted"]
    assert outcomes(post(a, rt, rt.record("k1", 3, deleted=True))) == ["persisted"]
    wait_until(
        lambda: summary_footprint(env, rt.id) == stored_footprint(env, rt.id),
        what="the summary's footprint equals the records' count and size annotations",
        timeout=30,
    )
    relisted = listenerenv.records_relisted(a, b)
    before = kcp_requests(env.api)
    for i in range(30, 40):  # every admission counts from the summary, no listing
        assert outcomes(post(a, rt, rt.record(f"k{i}", 1))) == ["persisted"]
    r = post(a, rt, rt.record("k-over", 1))
    assert r.status_code == 413 and r.json()["details"]["reason"] == "quota_records", r.text
    used = kcp_requests_since(env.api, before)
    # no LIST of records, but for a pod's view relisting them (its watch broke meanwhile)
    lists = used.get((apitypes.RUNTIME_CONFIGMAPS.plural, "LIST"), 0)
    assert lists == 0 or listenerenv.records_relisted(a, b) > relisted, used
    # each count merges this worker's pending writes into the summary first (a status PUT,
    # from the pod's view's copy when that holds the worker's last write, else after a GET);
    # a count with nothing to merge reads the view's copy: at most one GET per count
    assert used.get((apitypes.RUNTIME_STATE_SUMMARIES.plural, "PUT"), 0) >= 10, used
    assert used.get((apitypes.RUNTIME_STATE_SUMMARIES.plural, "GET"), 0) <= 11, used
    assert metric_value(a.metrics(), "tether_listener_quota_counts_total", source="listing") == 0
    assert metric_value(a.metrics(), "tether_listener_quota_counts_total", source="summary") >= 14
    assert len(env.stored(rt.id)) == 40
    wait_until(
        lambda: summary_footprint(env, rt.id) == stored_footprint(env, rt.id),
        what="the footprint follows the writes",
        timeout=30,
    )
    # another listener counts from the same summary: what a admitted is seen at once
    assert post(b, rt, rt.record("k-over-b", 1)).status_code == 413
    # an update that does not grow fits at the limit, one that grows is counted in bytes
    assert outcomes(post(b, rt, rt.record("k2", 4))) == ["persisted"]
    wait_until(
        lambda: summary_footprint(env, rt.id) == stored_footprint(env, rt.id),
        what="the footprint follows the other listener's writes",
        timeout=30,
    )


# -- the janitor -----------------------------------------------------------------------------


@pytest.fixture
def janitor(env: Env) -> Iterator[Janitor]:
    j = Janitor(env)
    yield j
    j.stop()


def lease(env: Env, runtime_id: str) -> Any:
    try:
        return client.CoordinationV1Api(env.api).read_namespaced_lease(
            heartbeat.lease_name(runtime_id), env.namespace
        )
    except client.ApiException as e:
        if e.status == 404:
            return None
        raise


def test_tombstones_are_pruned_after_the_retention_and_an_old_record_cannot_resurrect(
    listener_a: ListenerProcess, make_runtime: Callable[[], Runtime], env: Env, janitor: Janitor
) -> None:
    rt = make_runtime()
    read_before_delete = ago(0.5)
    assert outcomes(post(listener_a, rt, rt.record("gone", 10), rt.record("kept", 10))) == [
        "persisted",
        "persisted",
    ]
    assert outcomes(post(listener_a, rt, rt.record("gone", 20, deleted=True))) == ["persisted"]
    wait_until(
        lambda: env.stored_one(rt.id, "team-a", "gone") is None,
        what="tombstone pruned",
        timeout=RETENTION * 10,
    )
    assert env.stored_one(rt.id, "team-a", "kept") is not None  # live records stay
    assert janitor.metric("tether_listener_janitor_tombstones_deleted_total") >= 1
    # the pruned tombstone left the runtime's footprint (the quota's count): the janitor
    # merged the removal and listed its bucket again
    wait_until(
        lambda: (
            summary_footprint(env, rt.id)
            == stored_footprint(env, rt.id)
            == (1, rules.stored_size(env.stored_one(rt.id, "team-a", "kept")["metadata"]))
        ),
        what="the summary's footprint without the pruned tombstone",
        timeout=30,
    )
    assert any(a["event"] == "tombstones_pruned" for a in janitor.audit())
    # a late record read before the deletion (the forwarder retried for a long time): stale
    assert outcomes(
        post(listener_a, rt, rt.record("gone", 15, observed_at=read_before_delete))
    ) == ["stale"]
    assert env.stored_one(rt.id, "team-a", "gone") is None
    # the object re-created in the runtime, read afresh (the poller's next run): stored
    assert outcomes(post(listener_a, rt, rt.record("gone", 30, source="poller"))) == ["persisted"]
    stored = env.stored_one(rt.id, "team-a", "gone")
    assert stored is not None and stored["spec"]["resourceVersion"] == "30"


def test_an_orphaned_runtimes_records_and_lease_are_removed_after_the_grace(
    listener_a: ListenerProcess, make_runtime: Callable[[], Runtime], env: Env, janitor: Janitor
) -> None:
    gone, kept = make_runtime(), make_runtime()
    for rt in (gone, kept):
        assert outcomes(post(listener_a, rt, rt.record("a", 1), rt.record("b", 1))) == [
            "persisted",
            "persisted",
        ]
        assert lease(env, rt.id) is not None
    beats = heartbeat.Heartbeats(gateway.Kube(env.api), env.namespace, 30, 10)
    seen_before = len(beats.renew_times())
    client.CustomObjectsApi(env.api).delete_namespaced_custom_object(
        apitypes.KYMAS.group,
        apitypes.KYMAS.version,
        env.namespace,
        apitypes.KYMAS.plural,
        f"kyma-{gone.id.lower()}"[:60],
    )
    marked = wait_until(
        lambda: (
            lambda le: le is not None and (le.metadata.annotations or {}).get(rules.ORPHANED_SINCE)
        )(lease(env, gone.id)),
        what="orphan marked on its Lease",
        timeout=30,
    )
    assert rules.parse_time(marked) is not None
    # a deprovisioned runtime no longer counts among the silent ones (marked or removed)
    assert len(beats.renew_times()) == seen_before - 1
    wait_until(
        lambda: not env.stored(gone.id) and lease(env, gone.id) is None,
        what="orphan's records and Lease removed",
        timeout=60,
    )
    assert len(env.stored(kept.id)) == 2  # a runtime with its Kyma CR is untouched
    kept_lease = lease(env, kept.id)
    assert kept_lease is not None
    assert rules.ORPHANED_SINCE not in (kept_lease.metadata.annotations or {})
    assert janitor.metric("tether_listener_janitor_orphan_records_deleted_total") >= 2
    assert janitor.metric("tether_listener_janitor_orphan_leases_deleted_total") >= 1
    removed = [a for a in janitor.audit() if a["event"] == "orphan_removed"]
    assert [a["runtime"] for a in removed] == [gone.id] and removed[0]["records"] == 2


def test_the_janitor_refuses_a_bad_setting_with_one_line(env: Env) -> None:
    base = {k: v for k, v in os.environ.items() if not k.startswith("TETHER_")}
    out = subprocess.run(
        [sys.executable, "-m", "command.cli", "janitor"],
        cwd=controlplane.REPO_ROOT,
        env={**base, "TETHER_LISTENER_ORPHAN_GRACE_SECONDS": "soon"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 2
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(
        "tether janitor: TETHER_LISTENER_ORPHAN_GRACE_SECONDS: "
    ), out.stderr
    out = subprocess.run(
        [sys.executable, "-m", "command.cli", "janitor", "--check"],
        cwd=controlplane.REPO_ROOT,
        env=base,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0 and out.stdout.strip() == "tether janitor: settings ok"
