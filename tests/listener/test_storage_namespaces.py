"""Records in their Watch's storage namespace (issue 25), against the real KCP plane.

A listener of its own in a KCP namespace of its own (``env.namespace``, where the Kyma CRs
and the compat Watch live) and two storage namespaces: the Watch ``store-a`` stores in A,
``store-b`` in B (docs/watches.md, "Where records are stored and who can read them").
Checked: where records land and how they are labelled and owned, that a listing keeps only
objects where their Watch stores, a missing storage namespace (503), the janitor removing a
deleted Kyma CR's records in every namespace, a reader bound to A's Role (the manifests'
``tether-records-reader``) reading A and not B, and the CEL rule that keeps spec.storage.
"""

from __future__ import annotations

import copy
import datetime
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import yaml
from kubernetes import client

from listener.storage import records
from testing import controlplane, watchenv
from testing import loopenv as loop
from testing.listenercalls import post, running
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
from tether.wire import changes, statehash, watches

CM = {"group": "", "version": "v1", "resource": "configmaps", "kind": "ConfigMap"}
RCM = apitypes.RUNTIME_CONFIGMAPS
READER_ROLE = controlplane.REPO_ROOT / "manifests" / "kcp" / "watches" / "records.yaml"


class Spaces:
    def __init__(self, env: Env) -> None:
        tag = uuid.uuid4().hex[:6]
        self.env, self.a, self.b, self.missing = env, f"ksa-{tag}", f"ksb-{tag}", f"ksm-{tag}"


def _create_namespace(api: client.ApiClient, name: str) -> None:
    core = client.CoreV1Api(api)
    controlplane.retry_busy(
        lambda: core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
    )


@pytest.fixture(scope="module")
def spaces(listener_env: Env) -> Iterator[Spaces]:
    e = own_namespace(listener_env, "ksn")
    s = Spaces(e)
    for ns in (s.a, s.b):
        _create_namespace(e.api, ns)
    for name, ns in (("store-a", s.a), ("store-b", s.b), ("store-missing", s.missing)):
        watchenv.apply(e.api, watchenv.watch(name, CM, e.namespace, storage={"namespace": ns}))
    yield s
    core = client.CoreV1Api(e.api)
    for ns in (s.a, s.b, s.missing):
        try:
            client.CustomObjectsApi(e.api).delete_collection_namespaced_custom_object(
                RCM.group, RCM.version, ns, RCM.plural
            )
            core.delete_namespace(ns)
        except client.ApiException as err:
            if err.status != 404:
                raise
    remove_namespace(e)


@pytest.fixture(scope="module")
def listener(spaces: Spaces) -> Iterator[ListenerProcess]:
    yield from running(spaces.env, "spaces")


def watch_of(spaces: Spaces, name: str) -> watches.Watch:
    co = client.CustomObjectsApi(spaces.env.api)
    body: Any = co.get_namespaced_custom_object(
        apitypes.WATCHES.group,
        apitypes.WATCHES.version,
        spaces.env.namespace,
        apitypes.WATCHES.plural,
        name,
    )
    return watches.parse(body)


def record(rt: Runtime, w: watches.Watch, name: str, rv: int) -> dict[str, Any]:
    o = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "data": {"k": name},
        "metadata": {
            "namespace": "team-a",
            "name": name,
            "uid": "u-" + name,
            "resourceVersion": str(rv),
        },
    }
    return dict(changes.from_object(o, watch=w, runtime_id=rt.id, source="webhook"))


def get(p: ListenerProcess, rt: Runtime, path: str, **query: str) -> dict[str, Any]:
    with rt.session() as s:
        r = s.get(f"{p.url}/v1/runtimes/{rt.id}/{path}", params=query, timeout=60)
    assert r.status_code == 200, r.text
    out: dict[str, Any] = r.json()
    return out


def stored(api: client.ApiClient, ns: str, runtime_id: str) -> list[dict[str, Any]]:
    resp: Any = client.CustomObjectsApi(api).list_namespaced_custom_object(
        RCM.group,
        RCM.version,
        ns,
        RCM.plural,
        label_selector=f"{apitypes.RUNTIME_ID_LABEL}={runtime_id}",
    )
    return list(resp["items"])


def kyma_of(env: Env, rt: Runtime) -> dict[str, Any]:
    obj: Any = client.CustomObjectsApi(env.api).get_namespaced_custom_object(
        apitypes.KYMAS.group,
        apitypes.KYMAS.version,
        env.namespace,
        apitypes.KYMAS.plural,
        f"kyma-{rt.id.lower()}"[:60],
    )
    return dict(obj)


