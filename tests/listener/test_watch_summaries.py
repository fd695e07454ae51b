"""Per-Watch state summaries (issue 41 item 1) against the real KCP plane and a listener of two
workers with its pod's view: a Watch's summary and buckets are folded from the records the
view holds, so a runtime in sync costs the KCP no read; without the view the Watch's records
are listed in its storage namespace only. Hostile: a runtime cannot read another runtime's
summary or records through these routes, a Watch not in force for it is refused, and a
record copied by hand outside the Watch's storage namespace is never counted.

The KCP's own ``apiserver_request_total`` counts the requests (``testing.listenerenv``).
"""

from __future__ import annotations

import copy
import functools
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import requests
from kubernetes import client

from listener.storage import records
from testing import controlplane, watchenv
from testing.listenercalls import post, running, state
from testing.listenerenv import (
    COMPAT_WATCH,
    Env,
    ListenerProcess,
    Runtime,
    add_runtime,
    kcp_requests,
    kcp_requests_since,
    metric_value,
    own_namespace,
    remove_namespace,
)
from testing.pollerenv import wait_until
from tether.kube import apitypes
from tether.wire import changes, statehash, watches

pytestmark = pytest.mark.processes
CM = {"group": "", "version": "v1", "resource": "configmaps", "kind": "ConfigMap"}
GOLD = "gold-only"  # in force only where the Kyma CR is labelled tier=gold
META = "meta-only"


@pytest.fixture(scope="module")
def env(listener_env: Env) -> Iterator[Env]:
    e = own_namespace(listener_env, "kws")
    watchenv.apply(
        e.api,
        watchenv.watch(GOLD, CM, e.namespace, runtimes={"selector": {"matchLabels": {"t": "g"}}}),
    )
    watchenv.apply(e.api, watchenv.watch(META, CM, e.namespace, send={"mode": "metadata"}))
    yield e
    remove_namespace(e)


def _synced(p: ListenerProcess) -> bool:
    return metric_value(p.metrics(), "tether_listener_view_synced", resource="records") == 1


@pytest.fixture(scope="module")
def listener(env: Env) -> Iterator[ListenerProcess]:
    for p in running(env, "wsum", TETHER_LISTENER_WORKERS="2", TETHER_LISTENER_THREADS="4"):
        wait_until(functools.partial(_synced, p), what="the view of records synced", timeout=60)
        yield p


@pytest.fixture(scope="module")
def bare(env: Env) -> Iterator[ListenerProcess]:
    """A listener without the pod's view: every answer is read from the KCP."""
    yield from running(env, "wsum-bare", TETHER_LISTENER_VIEW="false")


def meta_watch(ns: str) -> watches.Watch:
    return watches.parse(watchenv.watch(META, CM, ns, send={"mode": "metadata"}))


def cm(name: str, rv: int) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "namespace": "team-a",
            "name": name,
            "uid": "u-" + name,
            "resourceVersion": str(rv),
        },
    }


def filled(env: Env, listener: ListenerProcess, n: int) -> Runtime:
    """A runtime with ``n`` records of the metadata Watch and one v1 record (compat Watch)."""
    rt = add_runtime(env, f"rt-{uuid.uuid4().hex[:12]}")
    w = meta_watch(env.namespace)
    recs = [
        dict(changes.from_object(cm(f"o{i}", 10 + i), watch=w, runtime_id=rt.id, source="poller"))
        for i in range(n)
    ]
    r = post(listener, rt, *recs)
    assert r.status_code == 200, r.text
    assert post(listener, rt, rt.record("compat-only", 5)).status_code == 200
    return rt


def summary(p: ListenerProcess, rt: Runtime, watch: str, rid: str = "") -> requests.Response:
    with rt.session() as s:  # a new connection: any worker
        return s.get(
            f"{p.url}/v1/runtimes/{rid or rt.id}/watches/{watch}/summary",
            params={"identity": "uid-" + rt.id},
            timeout=30,
        )


def bucket(p: ListenerProcess, rt: Runtime, watch: str, n: int) -> requests.Response:
    with rt.session() as s:
        return s.get(f"{p.url}/v1/runtimes/{rt.id}/watches/{watch}/buckets/{n}", timeout=30)


def expected(rt: Runtime, n: int) -> dict[str, Any]:
    folded = statehash.Buckets()
    for i in range(n):
        folded.add_live("team-a", f"o{i}", str(10 + i), 0)
    return folded.wire()


def counted(p: ListenerProcess, rt: Runtime, n: int) -> bool:
    r = summary(p, rt, META)
    return r.status_code == 200 and sum(r.json()["counts"]) == n


def test_a_watch_summary_holds_only_the_runtime_s_records_of_that_watch(
    env: Env, listener: ListenerProcess
) -> None:
    a, b = filled(env, listener, 6), filled(env, listener, 3)
    for rt, n in ((a, 6), (b, 3)):
        wait_until(functools.partial(counted, listener, rt, n), what="in the view", timeout=30)
        doc = summary(listener, rt, META).json()
        assert doc["watch"] == META and doc["epoch"] == 0
        assert {k: doc[k] for k in ("bucketCount", "hashes", "counts")} == expected(rt, n)
    # the compat Watch's summary holds the v1 record only, and its digest agrees
    doc = summary(listener, a, COMPAT_WATCH).json()
    assert sum(doc["counts"]) == 1
    items = state(listener, a, watch=COMPAT_WATCH).json()["items"]
    assert [i["name"] for i in items] == ["compat-only"]
    assert statehash.fold(items).wire()["hashes"] == doc["hashes"]
    # a bucket: the digest items of that bucket only, with its hash
    b0 = statehash.bucket_of("team-a", "o0")
    r = bucket(listener, a, META, b0)
    assert r.status_code == 200, r.text
    got = r.json()
    assert got["watch"] == META and got["bucket"] == b0
    assert [i["name"] for i in got["items"]] == sorted(
        f"o{i}" for i in range(6) if statehash.bucket_of("team-a", f"o{i}") == b0
    )
    assert got["hash"] == expected(a, 6)["hashes"][b0]
    assert bucket(listener, a, META, 256).status_code == 400


