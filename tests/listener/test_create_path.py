"""The create path against the real KCP plane (issue 14): a key the worker does not know is
created without a read first, and compared only when the create answers 409.

Requests are counted by the KCP apiserver itself (``apiserver_request_total`` of its
``/metrics``, scraped with the admin kubeconfig before and after). Listeners run under
gunicorn with mTLS and the least-privilege Role, in a namespace of their own; "another
replica" is either a second listener process, a second ``store.Store`` (a worker) on the
real KCP, or a direct write of the same object with the admin client.
"""

from __future__ import annotations

import collections
import concurrent.futures
import datetime
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import requests
from kubernetes import client
from prometheus_client.parser import text_string_to_metric_families

from listener.storage import records, rules, store
from testing import listenerenv
from testing.deliveryenv import summary
from testing.listenercalls import new_runtime
from testing.listenerenv import (
    Env,
    ListenerProcess,
    Runtime,
    metric_value,
    own_namespace,
    remove_namespace,
)
from testing.pollerenv import wait_until
from tether.base import times
from tether.kube import apitypes, gateway
from tether.wire import changes

pytestmark = pytest.mark.processes
RETENTION = 3600.0
QUOTA_RECORDS = 6
BASE = {
    "TETHER_LISTENER_QUOTA_CACHE_SECONDS": "600",  # only a state listing refreshes it
    "TETHER_LISTENER_TOMBSTONE_RETENTION_SECONDS": str(RETENTION),
    "TETHER_LISTENER_DELIVERY_FLUSH_SECONDS": "0",
}
CONFLICTS = "tether_listener_write_conflicts_total"


@pytest.fixture(scope="module")
def env(listener_env: Env) -> Iterator[Env]:
    e = own_namespace(listener_env, "kc")
    yield e
    remove_namespace(e)


@pytest.fixture(scope="module")
def listener_a(env: Env) -> Iterator[ListenerProcess]:
    p = ListenerProcess(env, "create-a", **BASE)
    yield p
    p.stop()


@pytest.fixture(scope="module")
def listener_b(env: Env) -> Iterator[ListenerProcess]:
    p = ListenerProcess(env, "create-b", **BASE)
    yield p
    p.stop()


@pytest.fixture
def make_runtime(env: Env) -> Callable[[], Runtime]:
    return lambda: new_runtime(env)


def post(p: ListenerProcess, rt: Runtime, *recs: dict[str, Any]) -> requests.Response:
    doc: Any = recs[0] if len(recs) == 1 else changes.batch(list(recs))  # type: ignore[arg-type]
    with rt.session() as s:
        return s.post(f"{p.url}/v1/runtimes/{rt.id}/changes", json=doc, timeout=60)


def outcomes(r: requests.Response) -> list[str]:
    assert r.status_code == 200, r.text
    return [i["outcome"] for i in r.json()["results"]]


def list_state(p: ListenerProcess, rt: Runtime) -> None:
    """A state listing: loads the worker's quota view of the runtime (one LIST)."""
    with rt.session() as s:
        assert s.get(f"{p.url}/v1/runtimes/{rt.id}/state", timeout=60).status_code == 200


def ago(seconds: float) -> str:
    return times.format_time(
        datetime.datetime.now(datetime.UTC) - datetime.timedelta(seconds=seconds)
    )


def conflicts(p: ListenerProcess, path: str) -> float:
    return metric_value(p.metrics(), CONFLICTS, path=path)


# -- the KCP's own request count -------------------------------------------------------------


def kcp_requests(env: Env) -> collections.Counter[str]:
    """Requests the KCP apiserver served on RuntimeConfigMaps so far, by verb (its own
    ``apiserver_request_total``)."""
    api = env.api
    r = api.rest_client.pool_manager.request("GET", f"{api.configuration.host}/metrics", timeout=30)
    assert r.status == 200, r.data[:200]
    counts: collections.Counter[str] = collections.Counter()
    for family in text_string_to_metric_families(r.data.decode()):
        if family.name != "apiserver_request":
            continue
        for sample in family.samples:
            lbl = sample.labels
            if (
                sample.name == "apiserver_request_total"
                and lbl.get("group") == apitypes.RUNTIME_CONFIGMAPS.group
                and lbl.get("resource") == apitypes.RUNTIME_CONFIGMAPS.plural
            ):
                counts[lbl["verb"]] += int(sample.value)
    return counts


