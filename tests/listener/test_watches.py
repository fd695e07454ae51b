"""The listener enforces the Watches (issue 24, items 3 and 4), against the real KCP plane.

A listener of its own in a KCP namespace of its own, holding the every-ConfigMap Watch
(``watchenv.all_configmaps``: the compat Watch of v1 records) and these Watches:

* ``zz-gold``: ConfigMaps, ``full``, only in runtimes whose Kyma CR is labelled tier=gold;
* ``meta-only``: ConfigMaps, ``metadata``;
* ``digests``: Secrets, ``digest``;
* ``widgets``: a custom resource (example.com/v1 Widget), only where the module widgets is
  enabled in the Kyma CR.

A second namespace without a compat Watch shows v1 records refused. The janitor runs once
(``tether janitor --once``) to show legacy records removed.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import datetime
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kubernetes import client

from listener.fleet import heartbeat, watchlist
from listener.storage import records
from testing import loopenv as loop
from testing import watchenv
from testing.listenercalls import post, running, state
from testing.listenerenv import (
    COMPAT_WATCH,
    Env,
    ListenerProcess,
    Runtime,
    add_runtime,
    metric_value,
    own_namespace,
    remove_namespace,
)
from tether.base import times
from tether.kube import apitypes, gateway
from tether.wire import changes, watches

pytestmark = pytest.mark.processes
CM = {"group": "", "version": "v1", "resource": "configmaps", "kind": "ConfigMap"}
SECRET = {"group": "", "version": "v1", "resource": "secrets", "kind": "Secret"}
WIDGET = {"group": "example.com", "version": "v1", "resource": "widgets", "kind": "Widget"}
SECRET_VALUE = "c2VjcmV0LXZhbHVlLTQy"  # base64 of a value that must never be stored


def _watches(ns: str) -> list[dict[str, Any]]:
    return [
        watchenv.watch("zz-gold", CM, ns, runtimes={"selector": {"matchLabels": {"tier": "gold"}}}),
        watchenv.watch("meta-only", CM, ns, send={"mode": "metadata"}),
        watchenv.watch("digests", SECRET, ns, send={"mode": "digest"}),
        watchenv.watch("widgets", WIDGET, ns, runtimes={"module": "widgets"}),
    ]


@pytest.fixture(scope="module")
def env(listener_env: Env) -> Iterator[Env]:
    e = own_namespace(listener_env, "kw")
    for body in _watches(e.namespace):
        watchenv.apply(e.api, body)
    yield e
    remove_namespace(e)


@pytest.fixture(scope="module")
def listener(env: Env) -> Iterator[ListenerProcess]:
    yield from running(env, "watches")


def runtime(
    env: Env, *, labels: dict[str, str] | None = None, modules: tuple[str, ...] = ()
) -> Runtime:
    rt = add_runtime(env, f"rt-{uuid.uuid4().hex[:12]}")
    if labels or modules:
        co = client.CustomObjectsApi(env.api)
        name = f"kyma-{rt.id.lower()}"[:60]
        co.patch_namespaced_custom_object(
            apitypes.KYMAS.group,
            apitypes.KYMAS.version,
            env.namespace,
            apitypes.KYMAS.plural,
            name,
            {
                "metadata": {"labels": labels or {}},
                "spec": {"modules": [{"name": m} for m in modules]},
            },
        )
    return rt


def watch(name: str, ns: str) -> watches.Watch:
    """The Watch as the listener parses it."""
    return watches.parse(
        next(
            w
            for w in _watches(ns) + [watchenv.load(watchenv.ALL_CONFIGMAPS, ns)]
            if w["metadata"]["name"] == name
        )
    )


def obj(name: str, rv: int, kind: str = "ConfigMap", **fields: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": kind,
        "metadata": {
            "namespace": "team-a",
            "name": name,
            "uid": "u-" + name,
            "resourceVersion": str(rv),
            "labels": {"app": "x"},
        },
        **fields,
    }


def v2(rt: Runtime, w: watches.Watch, o: dict[str, Any]) -> dict[str, Any]:
    return dict(changes.from_object(o, watch=w, runtime_id=rt.id, source="webhook"))


def refusals(p: ListenerProcess, reason: str) -> float:
    return metric_value(p.metrics(), "tether_listener_watch_refusals_total", reason=reason)


def test_a_v2_record_of_a_watch_in_force_is_stored_under_its_watch(
    env: Env, listener: ListenerProcess
) -> None:
    rt = runtime(env, labels={"tier": "gold"}, modules=("widgets",))
    widget = obj("w1", 5, kind="Widget", spec={"size": 3}, status={"ready": True})
    widget["apiVersion"] = "example.com/v1"
    cm = obj("c1", 7, data={"k": "v"})
    r = post(
        listener,
        rt,
        v2(rt, watch("widgets", env.namespace), widget),
        v2(rt, watch("zz-gold", env.namespace), cm),
    )
    assert r.status_code == 200, r.text
    assert [i["outcome"] for i in r.json()["results"]] == ["persisted"] * 2
    assert post(listener, rt, rt.record("c1", 7)).status_code == 200  # v1
    stored = env.stored_one(rt.id, "team-a", "w1", watch="widgets")
    assert stored is not None
    assert stored["metadata"]["labels"][watches.WATCH_LABEL] == "widgets"
    assert stored["spec"]["watch"] == "widgets"
    assert stored["spec"]["resource"] == {"group": "example.com", "version": "v1", "kind": "Widget"}
    assert stored["spec"]["data"]["status"] == '{"ready":true}'
    # one object under two Watches: two records, each under its own
    gold = env.stored_one(rt.id, "team-a", "c1", watch="zz-gold")
    compat = env.stored_one(rt.id, "team-a", "c1")
    assert gold is not None and compat is not None
    assert gold["metadata"]["name"] != compat["metadata"]["name"]
    assert compat["spec"]["watch"] == COMPAT_WATCH
    assert compat["spec"]["resource"] == watches.CONFIGMAP.gvk()
    assert compat["metadata"]["labels"][watches.WATCH_LABEL] == COMPAT_WATCH


def test_a_record_of_a_watch_not_in_force_is_refused_and_not_stored(
    env: Env, listener: ListenerProcess
) -> None:
    rt = runtime(env)  # neither tier=gold nor the module widgets
    before = refusals(listener, "watch_not_in_force")
    widget = obj("w2", 5, kind="Widget", spec={"size": 1})
    for w in ("widgets", "zz-gold", "no-such-watch"):
        rec = v2(
            rt,
            watch("widgets" if w == "no-such-watch" else w, env.namespace),
            widget if w != "zz-gold" else obj("c2", 5, data={"k": "v"}),
        )
        rec["watch"] = w
        fine = v2(rt, watch(COMPAT_WATCH, env.namespace), obj("fine", 1, data={}))
        r = post(listener, rt, fine, rec)
        assert r.status_code == 403, r.text
        body = r.json()
        assert body["details"]["reason"] == "watch_not_in_force"
        assert body["details"]["records"] == [
            {
                "path": "$.items[1]",
                "reason": "watch_not_in_force",
                "message": f"the watch {w} is not in force for this runtime",
            }
        ]
    assert refusals(listener, "watch_not_in_force") == before + 3
    assert env.stored(rt.id) == []  # the batch's admitted record neither
    audit = [a for a in listener.audit() if a.get("runtime") == rt.id and a["event"] == "refused"]
    assert len(audit) == 3 and audit[0]["reasons"] == {"watch_not_in_force": 1}
    # the runtime's RuntimeDelivery names the last refused object of the reason
    deadline = time.monotonic() + 60
    while True:
        assert state(listener, rt).status_code == 200  # a request: its counts are merged
        try:
            got = client.CustomObjectsApi(env.api).get_namespaced_custom_object(
                apitypes.RUNTIME_DELIVERIES.group,
                apitypes.RUNTIME_DELIVERIES.version,
                env.namespace,
                apitypes.RUNTIME_DELIVERIES.plural,
                heartbeat.lease_name(rt.id),
            )
        except client.ApiException as e:
            assert e.status == 404
            got = {}
        last = ((got.get("status") or {}).get("lastRefused") or {}).get("watch_not_in_force")
        if last:
            break
        assert time.monotonic() < deadline, "lastRefused never named the refusal"
        time.sleep(0.3)
    assert last["name"] in ("w2", "c2") and last["status"] == 403, last


def test_a_metadata_watch_refuses_a_record_that_carries_values(
    env: Env, listener: ListenerProcess
) -> None:
    rt = runtime(env)
    before = refusals(listener, "watch_violation")
    rec = v2(rt, watch(COMPAT_WATCH, env.namespace), obj("m1", 3, data={"token": "t0ps3cret"}))
    rec["watch"] = "meta-only"
    r = post(listener, rt, rec)
    assert r.status_code == 403, r.text
    assert r.json()["details"]["reason"] == "watch_violation"
    assert "metadata only" in r.json()["details"]["message"]
    assert "t0ps3cret" not in r.text
    assert env.stored_one(rt.id, "team-a", "m1", watch="meta-only") is None
    assert refusals(listener, "watch_violation") == before + 1
    ok = v2(rt, watch("meta-only", env.namespace), obj("m1", 3, data={"token": "t0ps3cret"}))
    assert post(listener, rt, ok).status_code == 200
    stored = env.stored_one(rt.id, "team-a", "m1", watch="meta-only")
    assert stored is not None and not stored["spec"].get("data")


def test_a_digest_watch_refuses_a_value_that_is_not_a_digest(
    env: Env, listener: ListenerProcess
) -> None:
    rt = runtime(env)
    secret = obj("s1", 4, kind="Secret", data={"password": SECRET_VALUE})
    rec = v2(rt, watch("digests", env.namespace), secret)
    plain = dict(rec, data={"password": SECRET_VALUE})
    r = post(listener, rt, plain)
    assert r.status_code == 403, r.text
    assert r.json()["details"]["reason"] == "watch_violation"
    assert "digests only" in r.json()["details"]["message"] and SECRET_VALUE not in r.text
    assert env.stored_one(rt.id, "team-a", "s1", watch="digests") is None
    assert post(listener, rt, rec).status_code == 200
    stored = env.stored_one(rt.id, "team-a", "s1", watch="digests")
    assert stored is not None and stored["spec"]["data"]["password"].startswith("sha256:")
    assert SECRET_VALUE not in str(stored)
    # this release takes the keyed shape too (a runtime with its digest key, docs/watches.md)
    keyed = v2(
        rt,
        dataclasses.replace(watch("digests", env.namespace), digest_key=b"k" * 32),
        obj("s2", 5, kind="Secret", data={"password": SECRET_VALUE}),
    )
    assert post(listener, rt, keyed).status_code == 200
    stored = env.stored_one(rt.id, "team-a", "s2", watch="digests")
    assert stored is not None and stored["spec"]["data"]["password"].startswith("hmac-sha256:")


def test_v1_records_are_stored_under_the_compat_watch_and_refused_without_one(
    env: Env, listener: ListenerProcess
) -> None:
    rt = runtime(env)
    r = post(listener, rt, rt.record("v1-a", 2))
    assert r.status_code == 200, r.text
    stored = env.stored_one(rt.id, "team-a", "v1-a")
    assert stored is not None and stored["spec"]["watch"] == COMPAT_WATCH
    # a v1 record its compat Watch does not cover: the system namespaces never are
    r = post(listener, rt, rt.record("v1-b", 2, ns="kube-system"))
    assert r.status_code == 403 and r.json()["details"]["reason"] == "watch_violation"
    bare = own_namespace(env, "kwn")  # holds only the every-ConfigMap Watch: remove it
    try:
        watchenv.delete(bare.api, bare.namespace, COMPAT_WATCH)
        watchenv.apply(
            bare.api, watchenv.watch("meta-only", CM, bare.namespace, send={"mode": "metadata"})
        )
        p = ListenerProcess(bare, "no-compat", TETHER_LISTENER_HEARTBEAT_INTERVAL_SECONDS="0")
        try:
            rt2 = add_runtime(bare, f"rt-{uuid.uuid4().hex[:12]}")
            before = refusals(p, "no_compat_watch")
            r = post(p, rt2, rt2.record("v1-c", 2))
            assert r.status_code == 403, r.text
            assert r.json()["details"]["reason"] == "no_compat_watch"
            assert refusals(p, "no_compat_watch") == before + 1
            assert bare.stored(rt2.id) == []
            r = state(p, rt2)  # nor is there a compat Watch's state
            assert r.status_code == 404 and r.json()["details"]["reason"] == "no_compat_watch"
        finally:
            p.stop()
    finally:
        remove_namespace(bare)


def test_the_state_listing_is_per_watch(env: Env, listener: ListenerProcess) -> None:
    rt = runtime(env, labels={"tier": "gold"})
    assert post(listener, rt, rt.record("only-compat", 3)).status_code == 200
    assert (
        post(
            listener,
            rt,
            v2(rt, watch("zz-gold", env.namespace), obj("only-gold", 4, data={"a": "b"})),
        ).status_code
        == 200
    )
    r = state(listener, rt)
    assert r.status_code == 200, r.text
    assert [i["name"] for i in r.json()["items"]] == ["only-compat"]
    r = state(listener, rt, watch="zz-gold")
    assert [(i["name"], i["resourceVersion"]) for i in r.json()["items"]] == [("only-gold", "4")]
    for name in ("widgets", "nope"):  # not in force for this runtime; no such Watch
        r = state(listener, rt, watch=name)
        assert r.status_code == 404, r.text
        assert r.json()["details"] == {
            "reason": "watch_not_in_force",
            "message": f"the watch {name} is not in force for this runtime",
        }


def legacy_record(env: Env, rt: Runtime, name: str) -> str:
    """A record as the listener stored it before Watches: no Watch label, no spec.watch."""
    rec = rt.record(name, 1)
    body = records.body(rec, env.namespace)
    body["metadata"]["labels"].pop(watches.WATCH_LABEL)
    body["metadata"]["name"] = records.object_name(records.Key(rt.id, "", "team-a", name))
    client.CustomObjectsApi(env.api).create_namespaced_custom_object(
        apitypes.RUNTIME_CONFIGMAPS.group,
        apitypes.RUNTIME_CONFIGMAPS.version,
        env.namespace,
        apitypes.RUNTIME_CONFIGMAPS.plural,
        body,
    )
    return str(body["metadata"]["name"])


def test_the_janitor_deletes_legacy_records_once_records_under_watches_exist(
    env: Env, listener: ListenerProcess
) -> None:
    upgraded, waiting = runtime(env), runtime(env)
    gone = legacy_record(env, upgraded, "old")
    kept = legacy_record(env, waiting, "old")
    assert post(listener, upgraded, upgraded.record("old", 2)).status_code == 200
    loop.janitor_once(env)
    names = {o["metadata"]["name"] for o in env.stored(upgraded.id)}
    assert gone not in names and env.stored_one(upgraded.id, "team-a", "old") is not None
    # a runtime that has not delivered since the upgrade keeps what it had
    assert [o["metadata"]["name"] for o in env.stored(waiting.id)] == [kept]


def test_the_janitor_deletes_the_records_of_a_deleted_watch_after_the_retention(
    env: Env, listener: ListenerProcess
) -> None:
    rt = runtime(env)
    temp = watchenv.watch("temp", CM, env.namespace)
    watchenv.apply(env.api, temp)
    w = watches.parse(temp)
    old_at = times.format_time(datetime.datetime.now(datetime.UTC) - datetime.timedelta(minutes=5))
    recs = [
        dict(
            changes.from_object(
                obj("t-old", 3, data={"a": "b"}),
                watch=w,
                runtime_id=rt.id,
                source="poller",
                observed_at=old_at,
            )
        ),
        v2(rt, w, obj("t-new", 4, data={"a": "b"})),
    ]
    deadline = time.monotonic() + 30
    while (r := post(listener, rt, *recs)).status_code == 403:  # the listener's cache: 5 s
        assert time.monotonic() < deadline, r.text
        time.sleep(0.5)
    assert r.status_code == 200, r.text
    assert post(listener, rt, rt.record("t-old", 3)).status_code == 200  # the compat Watch's
    watchenv.delete(env.api, env.namespace, "temp")
    loop.janitor_once(env, TETHER_LISTENER_TOMBSTONE_RETENTION_SECONDS="120")
    assert env.stored_one(rt.id, "team-a", "t-old", watch="temp") is None
    assert env.stored_one(rt.id, "team-a", "t-new", watch="temp") is not None  # not yet
    assert env.stored_one(rt.id, "team-a", "t-old") is not None  # its Watch exists


def test_an_unreadable_watch_list_is_503_not_403(env: Env, listener_env: Env) -> None:
    """A namespace where the listener may not list Watches (its Role without them): the
    record is not refused, the runtime retries."""
    e = own_namespace(listener_env, "kwr")
    try:
        rbac = client.RbacAuthorizationV1Api(e.api)
        role = rbac.read_namespaced_role("tether-listener", e.namespace)
        role.rules = [r for r in role.rules or [] if "watches" not in (r.resources or [])]
        rbac.replace_namespaced_role("tether-listener", e.namespace, role)
        time.sleep(0.5)
        p = ListenerProcess(e, "no-watches", TETHER_LISTENER_HEARTBEAT_INTERVAL_SECONDS="0")
        try:
            rt = add_runtime(e, f"rt-{uuid.uuid4().hex[:12]}")
            r = post(p, rt, rt.record("a", 1))
            assert r.status_code == 503, r.text
            assert r.headers.get("Retry-After") and e.stored(rt.id) == []
        finally:
            p.stop()
    finally:
        remove_namespace(e)


def test_the_watch_list_keeps_the_last_read_and_skips_bad_watches(listener_env: Env) -> None:
    """``WatchList`` over the listener's own user: a Watch that cannot be parsed is left out;
    once read, a list the KCP refuses (the Role lost the Watches) keeps the last one."""
    e = own_namespace(listener_env, "kwl")
    try:
        bad = watchenv.watch("keys-without-keys", CM, e.namespace, send={"mode": "keys"})
        watchenv.apply(e.api, bad)
        wl = watchlist.WatchList(
            gateway.from_kubeconfig(str(e.kubeconfig)), e.namespace, ttl=0, timeout=20
        )
        assert [w.name for w in wl.current()] == [COMPAT_WATCH]
        rbac = client.RbacAuthorizationV1Api(e.api)
        role = rbac.read_namespaced_role("tether-listener", e.namespace)
        role.rules = [r for r in role.rules or [] if "watches" not in (r.resources or [])]
        rbac.replace_namespaced_role("tether-listener", e.namespace, role)
        fresh = watchlist.WatchList(
            gateway.from_kubeconfig(str(e.kubeconfig)), e.namespace, ttl=0, timeout=20
        )
        deadline = time.monotonic() + 30
        while True:  # the authorizer's cache: until the new Role is in force
            try:
                fresh.current()
            except gateway.Forbidden:
                break
            assert time.monotonic() < deadline, "the Role change never took effect"
            time.sleep(0.2)
        assert [w.name for w in wl.current()] == [COMPAT_WATCH]  # the last list read
    finally:
        remove_namespace(e)


@pytest.mark.parametrize("mutate", [lambda r: r.update(watch="widgets")])
def test_a_v2_record_of_another_kind_than_its_watch_is_refused(
    env: Env, listener: ListenerProcess, mutate: Callable[[dict[str, Any]], None]
) -> None:
    rt = runtime(env, modules=("widgets",))
    rec = v2(rt, watch("zz-gold", env.namespace), obj("k1", 1, data={"a": "b"}))
    mutate(rec)  # a ConfigMap record named for the Widget Watch
    r = post(listener, rt, rec)
    assert r.status_code == 403 and r.json()["details"]["reason"] == "watch_violation"
    assert "covers Widget example.com/v1" in r.json()["details"]["message"]


def test_a_watch_named_before_the_list_expires_is_read_at_once_at_most_each_second(
    listener_env: Env,
) -> None:
    """A Watch created after the worker's last read (the runtime's list is ahead) is found
    by the request that names it, without waiting for the cache's ttl; made-up names force
    at most one read per REFRESH_FLOOR."""
    e = own_namespace(listener_env, "kwr")
    now = [100.0]
    try:
        wl = watchlist.WatchList(
            gateway.from_kubeconfig(str(e.kubeconfig)),
            e.namespace,
            ttl=60,
            timeout=20,
            clock=lambda: now[0],
        )
        assert [w.name for w in wl.current()] == [COMPAT_WATCH]
        watchenv.apply(e.api, watchenv.watch("fresh", CM, e.namespace))
        now[0] += 0.5  # within the floor: not read again, whatever is asked for
        assert [w.name for w in wl.current(["fresh"])] == [COMPAT_WATCH]
        now[0] += 1.0
        assert [w.name for w in wl.current()] == [COMPAT_WATCH]  # nothing missing: the ttl holds
        assert [w.name for w in wl.current(["fresh"])] == [COMPAT_WATCH, "fresh"]
        watchenv.apply(e.api, watchenv.watch("later", CM, e.namespace))
        assert "later" not in [w.name for w in wl.current(["made-up"])]  # just read: the floor
    finally:
        remove_namespace(e)


def test_threads_that_find_the_list_due_at_once_wait_for_one_read(listener_env: Env) -> None:
    """A worker's threads whose cache expired together (request threads and persist lanes)
    cost the KCP one list of Watches, not one each: the others wait for the read under way
    and take its result (before: 8 lists, one per thread)."""
    e = own_namespace(listener_env, "kwo")
    kcp = gateway.from_kubeconfig(str(e.kubeconfig))
    release, reads = threading.Event(), []
    real = kcp.list_items

    def held(*args: Any, **kwargs: Any) -> Iterator[dict[str, Any]]:
        reads.append(1)
        assert release.wait(30), "the test never released the read"
        return real(*args, **kwargs)

    try:
        kcp.list_items = held  # type: ignore[method-assign]  # the real call, held and counted
        wl = watchlist.WatchList(kcp, e.namespace, ttl=60, timeout=20)
        with concurrent.futures.ThreadPoolExecutor(8) as pool:
            answers = [pool.submit(wl.current) for _ in range(8)]
            deadline = time.monotonic() + 30
            while not reads and time.monotonic() < deadline:
                time.sleep(0.01)
            time.sleep(0.5)  # the other threads find the list due meanwhile
            release.set()
            names = [[w.name for w in f.result(timeout=60)] for f in answers]
        assert reads == [1] and names == [[COMPAT_WATCH]] * 8
    finally:
        release.set()
        kcp.close()
        remove_namespace(e)
