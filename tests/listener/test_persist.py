"""Persistence through the listener into the real KCP apiserver: outcomes, ordering,
tombstones, batches, the state digest and the heartbeat."""

from __future__ import annotations

import datetime
import json
from collections.abc import Callable
from typing import Any

from kubernetes import client

from listener.fleet import heartbeat
from listener.storage import records
from testing import listenerenv
from testing.listenerenv import ListenerProcess, Runtime, metric_value
from tether.base import times
from tether.kube import apitypes
from tether.wire import changes


def post(listener: ListenerProcess, rt: Runtime, body: Any) -> Any:
    return rt.session().post(f"{listener.url}/v1/runtimes/{rt.id}/changes", json=body, timeout=30)


def outcomes(resp: Any) -> list[str]:
    assert resp.status_code == 200, resp.text
    return [r["outcome"] for r in resp.json()["results"]]


def test_persisted_then_duplicate_then_stale(
    listener: ListenerProcess, runtime: Callable[..., Runtime]
) -> None:
    rt = runtime()
    env = rt.env
    assert outcomes(post(listener, rt, rt.record("app", 20, data={"k": "v20"}))) == ["persisted"]
    obj = env.stored_one(rt.id, "team-a", "app")
    assert obj is not None
    assert obj["spec"]["data"] == {"k": "v20"}
    assert obj["spec"]["resourceVersion"] == "20"
    assert obj["metadata"]["labels"][apitypes.RUNTIME_ID_LABEL] == rt.id
    written_rv = obj["metadata"]["resourceVersion"]

    assert outcomes(post(listener, rt, rt.record("app", 20, data={"k": "v20"}))) == ["duplicate"]
    assert outcomes(post(listener, rt, rt.record("app", 7, data={"k": "old"}))) == ["stale"]
    after = env.stored_one(rt.id, "team-a", "app")
    assert after is not None
    assert after["metadata"]["resourceVersion"] == written_rv  # no write happened
    assert after["spec"]["data"] == {"k": "v20"}

    assert outcomes(post(listener, rt, rt.record("app", 31, data={"k": "v31"}))) == ["persisted"]
    assert outcomes(post(listener, rt, rt.record("app", 40, deleted=True))) == ["persisted"]
    tomb = env.stored_one(rt.id, "team-a", "app")
    assert tomb is not None and tomb["spec"]["deleted"] is True
    assert "data" not in tomb["spec"]
    # a live record older than the tombstone is stale
    assert outcomes(post(listener, rt, rt.record("app", 35))) == ["stale"]


def test_batch_results_in_order_and_audited(
    listener: ListenerProcess, runtime: Callable[..., Runtime]
) -> None:
    rt = runtime()
    items = [
        rt.record("a", 10),
        rt.record("b", 11),
        rt.record("a", 9),
        rt.record("a", 10),
        rt.record("c", 12, ns="team-b", deleted=True),
    ]
    resp = post(listener, rt, changes.batch(items))  # type: ignore[arg-type]
    assert outcomes(resp) == ["persisted", "persisted", "stale", "duplicate", "persisted"]
    assert [(r["namespace"], r["name"], r["resourceVersion"]) for r in resp.json()["results"]] == [
        (i["namespace"], i["name"], i["resourceVersion"]) for i in items
    ]
    assert len(rt.env.stored(rt.id)) == 3
    events = [e for e in listener.audit() if e.get("event") == "change" and e["runtime"] == rt.id]
    assert [e["outcome"] for e in events] == [
        "persisted",
        "persisted",
        "stale",
        "duplicate",
        "persisted",
    ]
    assert all("data" not in e for e in events)


def test_non_numeric_resource_versions_fall_back_to_observed_at(
    listener: ListenerProcess, runtime: Callable[..., Runtime]
) -> None:
    rt = runtime()
    # within the tombstone retention of now (a fixed date ages out of it: stale)
    now = datetime.datetime.now(datetime.UTC).replace(microsecond=0)
    t1 = times.format_time(now - datetime.timedelta(minutes=1) + datetime.timedelta(microseconds=1))
    t2 = times.format_time(now - datetime.timedelta(seconds=59))
    assert outcomes(post(listener, rt, rt.record("x", "abc", observed_at=t2))) == ["persisted"]
    assert outcomes(post(listener, rt, rt.record("x", "abd", observed_at=t1))) == ["stale"]


def test_full_one_mib_configmap_is_accepted(
    listener: ListenerProcess, runtime: Callable[..., Runtime]
) -> None:
    rt = runtime()
    value = "x" * (1024 * 1024 - 10)
    rec = rt.record("big", 5, data={"payload": value})
    assert len(json.dumps(rec)) > 1024 * 1024
    assert outcomes(post(listener, rt, rec)) == ["persisted"]
    obj = rt.env.stored_one(rt.id, "team-a", "big")
    assert obj is not None and len(obj["spec"]["data"]["payload"]) == len(value)