def requests_during(
    env: Env, p: ListenerProcess, rt: Runtime, *recs: dict[str, Any]
) -> tuple[list[str], dict[str, int]]:
    """The outcomes of posting ``recs`` (one request) and the requests on RuntimeConfigMaps
    the KCP served meanwhile, by verb."""
    got: list[str] = []
    counts = kcp_requests_during(env, lambda: got.extend(outcomes(post(p, rt, *recs))))
    return got, counts


def kcp_requests_during(env: Env, action: Callable[[], object]) -> dict[str, int]:
    """Requests on RuntimeConfigMaps during ``action``, by verb. The apiserver counts a
    request just after answering it: before and after, read until two reads 0.3 s apart
    agree (a request answered just before ``action``, such as the pod view's first listing
    of the records, is not counted in it)."""
    before = settled_kcp_requests(env)
    action()
    last = settled_kcp_requests(env)
    return {verb: n - before[verb] for verb, n in last.items() if n != before[verb]}


def settled_kcp_requests(env: Env) -> collections.Counter[str]:
    last = kcp_requests(env)
    while True:
        threading.Event().wait(0.3)
        now = kcp_requests(env)
        if now == last:
            return now
        last = now


def direct_write(env: Env, rec: dict[str, Any]) -> dict[str, Any]:
    """What another replica would have stored for ``rec`` (admin client, size annotated)."""
    body = records.body(listenerenv.as_stored(rec), env.namespace)
    rules.annotate(body)
    obj: Any = client.CustomObjectsApi(env.api).create_namespaced_custom_object(
        apitypes.RUNTIME_CONFIGMAPS.group,
        apitypes.RUNTIME_CONFIGMAPS.version,
        env.namespace,
        apitypes.RUNTIME_CONFIGMAPS.plural,
        body,
    )
    return dict(obj)


def real_usage(env: Env, runtime_id: str) -> rules.Used:
    return rules.usage_of(o["metadata"] for o in env.stored(runtime_id))


# -- tests -------------------------------------------------------------------------------------


def test_a_new_key_costs_exactly_one_kcp_request(
    listener_a: ListenerProcess, make_runtime: Callable[[], Runtime], env: Env
) -> None:
    rt = make_runtime()
    list_state(listener_a, rt)  # the quota view, loaded once (a LIST), not part of a create
    before = conflicts(listener_a, "create")

    def creates() -> None:
        for i in range(4):  # one record per request (the forwarder's case)
            assert outcomes(post(listener_a, rt, rt.record(f"one-{i}", 10 + i))) == ["persisted"]
        batch = [rt.record(f"batch-{i}", 20 + i) for i in range(4)]
        assert outcomes(post(listener_a, rt, *batch)) == ["persisted"] * 4

    relisted = listenerenv.records_relisted(listener_a)
    used = kcp_requests_during(env, creates)
    # no LIST of records, but for the pod's view relisting them (its watch broke meanwhile)
    if 0 < used.get("LIST", 0) <= listenerenv.records_relisted(listener_a) - relisted:
        del used["LIST"]
    assert used == {"POST": 8}
    assert len(env.stored(rt.id)) == 8
    # the next update of a key the worker created: one PUT (the write cache)
    assert requests_during(env, listener_a, rt, rt.record("one-0", 30)) == (
        ["persisted"],
        {"PUT": 1},
    )
    # a key someone else stored: the create is refused (409), then read, compare, PUT
    direct_write(env, rt.record("foreign", 5))
    assert requests_during(env, listener_a, rt, rt.record("foreign", 6)) == (
        ["persisted"],
        {"POST": 1, "GET": 1, "PUT": 1},
    )
    assert conflicts(listener_a, "create") == before + 1
    stored = env.stored_one(rt.id, "team-a", "foreign")
    assert stored is not None and stored["spec"]["resourceVersion"] == "6"