def test_records_land_in_their_watchs_namespace_labelled_and_owned_where_the_kyma_cr_is(
    spaces: Spaces, listener: ListenerProcess
) -> None:
    env = spaces.env
    rt = add_runtime(env, f"rt-{uuid.uuid4().hex[:12]}")
    kyma = kyma_of(env, rt)
    r = post(
        listener,
        rt,
        record(rt, watch_of(spaces, "store-a"), "in-a", 5),
        record(rt, watch_of(spaces, "store-b"), "in-b", 6),
    )
    assert r.status_code == 200, r.text
    assert post(listener, rt, rt.record("compat", 7)).status_code == 200  # v1: the compat Watch's
    (in_a,), (in_b,) = stored(env.api, spaces.a, rt.id), stored(env.api, spaces.b, rt.id)
    (compat,) = stored(env.api, env.namespace, rt.id)
    for obj, w in ((in_a, "store-a"), (in_b, "store-b"), (compat, COMPAT_WATCH)):
        labels = obj["metadata"]["labels"]
        assert labels[apitypes.KYMA_NAME_LABEL] == kyma["metadata"]["name"]
        assert labels[apitypes.RUNTIME_ID_LABEL] == rt.id and labels[watches.WATCH_LABEL] == w
    assert in_a["spec"]["name"] == "in-a" and in_b["spec"]["name"] == "in-b"
    # owned by the Kyma CR only in its namespace (an owner reference crosses no namespace)
    assert "ownerReferences" not in in_a["metadata"] and "ownerReferences" not in in_b["metadata"]
    assert compat["metadata"]["ownerReferences"] == [
        {
            "apiVersion": apitypes.KYMAS.api_version,
            "kind": "Kyma",
            "name": kyma["metadata"]["name"],
            "uid": kyma["metadata"]["uid"],
            "controller": False,
        }
    ]
    # an update keeps an owner reference someone else added, and ours
    other = {"apiVersion": "v1", "kind": "ConfigMap", "name": "someone", "uid": str(uuid.uuid4())}
    client.CustomObjectsApi(env.api).patch_namespaced_custom_object(
        RCM.group,
        RCM.version,
        env.namespace,
        RCM.plural,
        compat["metadata"]["name"],
        {"metadata": {"ownerReferences": [*compat["metadata"]["ownerReferences"], other]}},
    )
    assert post(listener, rt, rt.record("compat", 8)).status_code == 200
    (compat,) = stored(env.api, env.namespace, rt.id)
    assert compat["spec"]["resourceVersion"] == "8"
    assert [o["name"] for o in compat["metadata"]["ownerReferences"]] == [
        "someone",
        kyma["metadata"]["name"],
    ]


def test_listings_keep_only_records_where_their_watch_stores(
    spaces: Spaces, listener: ListenerProcess
) -> None:
    env = spaces.env
    rt = add_runtime(env, f"rt-{uuid.uuid4().hex[:12]}")
    assert (
        post(
            listener,
            rt,
            record(rt, watch_of(spaces, "store-a"), "a1", 3),
            record(rt, watch_of(spaces, "store-a"), "a2", 4),
        ).status_code
        == 200
    )
    digest = get(listener, rt, "state", watch="store-a")
    assert sorted(i["name"] for i in digest["items"]) == ["a1", "a2"]
    summary = get(listener, rt, "state/summary")
    assert sum(summary["counts"]) == 2
    # a copy someone made in B (labelled as A's): not A's, counted nowhere
    forged = copy.deepcopy(stored(env.api, spaces.a, rt.id)[0])
    forged["metadata"] = {
        "name": forged["metadata"]["name"],
        "namespace": spaces.b,
        "labels": forged["metadata"]["labels"],
        "annotations": {**forged["metadata"]["annotations"], records.ANN_NAME: "forged"},
    }
    forged["spec"]["name"] = "forged"
    client.CustomObjectsApi(env.api).create_namespaced_custom_object(
        RCM.group, RCM.version, spaces.b, RCM.plural, forged
    )
    assert post(listener, rt, record(rt, watch_of(spaces, "store-a"), "a3", 5)).status_code == 200
    digest = get(listener, rt, "state", watch="store-a")
    assert sorted(i["name"] for i in digest["items"]) == ["a1", "a2", "a3"]
    assert get(listener, rt, "state", watch="store-b")["items"] == []
    summary = get(listener, rt, "state/summary")
    assert sum(summary["counts"]) == 3
    # the poller's in-sync check: its own bucket hashes of what it holds equal the summary's
    remote = statehash.parse_summary(summary)
    assert (
        remote is not None and statehash.mismatching(statehash.fold(digest["items"]), remote) == []
    )
    for n, count in enumerate(summary["counts"]):  # each bucket as listed agrees
        bucket = get(listener, rt, f"state/buckets/{n}") if count else None
        assert bucket is None or (
            bucket["count"] == count and "forged" not in [i["name"] for i in bucket["items"]]
        )