def test_a_runtime_in_sync_costs_the_kcp_no_read(env: Env, listener: ListenerProcess) -> None:
    rt = filled(env, listener, 4)
    wait_until(functools.partial(counted, listener, rt, 4), what="in the view", timeout=30)
    before = kcp_requests(env.api)
    answers = [summary(listener, rt, META).status_code for _ in range(20)]
    answers += [state(listener, rt, watch=META).status_code for _ in range(5)]
    used = kcp_requests_since(env.api, before)
    assert answers == [200] * 25
    # the listener's Watch list is its own cached read per worker (every 5 s at most), not
    # the runtime's: what a runtime in sync costs is no read of records or summaries
    reads = {k: v for k, v in used.items() if k[1] in ("GET", "LIST") and k[0] != "watches"}
    assert reads == {}, used


def test_without_the_view_a_watch_is_listed_in_its_storage_namespace_only(
    env: Env, listener: ListenerProcess, bare: ListenerProcess
) -> None:
    rt = filled(env, listener, 3)
    before = _lists_by_scope(env)
    r = summary(bare, rt, META)
    assert r.status_code == 200, r.text
    assert {k: r.json()[k] for k in ("hashes", "counts")} == {
        k: expected(rt, 3)[k] for k in ("hashes", "counts")
    }
    assert [i["name"] for i in state(bare, rt, watch=META).json()["items"]] == ["o0", "o1", "o2"]
    after = _lists_by_scope(env)
    grew = {k: after.get(k, 0) - before.get(k, 0) for k in after if after[k] != before.get(k, 0)}
    assert grew.get("namespace", 0) >= 2 and grew.get("cluster", 0) == 0, grew


def _lists_by_scope(env: Env) -> dict[str, int]:
    """LISTs of RuntimeConfigMaps the KCP served so far, by scope (namespace, cluster)."""
    api = env.api
    r = api.rest_client.pool_manager.request("GET", f"{api.configuration.host}/metrics", timeout=30)
    out: dict[str, int] = {}
    for line in r.data.decode().splitlines():
        if not line.startswith("apiserver_request_total{") or 'verb="LIST"' not in line:
            continue
        if 'resource="runtimeconfigmaps"' not in line:
            continue
        scope = line.split('scope="', 1)[1].split('"', 1)[0] if 'scope="' in line else ""
        out[scope] = out.get(scope, 0) + int(float(line.rsplit(" ", 1)[1]))
    return out


def test_a_runtime_cannot_read_another_runtime_s_watch_state(
    env: Env, listener: ListenerProcess
) -> None:
    a, b = filled(env, listener, 2), filled(env, listener, 2)
    for path in (f"watches/{META}/summary", f"watches/{META}/buckets/0"):
        with a.session() as s:  # a's certificate, b's runtime ID in the path
            r = s.get(f"{listener.url}/v1/runtimes/{b.id}/{path}", timeout=30)
        assert r.status_code == 403, r.text
        assert "items" not in r.json() and "hashes" not in r.json()
    # a Watch not in force for the runtime (its Kyma CR is not tier=gold), or none at all
    for name in (GOLD, "no-such-watch"):
        r = summary(listener, a, name)
        assert r.status_code == 404, r.text
        assert r.json()["details"]["reason"] == "watch_not_in_force"
        assert bucket(listener, a, name, 0).status_code == 404


def test_a_record_copied_outside_the_storage_namespace_is_not_counted(
    env: Env, listener: ListenerProcess
) -> None:
    rt = filled(env, listener, 2)
    wait_until(functools.partial(counted, listener, rt, 2), what="in the view", timeout=30)
    other = f"kws-x-{uuid.uuid4().hex[:6]}"
    core = client.CoreV1Api(env.api)
    controlplane.retry_busy(
        lambda: core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=other)))
    )
    co = client.CustomObjectsApi(env.api)
    res = apitypes.RUNTIME_CONFIGMAPS
    try:
        stored: Any = co.list_namespaced_custom_object(
            res.group,
            res.version,
            env.namespace,
            res.plural,
            label_selector=f"{apitypes.RUNTIME_ID_LABEL}={rt.id},{watches.WATCH_LABEL}={META}",
        )
        forged = copy.deepcopy(stored["items"][0])
        forged["metadata"] = {
            "name": "forged",
            "namespace": other,
            "labels": forged["metadata"]["labels"],
            "annotations": {**forged["metadata"]["annotations"], records.ANN_NAME: "x"},
        }
        co.create_namespaced_custom_object(res.group, res.version, other, res.plural, forged)
        probe = filled(env, listener, 1)  # written after the forged one: the view holds both
        wait_until(functools.partial(counted, listener, probe, 1), what="in the view", timeout=30)
        doc = summary(listener, rt, META).json()
        assert sum(doc["counts"]) == 2 and doc["hashes"] == expected(rt, 2)["hashes"]
    finally:
        core.delete_namespace(other)
