"""Restore-safe ordering on real planes: an SKR plane's etcd restored from an earlier
snapshot (etcdctl/etcdutl from the pinned etcd modules), and an SKR plane rebuilt empty
under the same runtime ID. In both, the first poll run afterwards starts a new epoch and
leaves the KCP holding exactly the runtime's state (keys created after the snapshot
tombstoned, their data gone), and later changes reach the KCP. Within one epoch an older
record racing a newer one still loses.

Each scenario runs its own SKR plane (the session's is shared and must not go back)."""

from __future__ import annotations

import concurrent.futures
import json
import pathlib
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kubernetes import client

from listener.fleet import heartbeat
from testing import controlplane
from testing.listenerenv import ListenerProcess, Runtime
from testing.pollerenv import Env, InProcess, kcp_state, runtime_state, unique_selector
from tether.kube import apitypes
from tether.wire import conversion

NS = "team-a"
# the poller as deployed (poller.settings): the bucketed run first, its fallback the full digest
BUCKETS = True


@pytest.fixture
def own_skr() -> Iterator[controlplane.ControlPlane]:
    plane = controlplane.ControlPlane("skr-epochs").start()
    try:
        yield plane
    finally:
        plane.stop()


def core_of(plane: controlplane.ControlPlane) -> client.CoreV1Api:
    api = plane.api_client()
    core = client.CoreV1Api(api)
    controlplane.retry_busy(lambda: core.list_namespace(limit=1))
    return core


def put(core: client.CoreV1Api, name: str, data: dict[str, str], labels: dict[str, str]) -> None:
    try:
        core.create_namespaced_config_map(
            NS,
            client.V1ConfigMap(metadata=client.V1ObjectMeta(name=name, labels=labels), data=data),
        )
    except client.ApiException as e:
        if e.status != 409:
            raise
        core.patch_namespaced_config_map(name, NS, {"data": data})


def lease_epoch(env: Env, rt: Runtime) -> tuple[int, str]:
    lease: Any = client.CoordinationV1Api(env.api).read_namespaced_lease(
        heartbeat.lease_name(rt.id), env.namespace
    )
    ann = lease.metadata.annotations or {}
    return int(ann.get(apitypes.EPOCH_ANNOTATION, "0")), ann.get(heartbeat.ANN_IDENTITY, "")


def assert_kcp_holds_the_runtime(
    env: Env, rt: Runtime, core: client.CoreV1Api, selector: str, epoch: int
) -> dict[tuple[str, str], dict[str, Any]]:
    live, dead = kcp_state(env, rt.id, NS)
    assert live == runtime_state(core, NS, selector)
    for obj in env.stored(rt.id):
        if (obj["spec"]["namespace"], obj["spec"]["name"]) in live:
            assert obj["spec"]["epoch"] == epoch
            assert obj["metadata"]["annotations"][apitypes.EPOCH_ANNOTATION] == str(epoch)
    for spec in dead.values():
        assert "data" not in spec and "labels" not in spec
    return dead


def run_timed(poller: InProcess) -> tuple[Any, float]:
    t0 = time.monotonic()
    res = poller.run()
    return res, time.monotonic() - t0


def test_an_etcd_restored_from_an_earlier_snapshot_converges_in_one_run(
    listener_env: Env,
    listener: ListenerProcess,
    runtime: Callable[..., Runtime],
    own_skr: controlplane.ControlPlane,
    tmp_path: pathlib.Path,
) -> None:
    rt = runtime()
    core = core_of(own_skr)
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=NS)))
    labels, selector = unique_selector()
    for i in range(6):
        put(core, f"a-{i}", {"v": "before"}, labels)
    poller = InProcess(
        rt, listener.url, own_skr.api_client(), selector, page_size=4, buckets=BUCKETS
    )
    try:
        res = poller.run()
        assert res.outcome == "ok" and res.epoch == 0, res
        assert_kcp_holds_the_runtime(listener_env, rt, core, selector, 0)
        assert lease_epoch(listener_env, rt)[1]  # the identity is recorded, no new epoch
    finally:
        poller.close()

    snap = own_skr.snapshot(tmp_path / "skr.db")

    # after the snapshot: new keys, updates, a deletion; the KCP stores them (higher RVs)
    for i in range(4):
        put(core, f"b-{i}", {"v": "lost"}, labels)
    for i in (0, 1):
        put(core, f"a-{i}", {"v": "lost"}, labels)
    core.delete_namespaced_config_map("a-2", NS)
    poller = InProcess(
        rt, listener.url, own_skr.api_client(), selector, page_size=4, buckets=BUCKETS
    )
    try:
        res = poller.run()
        assert res.outcome == "ok" and res.differences == {
            "missing": 4,
            "changed": 2,
            "deleted": 1,
        }, res
    finally:
        poller.close()
    high = max(int(o["spec"]["resourceVersion"]) for o in listener_env.stored(rt.id))

    own_skr.restore(snap)
    core = core_of(own_skr)
    # changes after the restore: their resourceVersions are below what the KCP holds
    put(core, "a-3", {"v": "after"}, labels)
    put(core, "c-0", {"v": "after"}, labels)
    core.delete_namespaced_config_map("a-5", NS)
    listed = int(core.list_namespaced_config_map(NS, limit=1).metadata.resource_version)
    assert listed < high, "the restored history must be behind the stored records"

    poller = InProcess(
        rt, listener.url, own_skr.api_client(), selector, page_size=4, buckets=BUCKETS
    )
    try:
        res, seconds = run_timed(poller)
        assert res.outcome == "ok" and res.epoch == 1, res
        assert poller.sample("tether_poller_history_went_back_total") == 1
        print(f"restored etcd: one run converged in {seconds:.2f}s ({res})")
        dead = assert_kcp_holds_the_runtime(listener_env, rt, core, selector, 1)
        # keys created after the snapshot are tombstoned, their old data gone; a-2 (deleted
        # after the snapshot) is back, a-5 (deleted after the restore) is gone
        assert sorted(k[1] for k in dead) == ["a-5", "b-0", "b-1", "b-2", "b-3"]
        assert lease_epoch(listener_env, rt)[0] == 1

        # later changes reach the KCP, by the poller and as a sender without an epoch
        put(core, "a-0", {"v": "later"}, labels)
        res = poller.run()
        assert res.outcome == "ok" and res.epoch == 1 and res.differences["changed"] == 1, res
        assert poller.sample("tether_poller_history_went_back_total") == 1  # no second epoch
        assert_kcp_holds_the_runtime(listener_env, rt, core, selector, 1)
        put(core, "a-1", {"v": "webhook"}, labels)
        raw: Any = core.read_namespaced_config_map("a-1", NS, _preload_content=False)
        rec = conversion.from_configmap(json.loads(raw.data), runtime_id=rt.id, source="webhook")
        out = poller.client.send([rec])
        assert out.verdict == "ok" and out.epoch == 1
        assert out.results[0]["outcome"] == "persisted"
        assert_kcp_holds_the_runtime(listener_env, rt, core, selector, 1)
        # a record of the old epoch loses; one of an epoch the KCP never started is refused
        old = poller.client.send([{**rec, "epoch": 0, "resourceVersion": str(high + 100)}])
        assert old.results[0]["outcome"] == "stale"
        ahead = poller.client.send([{**rec, "epoch": 2}])
        assert ahead.status == 409 and "future_epoch" in ahead.details
    finally:
        poller.close()


