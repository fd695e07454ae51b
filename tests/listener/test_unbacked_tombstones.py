"""Tombstones of keys never stored (issue 38, item 4), against the real KCP plane.

A listener of its own (least-privilege user, the manifests' Roles) with a records quota of
4 and room for 3 unbacked tombstones (docs/listener.md, "Unbacked tombstones"). What the
listener may delete and where it may write: test_write_policy.py.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client

from listener.storage import records
from testing.listenercalls import post, running, state
from testing.listenerenv import (
    Env,
    ListenerProcess,
    add_runtime,
    metric_value,
    own_namespace,
    remove_namespace,
)
from tether.kube import apitypes

QUOTA_RECORDS = 4
UNBACKED = 3
RCM = apitypes.RUNTIME_CONFIGMAPS


@pytest.fixture(scope="module")
def env(listener_env: Env) -> Iterator[Env]:
    e = own_namespace(listener_env, "kub")
    yield e
    remove_namespace(e)


@pytest.fixture(scope="module")
def listener(env: Env) -> Iterator[ListenerProcess]:
    yield from running(
        env,
        "unbacked",
        TETHER_LISTENER_QUOTA_RECORDS=str(QUOTA_RECORDS),
        TETHER_LISTENER_UNBACKED_TOMBSTONES=str(UNBACKED),
    )


def objects(env: Env, rid: str, unbacked: bool) -> dict[str, dict[str, Any]]:
    """The runtime's stored objects by the runtime-side name they hold."""
    sel = f"{apitypes.RUNTIME_ID_LABEL}={rid}"
    resp: Any = client.CustomObjectsApi(env.api).list_namespaced_custom_object(
        RCM.group, RCM.version, env.namespace, RCM.plural, label_selector=sel
    )
    return {
        o["spec"]["name"]: o
        for o in resp["items"]
        if records.is_unbacked(o["metadata"]) == unbacked
    }


def outcome(r: Any) -> str:
    assert r.status_code == 200, r.text
    return str(r.json()["results"][0]["outcome"])


def test_tombstones_of_keys_never_stored_do_not_displace_the_runtimes_records(
    env: Env, listener: ListenerProcess
) -> None:
    rt = add_runtime(env, f"rt-{uuid.uuid4().hex[:10]}")
    # ten deletions of objects the runtime never had stored (a forger's, or races)
    for i in range(10):
        assert outcome(post(listener, rt, rt.record(f"g{i}", 100, deleted=True))) == "persisted"
    ghosts = objects(env, rt.id, unbacked=True)
    # never more than the cap (3): one past it, the oldest went, down to half the cap (2)
    assert sorted(ghosts) == ["g8", "g9"]
    assert objects(env, rt.id, unbacked=False) == {}
    assert (
        metric_value(listener.metrics(), "tether_listener_unbacked_tombstones_evicted_total") == 8
    )
    # the ordering rule still holds for a kept one: a late, older record is stale ...
    assert outcome(post(listener, rt, rt.record("g9", 50))) == "stale"
    # ... a newer one replaces it and is a record of the runtime's like any other
    assert outcome(post(listener, rt, rt.record("g9", 200))) == "persisted"
    assert "g9" in objects(env, rt.id, unbacked=False)
    # the whole records quota is the runtime's: 3 more new keys, then 413
    for i in range(QUOTA_RECORDS - 1):
        assert outcome(post(listener, rt, rt.record(f"k{i}", 10))) == "persisted"
    r = post(listener, rt, rt.record("one-too-many", 10))
    assert r.status_code == 413, r.text
    assert r.json()["details"]["used"]["records"] == QUOTA_RECORDS
    # the deletion of a stored record is an ordinary tombstone: it counts, as before
    assert outcome(post(listener, rt, rt.record("k0", 11, deleted=True))) == "persisted"
    assert not records.is_unbacked(objects(env, rt.id, unbacked=False)["k0"]["metadata"])
    assert post(listener, rt, rt.record("still-too-many", 10)).status_code == 413
    # no state digest names an unbacked tombstone
    items = state(listener, rt).json()["items"]
    assert sorted(i["name"] for i in items) == ["g9", "k0", "k1", "k2"]


def test_a_flood_of_deletions_keeps_the_cap_and_the_quota(
    env: Env, listener: ListenerProcess
) -> None:
    rt = add_runtime(env, f"rt-{uuid.uuid4().hex[:10]}")
    recs = [rt.record(f"flood-{i}", 100 + i, deleted=True) for i in range(60)]
    for start in range(0, len(recs), 20):  # batches, their records persisted concurrently
        r = post(listener, rt, *recs[start : start + 20])
        assert r.status_code == 200, r.text
    assert len(objects(env, rt.id, unbacked=True)) <= UNBACKED
    for i in range(QUOTA_RECORDS):
        assert outcome(post(listener, rt, rt.record(f"real-{i}", 10))) == "persisted"