def test_state_digest_is_ordered_paginated_and_a_heartbeat(
    listener: ListenerProcess, runtime: Callable[..., Runtime]
) -> None:
    rt = runtime()
    other = runtime()
    items = [rt.record(f"cm-{i:02d}", 100 + i, ns=ns) for i in range(7) for ns in ("b-ns", "a-ns")]
    # stored, then deleted: a tombstone of a stored key is in the digest (one of a key never
    # stored is not: tests/listener/test_unbacked_tombstones.py)
    assert outcomes(post(listener, rt, rt.record("gone", 150, ns="a-ns"))) == ["persisted"]
    items.append(rt.record("gone", 200, ns="a-ns", deleted=True))
    assert set(outcomes(post(listener, rt, changes.batch(items)))) == {"persisted"}  # type: ignore[arg-type]
    assert outcomes(post(listener, other, other.record("cm-00", 1, ns="a-ns"))) == ["persisted"]

    s = rt.session()
    got: list[dict[str, Any]] = []
    token = ""
    pages = 0
    while True:
        r = s.get(
            f"{listener.url}/v1/runtimes/{rt.id}/state",
            params={"limit": 4, "continue": token},
            timeout=30,
        )
        assert r.status_code == 200, r.text
        body = r.json()
        assert len(body["items"]) <= 4
        got += body["items"]
        pages += 1
        token = body["continue"]
        if not token:
            break
    assert pages == 4
    keys = [(i["namespace"], i["name"]) for i in got]
    assert keys == sorted(keys) and len(keys) == 15
    by_key = {(i["namespace"], i["name"]): i for i in got}
    assert by_key[("a-ns", "gone")]["deleted"] is True
    assert by_key[("b-ns", "cm-03")] == {
        "namespace": "b-ns",
        "name": "cm-03",
        "uid": "u-cm-03",
        "resourceVersion": "103",
        "observedAt": next(
            i["observedAt"] for i in items if i["name"] == "cm-03" and i["namespace"] == "b-ns"
        ),
        "deleted": False,
        "epoch": 0,
    }

    lease: Any = client.CoordinationV1Api(rt.env.api).read_namespaced_lease(
        heartbeat.lease_name(rt.id), rt.env.namespace
    )
    first = lease.spec.renew_time
    assert lease.spec.holder_identity == rt.id
    r = s.get(f"{listener.url}/v1/runtimes/{rt.id}/state", timeout=30)
    assert r.status_code == 200
    lease = client.CoordinationV1Api(rt.env.api).read_namespaced_lease(
        heartbeat.lease_name(rt.id), rt.env.namespace
    )
    assert lease.spec.renew_time > first  # interval 0 in this listener: every call writes


def test_state_rejects_bad_query(
    listener: ListenerProcess, runtime: Callable[..., Runtime]
) -> None:
    rt = runtime()
    s = rt.session()
    for params in (
        {"limit": "0"},
        {"limit": "5001"},
        {"limit": "x"},
        {"continue": "%%%"},
        {"continue": "WyJhIl0"},
    ):
        r = s.get(f"{listener.url}/v1/runtimes/{rt.id}/state", params=params, timeout=30)
        assert r.status_code == 400, (params, r.text)
        assert r.json()["error"] == "invalid query"


def test_updates_after_foreign_writes_and_deletion(
    listener: ListenerProcess, runtime: Callable[..., Runtime]
) -> None:
    """The worker remembers what it wrote (to skip the read before the next update); a
    consumer's write in between or a deletion must not be lost or overwritten."""
    rt = runtime()
    env = rt.env
    objects = client.CustomObjectsApi(env.api)
    before = metric_value(
        listener.metrics(), "tether_listener_write_conflicts_total", path="cached"
    )
    assert outcomes(post(listener, rt, rt.record("w", 10))) == ["persisted"]
    name = records.object_name(records.Key(rt.id, listenerenv.COMPAT_WATCH, "team-a", "w"))
    objects.patch_namespaced_custom_object(
        apitypes.RUNTIME_CONFIGMAPS.group,
        apitypes.RUNTIME_CONFIGMAPS.version,
        env.namespace,
        apitypes.RUNTIME_CONFIGMAPS.plural,
        name,
        {"metadata": {"labels": {"consumer": "seen"}, "finalizers": ["consumer.example/hold"]}},
        _content_type="application/merge-patch+json",
    )
    assert outcomes(post(listener, rt, rt.record("w", 11))) == ["persisted"]
    obj = env.stored_one(rt.id, "team-a", "w")
    assert obj is not None and obj["spec"]["resourceVersion"] == "11"
    assert obj["metadata"]["labels"]["consumer"] == "seen"
    assert obj["metadata"]["finalizers"] == ["consumer.example/hold"]
    objects.patch_namespaced_custom_object(
        apitypes.RUNTIME_CONFIGMAPS.group,
        apitypes.RUNTIME_CONFIGMAPS.version,
        env.namespace,
        apitypes.RUNTIME_CONFIGMAPS.plural,
        name,
        {"metadata": {"finalizers": None}},
        _content_type="application/merge-patch+json",
    )
    objects.delete_namespaced_custom_object(
        apitypes.RUNTIME_CONFIGMAPS.group,
        apitypes.RUNTIME_CONFIGMAPS.version,
        env.namespace,
        apitypes.RUNTIME_CONFIGMAPS.plural,
        name,
    )
    assert env.stored_one(rt.id, "team-a", "w") is None
    assert outcomes(post(listener, rt, rt.record("w", 12))) == ["persisted"]
    obj = env.stored_one(rt.id, "team-a", "w")
    assert obj is not None and obj["spec"]["resourceVersion"] == "12"
    # the same record again is a duplicate, decided by reading the stored object
    assert outcomes(post(listener, rt, rt.record("w", 12))) == ["duplicate"]
    # both foreign changes were noticed by the write without a read (409, then 404)
    after = metric_value(listener.metrics(), "tether_listener_write_conflicts_total", path="cached")
    assert after == before + 2