def test_a_create_racing_a_newer_stored_object_keeps_the_newer_and_the_older_is_stale(
    listener_a: ListenerProcess,
    listener_b: ListenerProcess,
    make_runtime: Callable[[], Runtime],
    env: Env,
) -> None:
    rt = make_runtime()
    # deterministic: a newer object is stored already (another replica wrote it)
    newer = direct_write(env, rt.record("k", 50, data={"v": "newer"}))
    before = conflicts(listener_a, "create")
    assert outcomes(post(listener_a, rt, rt.record("k", 40, data={"v": "older"}))) == ["stale"]
    assert outcomes(post(listener_a, rt, rt.record("k", 50, data={"v": "newer"}))) == ["duplicate"]
    kept = env.stored_one(rt.id, "team-a", "k")
    assert kept is not None and kept["spec"]["data"] == {"v": "newer"}
    assert kept["metadata"]["resourceVersion"] == newer["metadata"]["resourceVersion"]
    assert conflicts(listener_a, "create") == before + 1  # the second one read: cached now

    # a real race: two listeners get the same new keys at once, a older, b newer
    keys = [f"race-{i}" for i in range(12)]
    barrier = threading.Barrier(2 * len(keys))

    def send(p: ListenerProcess, name: str, rv: int) -> tuple[str, int, str]:
        rec = rt.record(name, rv, data={"v": str(rv)})
        with rt.session() as s:
            s.get(f"{p.url}/v1/runtimes/{rt.id}/state", timeout=60)  # connected, quota loaded
            barrier.wait(timeout=60)
            r = s.post(f"{p.url}/v1/runtimes/{rt.id}/changes", json=rec, timeout=60)
        return name, rv, outcomes(r)[0]

    jobs = [(listener_a, k, 100) for k in keys] + [(listener_b, k, 200) for k in keys]
    before_race = sum(conflicts(p, "create") for p in (listener_a, listener_b))
    with concurrent.futures.ThreadPoolExecutor(len(jobs)) as pool:
        results = list(pool.map(lambda j: send(*j), jobs))
    for name, rv, outcome in results:  # the newer always wins; the older may come first
        assert outcome in (("persisted",) if rv == 200 else ("persisted", "stale")), (
            name,
            rv,
            outcome,
        )
    stored = {o["spec"]["name"]: o["spec"] for o in env.stored(rt.id)}
    for k in keys:
        assert stored[k]["resourceVersion"] == "200" and stored[k]["data"] == {"v": "200"}
    # every key was created once: the other create of each key was refused (409) and took
    # the read path, whoever came second
    lost = sum(conflicts(p, "create") for p in (listener_a, listener_b)) - before_race
    assert lost == len(keys)
    print(f"race outcomes {collections.Counter(o for *_, o in results)}")


def test_quota_usage_stays_exact_after_create_conflicts(
    make_runtime: Callable[[], Runtime], env: Env
) -> None:
    """Each create reserves a new record; on 409 that reservation is cancelled and the
    update reserves its growth: the worker's view equals the real objects (the
    RuntimeDelivery's ``stored`` is that view), and the record cap admits exactly."""
    # one record after another: at concurrency, a create's reservation still pending
    # makes another record of the batch skip its create (the read path, no conflict)
    p = ListenerProcess(
        env,
        "create-quota",
        **BASE,
        TETHER_LISTENER_PERSIST_CONCURRENCY="1",
        TETHER_LISTENER_QUOTA_RECORDS=str(QUOTA_RECORDS),
    )
    try:
        rt = make_runtime()
        k = QUOTA_RECORDS - 1
        for i in range(k):  # stored by another replica
            direct_write(env, rt.record(f"k{i}", 10))
        list_state(p, rt)  # the view: k records
        before = conflicts(p, "create")
        # newer records for every stored key, larger: each create is refused (409), each
        # becomes an update that grows the bytes
        r = post(p, rt, *(rt.record(f"k{i}", 20, data={"v": "x" * 500}) for i in range(k)))
        assert outcomes(r) == ["persisted"] * k
        assert conflicts(p, "create") == before + k
        assert outcomes(post(p, rt, rt.record("fresh", 1))) == ["persisted"]  # the cap: k + 1
        r = post(p, rt, rt.record("over", 1))
        assert r.status_code == 413 and r.json()["details"]["reason"] == "quota_records", r.text
        real = real_usage(env, rt.id)
        assert real.records == QUOTA_RECORDS

        def view_is_real() -> bool:
            s = summary(env, rt.id)
            if (
                s is not None
                and s.refusals == 1
                and s.stored is not None
                and (s.stored["records"], s.stored["bytes"]) == tuple(real)
            ):
                return True
            # a flush still running keeps the next one for the next request: a duplicate
            # (no write, no change of the usage) brings it
            assert outcomes(post(p, rt, rt.record("fresh", 1))) == ["duplicate"]
            return False

        wait_until(
            view_is_real, what=f"the worker's view {real} in the RuntimeDelivery", timeout=30
        )

        # at the cap, an update of a key this worker does not know: the create is not even
        # tried as a new record would not fit; the read path finds the key and updates it
        direct_write(env, rt.record("foreign", 1))  # another replica went over (the bound)
        assert outcomes(post(p, rt, rt.record("foreign", 2))) == ["persisted"]
        assert conflicts(p, "create") == before + k
    finally:
        p.stop()