def test_a_missing_storage_namespace_is_503_with_a_line_naming_watch_and_namespace(
    spaces: Spaces, listener: ListenerProcess
) -> None:
    env = spaces.env
    rt = add_runtime(env, f"rt-{uuid.uuid4().hex[:12]}")
    rec = record(rt, watch_of(spaces, "store-missing"), "m1", 3)
    r = post(listener, rt, rec)
    assert r.status_code == 503, r.text
    assert spaces.missing in r.json()["details"] and "store-missing" in r.json()["details"]
    assert r.headers["Retry-After"]
    assert metric_value(listener.metrics(), "tether_listener_storage_namespace_missing_total") >= 1
    log = listener.log_file.read_text()
    assert (
        f"the storage namespace {spaces.missing} of the Watch store-missing does not exist" in log
    )
    assert "m1" not in log.split("store-missing does not exist")[1][:200]  # no record value
    _create_namespace(env.api, spaces.missing)
    r = post(listener, rt, rec)  # the runtime's retry, once the operator created it
    assert r.status_code == 200, r.text
    assert [o["spec"]["name"] for o in stored(env.api, spaces.missing, rt.id)] == ["m1"]


def test_the_janitor_removes_a_deleted_kyma_crs_records_in_every_namespace(
    spaces: Spaces, listener: ListenerProcess
) -> None:
    env = spaces.env
    gone, kept = (add_runtime(env, f"rt-{uuid.uuid4().hex[:12]}") for _ in range(2))
    for rt in (gone, kept):
        assert (
            post(
                listener,
                rt,
                record(rt, watch_of(spaces, "store-a"), "x", 3),
                record(rt, watch_of(spaces, "store-b"), "y", 3),
            ).status_code
            == 200
        )
        assert post(listener, rt, rt.record("z", 3)).status_code == 200
    client.CustomObjectsApi(env.api).delete_namespaced_custom_object(
        apitypes.KYMAS.group,
        apitypes.KYMAS.version,
        env.namespace,
        apitypes.KYMAS.plural,
        f"kyma-{gone.id.lower()}"[:60],
    )
    grace = {"TETHER_LISTENER_ORPHAN_GRACE_SECONDS": "1"}
    loop.janitor_once(env, **grace)  # marks the runtime without a Kyma CR
    assert stored(env.api, spaces.a, gone.id)  # the grace first
    time.sleep(1.5)
    loop.janitor_once(env, **grace)  # the grace passed: its records go, wherever they are
    for ns in (spaces.a, spaces.b, env.namespace):
        assert stored(env.api, ns, gone.id) == [], ns
        assert len(stored(env.api, ns, kept.id)) == 1, ns


def impersonating(api: client.ApiClient, user: str) -> client.ApiClient:
    c = client.ApiClient(api.configuration)
    c.set_default_header("Impersonate-User", user)
    return c


