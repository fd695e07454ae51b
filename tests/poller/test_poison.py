"""Poison values stored in the KCP (issue 9, part 5): records written by an older version
under a looser schema, created here directly with the Kubernetes client (bypassing the
listener). None of them may make a request fail with 5xx or a poller run crash: the next
valid record for the key replaces the stored one, GET state answers, a poller run repairs.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import requests
from kubernetes import client

from listener.storage import records
from testing import listenerenv
from testing.listenerenv import Env, ListenerProcess, Runtime
from testing.pollerenv import InProcess, unique_selector
from tether.kube import apitypes
from tether.wire import changes

# field overrides of a stored record, each accepted by the old schema or the old code path
POISON: dict[str, dict[str, str]] = {
    "arabic-digit": {"resourceVersion": "٣"},  # int('٣') == 3 but '٣' is no Kubernetes rv
    "superscript": {"resourceVersion": "²"},  # '²'.isdigit() and int('²') raises: the old 500
    "no-month-13": {"observedAt": "2026-13-45T10:00:00Z"},  # matched the old pattern
    "not-a-time": {"observedAt": "yesterday"},
    "space-rv": {"resourceVersion": "1 2"},
}
NEWLINE_NAME = "cfg\n"  # the old pattern's '$' accepted it: stored as its own key


def store_poison(env: Env, rt: Runtime, ns: str, name: str, **spec: str) -> dict[str, Any]:
    rec = rt.record(name, 5, ns=ns, observed_at="2026-01-01T00:00:00.000000Z")
    body = records.body(listenerenv.as_stored(rec), env.namespace)
    body["spec"].update(spec)
    ann = body["metadata"]["annotations"]
    ann[records.ANN_RV] = body["spec"]["resourceVersion"]
    ann[records.ANN_OBSERVED] = body["spec"]["observedAt"]
    obj: Any = client.CustomObjectsApi(env.api).create_namespaced_custom_object(
        apitypes.RUNTIME_CONFIGMAPS.group,
        apitypes.RUNTIME_CONFIGMAPS.version,
        env.namespace,
        apitypes.RUNTIME_CONFIGMAPS.plural,
        body,
    )
    return dict(obj)


def state(session: requests.Session, lp: ListenerProcess, rt: Runtime) -> list[dict[str, Any]]:
    r = session.get(f"{lp.url}/v1/runtimes/{rt.id}/state", timeout=60)
    assert r.status_code == 200, r.text
    items: list[dict[str, Any]] = r.json()["items"]
    return items


def test_poison_records_are_replaced_by_the_next_valid_post(
    listener: ListenerProcess, runtime: Callable[..., Runtime]
) -> None:
    rt = runtime()
    env = rt.env
    for name, spec in POISON.items():
        store_poison(env, rt, "team-a", name, **spec)
    store_poison(env, rt, "team-a", NEWLINE_NAME)
    s = rt.session()
    try:
        held = {i["name"]: i for i in state(s, listener, rt)}
        assert set(held) == {*POISON, NEWLINE_NAME}
        assert held["superscript"]["resourceVersion"] == "²"  # reported as stored

        recs = [rt.record(name, 3, ns="team-a") for name in POISON]
        r = s.post(
            f"{listener.url}/v1/runtimes/{rt.id}/changes",
            json=changes.batch(recs),  # type: ignore[arg-type]
            timeout=60,
        )
        assert r.status_code == 200, r.text
        assert [x["outcome"] for x in r.json()["results"]] == ["persisted"] * len(POISON)
        for name in POISON:
            obj = env.stored_one(rt.id, "team-a", name)
            assert obj is not None and obj["spec"]["resourceVersion"] == "3", obj
            assert obj["metadata"]["annotations"][records.ANN_RV] == "3"
            assert changes.uninterpretable(records.stored_version(obj)) is None
        # converged: the same records again are duplicates, an older one is stale
        r = s.post(
            f"{listener.url}/v1/runtimes/{rt.id}/changes",
            json=changes.batch(recs),  # type: ignore[arg-type]
            timeout=60,
        )
        assert [x["outcome"] for x in r.json()["results"]] == ["duplicate"] * len(POISON)
        r = s.post(
            f"{listener.url}/v1/runtimes/{rt.id}/changes",
            json=rt.record("superscript", 2, ns="team-a"),
            timeout=60,
        )
        assert r.status_code == 200 and r.json()["results"][0]["outcome"] == "stale"

        # a name ending in a newline is no name: refused, never stored as a new key
        r = s.post(
            f"{listener.url}/v1/runtimes/{rt.id}/changes",
            json=rt.record(NEWLINE_NAME, 9, ns="team-a"),
            timeout=60,
        )
        assert r.status_code == 400 and r.json()["details"][0]["path"] == "$.name", r.text
        for bad in ("٣", "²", "３"):
            r = s.get(
                f"{listener.url}/v1/runtimes/{rt.id}/state", params={"limit": bad}, timeout=60
            )
            assert r.status_code == 400, (bad, r.status_code, r.text)
        assert len(state(s, listener, rt)) == len(POISON) + 1
    finally:
        s.close()
    log = listener.log_file.read_text()
    assert "uninterpretable resourceVersion" in log and "uninterpretable observedAt" in log
    assert "unexpected error" not in log


def test_a_poller_run_repairs_poison_digest_entries(
    listener: ListenerProcess,
    runtime: Callable[..., Runtime],
    skr_api: client.ApiClient,
    namespace: str,
) -> None:
    rt = runtime()
    labels, selector = unique_selector()
    core = client.CoreV1Api(skr_api)
    live = {}
    for name in ("superscript", "no-month-13", "space-rv"):
        cm = core.create_namespaced_config_map(
            namespace,
            client.V1ConfigMap(
                metadata=client.V1ObjectMeta(name=name, labels=labels), data={"k": name}
            ),
        )
        live[name] = cm.metadata.resource_version
    for name, spec in POISON.items():  # "arabic-digit" and "not-a-time" exist only in the KCP
        store_poison(rt.env, rt, namespace, name, **spec)
    store_poison(rt.env, rt, namespace, NEWLINE_NAME)

    poller = InProcess(rt, listener.url, skr_api, selector)
    try:
        result = poller.run()
        assert result.outcome == "ok", result
        assert result.differences["changed"] == 3 and result.differences["deleted"] == 2, result
        assert (
            poller.sample("tether_poller_digest_uninterpretable_total", field="resourceVersion")
            == 3
        )
        assert poller.sample("tether_poller_digest_uninterpretable_total", field="observedAt") == 2
        assert poller.sample("tether_poller_digest_uninterpretable_total", field="key") == 1
        for name, rv in live.items():
            obj = rt.env.stored_one(rt.id, namespace, name)
            assert obj is not None and obj["spec"]["resourceVersion"] == rv
            assert obj["spec"]["data"] == {"k": name} and obj["spec"]["deleted"] is False
        for name in ("arabic-digit", "not-a-time"):
            obj = rt.env.stored_one(rt.id, namespace, name)
            assert obj is not None and obj["spec"]["deleted"] is True, obj
            assert changes.uninterpretable(records.stored_version(obj)) is None

        again = poller.run()
        assert again.outcome == "ok" and sum(again.differences.values()) == 0, again
    finally:
        poller.close()