def test_two_workers_racing_on_new_keys_account_exactly_the_real_objects(
    make_runtime: Callable[[], Runtime], env: Env
) -> None:
    """Two ``store.Store`` (two workers, each its own quota view) on the real KCP through
    the listener's least-privilege kubeconfig create the same new keys at once. Each key is
    created once; between them they account exactly the real records and bytes."""
    rt = make_runtime()
    stores = [
        store.Store(
            gateway.from_kubeconfig(str(env.kubeconfig)), env.namespace, 20.0, quota_ttl=600.0
        )
        for _ in range(2)
    ]
    for s in stores:
        s.digest(rt.id)  # both views loaded (0 records) before the race
    keys = [f"n{i}" for i in range(16)]
    threads = 6
    barrier = threading.Barrier(threads)

    def worker(j: int) -> list[store.Outcome]:
        s = stores[j % 2]
        barrier.wait(timeout=60)
        out: list[store.Outcome] = []
        for i, key in enumerate(keys):  # every thread: every key, its own version and size
            rv = 100 + 10 * i + j
            out.append(s.persist(rt.record(key, rv, data={"v": "y" * (50 * j)})))
        return out

    with concurrent.futures.ThreadPoolExecutor(threads) as pool:
        got = [o for outs in pool.map(worker, range(threads)) for o in outs]
    assert set(got) <= {"persisted", "stale", "duplicate"} and "persisted" in got
    stored = {o["spec"]["name"]: o for o in env.stored(rt.id)}
    assert set(stored) == set(keys)
    for i, key in enumerate(keys):
        assert stored[key]["spec"]["resourceVersion"] == str(
            100 + 10 * i + threads - 1
        )  # the newest
    real = real_usage(env, rt.id)
    views = [s.usage.current(rt.id) for s in stores]
    assert (sum(v.records for v in views), sum(v.bytes for v in views)) == tuple(real)


def test_an_old_record_for_an_unknown_key_is_still_refused_by_the_retention_rule(
    listener_a: ListenerProcess, make_runtime: Callable[[], Runtime], env: Env
) -> None:
    rt = make_runtime()
    list_state(listener_a, rt)
    old = ago(RETENTION + 60)
    # not stored: too old to be a new key; no create is tried, the read path decides
    assert requests_during(env, listener_a, rt, rt.record("gone", 10, observed_at=old)) == (
        ["stale"],
        {"GET": 1},
    )
    assert env.stored_one(rt.id, "team-a", "gone") is None
    # stored (by another replica) and older than the record: the ordering rule decides
    direct_write(env, rt.record("kept", 5, observed_at=ago(RETENTION + 120)))
    assert outcomes(post(listener_a, rt, rt.record("kept", 10, observed_at=old))) == ["persisted"]
    stored = env.stored_one(rt.id, "team-a", "kept")
    assert stored is not None and stored["spec"]["resourceVersion"] == "10"
    # a recent record for a new key: created at once
    assert outcomes(post(listener_a, rt, rt.record("new", 1))) == ["persisted"]