def test_a_cluster_rebuilt_empty_under_the_same_runtime_id_converges_in_one_run(
    listener_env: Env,
    listener: ListenerProcess,
    runtime: Callable[..., Runtime],
) -> None:
    rt = runtime()
    labels, selector = unique_selector()
    with controlplane.ControlPlane("skr-old") as old:
        core = core_of(old)
        core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=NS)))
        for i in range(40):  # drive the old history's resourceVersions up
            put(core, f"old-{i % 8}", {"v": str(i)}, labels)
        poller = InProcess(rt, listener.url, old.api_client(), selector, buckets=BUCKETS)
        try:
            assert poller.run().outcome == "ok"
        finally:
            poller.close()
        old_identity = lease_epoch(listener_env, rt)[1]
        assert old_identity
    assert len(kcp_state(listener_env, rt.id, NS)[0]) == 8

    with controlplane.ControlPlane("skr-new") as new:
        core = core_of(new)
        core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=NS)))
        for i in range(3):  # same names, lower resourceVersions, other data
            put(core, f"old-{i}", {"v": "rebuilt"}, labels)
        put(core, "new-0", {"v": "rebuilt"}, labels)
        poller = InProcess(rt, listener.url, new.api_client(), selector, buckets=BUCKETS)
        try:
            res, seconds = run_timed(poller)
            assert res.outcome == "ok" and res.epoch == 1, res
            print(f"rebuilt cluster: one run converged in {seconds:.2f}s ({res})")
            assert res.differences == {"missing": 1, "changed": 3, "deleted": 5}, res
            dead = assert_kcp_holds_the_runtime(listener_env, rt, core, selector, 1)
            assert sorted(k[1] for k in dead) == [f"old-{i}" for i in range(3, 8)]
            epoch, identity = lease_epoch(listener_env, rt)
            assert epoch == 1 and identity not in ("", old_identity)
            put(core, "new-1", {"v": "later"}, labels)
            res = poller.run()
            assert res.outcome == "ok" and res.differences["missing"] == 1 and res.epoch == 1
            assert_kcp_holds_the_runtime(listener_env, rt, core, selector, 1)
        finally:
            poller.close()


def test_within_an_epoch_an_older_record_racing_a_newer_one_loses(
    listener_env: Env,
    listener: ListenerProcess,
    runtime: Callable[..., Runtime],
) -> None:
    rt = runtime()
    session = rt.session()
    url = f"{listener.url}/v1/runtimes/{rt.id}/changes"

    def send(rec: dict[str, Any]) -> dict[str, Any]:
        r = session.post(url, json=rec, timeout=30)
        assert r.status_code == 200, r.text
        body: dict[str, Any] = r.json()
        return body

    first = send(rt.record("k-0", 1))
    assert first["epoch"] == 0  # a runtime without any report: its first epoch
    # newer and older records of 20 keys, sent at once from 8 threads, with and without
    # the epoch: the newer always stays
    recs = []
    for i in range(20):
        newer, older = rt.record(f"r-{i}", 200 + i), rt.record(f"r-{i}", 100 + i)
        if i % 2:
            newer, older = {**newer, "epoch": 0}, {**older, "epoch": 0}
        recs += [older, newer] if i % 3 else [newer, older]
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        list(pool.map(send, recs))
    for i in range(20):
        stored = listener_env.stored_one(rt.id, "team-a", f"r-{i}")
        assert stored is not None and stored["spec"]["resourceVersion"] == str(200 + i)
        assert stored["spec"]["epoch"] == 0
    # and a late older one, alone, is stale
    assert send(rt.record("r-0", 150))["results"][0]["outcome"] == "stale"