def test_a_reader_of_one_watch_reads_its_records_and_not_another_watchs(
    spaces: Spaces, listener: ListenerProcess
) -> None:
    env = spaces.env
    rt = add_runtime(env, f"rt-{uuid.uuid4().hex[:12]}")
    assert (
        post(
            listener,
            rt,
            record(rt, watch_of(spaces, "store-a"), "r", 3),
            record(rt, watch_of(spaces, "store-b"), "r", 3),
        ).status_code
        == 200
    )
    sa = f"reader-{uuid.uuid4().hex[:6]}"
    client.CoreV1Api(env.api).create_namespaced_service_account(
        env.namespace, client.V1ServiceAccount(metadata=client.V1ObjectMeta(name=sa))
    )
    role = next(d for d in yaml.safe_load_all(READER_ROLE.read_text()) if d["kind"] == "Role")
    role["metadata"]["namespace"] = spaces.a  # A's reader Role, as shipped for its Watch
    rbac = client.RbacAuthorizationV1Api(env.api)
    rbac.create_namespaced_role(spaces.a, role)
    binding: Any = {
        "metadata": {"name": sa, "namespace": spaces.a},
        "roleRef": {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "Role",
            "name": role["metadata"]["name"],
        },
        "subjects": [{"kind": "ServiceAccount", "name": sa, "namespace": env.namespace}],
    }
    rbac.create_namespaced_role_binding(spaces.a, binding)
    user = f"system:serviceaccount:{env.namespace}:{sa}"
    kube = gateway.Kube(env.api)

    def allowed(verb: str, ns: str) -> bool:
        review = kube.create(
            apitypes.SUBJECT_ACCESS_REVIEWS,
            None,
            {
                "apiVersion": "authorization.k8s.io/v1",
                "kind": "SubjectAccessReview",
                "spec": {
                    "user": user,
                    "groups": ["system:serviceaccounts", "system:authenticated"],
                    "resourceAttributes": {
                        "namespace": ns,
                        "verb": verb,
                        "group": RCM.group,
                        "resource": RCM.plural,
                    },
                },
            },
        )
        return bool(review["status"].get("allowed"))

    deadline = time.monotonic() + 30  # the authorizer sees a new binding within a moment
    while not allowed("get", spaces.a):
        assert time.monotonic() < deadline, "the reader Role never took effect"
        time.sleep(0.3)
    for verb in ("get", "list", "watch"):
        assert allowed(verb, spaces.a), verb
        assert not allowed(verb, spaces.b), verb
        assert not allowed(verb, env.namespace), verb
        assert not allowed(verb, ""), verb  # not across namespaces
    assert not allowed("create", spaces.a) and not allowed("delete", spaces.a)
    # the same with its own requests: A's records listed (the Role takes effect at once or
    # within a moment), B's refused
    co = client.CustomObjectsApi(impersonating(env.api, user))
    deadline = time.monotonic() + 30
    while True:
        try:
            got: Any = co.list_namespaced_custom_object(
                RCM.group,
                RCM.version,
                spaces.a,
                RCM.plural,
                label_selector=f"{apitypes.RUNTIME_ID_LABEL}={rt.id}",
            )
            break
        except client.ApiException as e:
            assert e.status == 403 and time.monotonic() < deadline, e
            time.sleep(0.5)
    assert [o["spec"]["watch"] for o in got["items"]] == ["store-a"]
    with pytest.raises(client.ApiException) as err:
        co.list_namespaced_custom_object(RCM.group, RCM.version, spaces.b, RCM.plural)
    assert err.value.status == 403
    with pytest.raises(client.ApiException) as err:
        co.list_cluster_custom_object(RCM.group, RCM.version, RCM.plural)
    assert err.value.status == 403


def test_the_storage_of_an_existing_watch_cannot_change(spaces: Spaces) -> None:
    co = client.CustomObjectsApi(spaces.env.api)
    g, v, p = apitypes.WATCHES.group, apitypes.WATCHES.version, apitypes.WATCHES.plural
    for patch in ({"spec": {"storage": {"namespace": spaces.b}}}, {"spec": {"storage": None}}):
        with pytest.raises(client.ApiException) as err:
            co.patch_namespaced_custom_object(g, v, spaces.env.namespace, p, "store-a", patch)
        assert err.value.status == 422, patch
        assert "spec.storage is set at creation only" in str(err.value.body)
    assert watch_of(spaces, "store-a").storage_namespace == spaces.a


def test_the_janitor_prunes_tombstones_and_a_deleted_watchs_records_where_they_are_stored(
    spaces: Spaces, listener: ListenerProcess
) -> None:
    env = spaces.env
    rt = add_runtime(env, f"rt-{uuid.uuid4().hex[:12]}")
    old_at = times.format_time(datetime.datetime.now(datetime.UTC) - datetime.timedelta(minutes=5))
    a = watch_of(spaces, "store-a")
    gone = {
        k: v
        for k, v in record(rt, a, "gone", 4).items()
        if k not in ("data", "binaryData", "labels", "annotations")
    }
    gone.update(deleted=True, observedAt=old_at)
    assert post(listener, rt, record(rt, a, "gone", 3), record(rt, a, "kept", 3)).status_code == 200
    r = post(listener, rt, gone)
    assert r.status_code == 200 and r.json()["results"][0]["outcome"] == "persisted", r.text
    temp = watchenv.watch("store-temp", CM, env.namespace, storage={"namespace": spaces.b})
    watchenv.apply(env.api, temp)
    old = dict(
        changes.from_object(
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "data": {"k": "v"},
                "metadata": {
                    "namespace": "team-a",
                    "name": "t-old",
                    "uid": "u-t",
                    "resourceVersion": "3",
                },
            },
            watch=watches.parse(temp),
            runtime_id=rt.id,
            source="poller",
            observed_at=old_at,
        )
    )
    deadline = time.monotonic() + 30
    while (r := post(listener, rt, old)).status_code == 403:  # the listener's Watch cache
        assert time.monotonic() < deadline, r.text
        time.sleep(0.5)
    assert r.status_code == 200, r.text
    assert [o["spec"]["name"] for o in stored(env.api, spaces.b, rt.id)] == ["t-old"]
    watchenv.delete(env.api, env.namespace, "store-temp")
    loop.janitor_once(env, TETHER_LISTENER_TOMBSTONE_RETENTION_SECONDS="120")
    assert [o["spec"]["name"] for o in stored(env.api, spaces.a, rt.id)] == ["kept"]
    assert stored(env.api, spaces.b, rt.id) == []
