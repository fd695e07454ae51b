"""A batch's records persisted at once (``TETHER_LISTENER_PERSIST_CONCURRENCY``), against
the real KCP plane: the same stored state and answers as one after another, a key's records
in batch order, the quota a bound, and a record the KCP rejects answered 400 while a re-send
completes the rest (docs/listener.md, "A batch's records at once")."""

from __future__ import annotations

import random
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import requests
from kubernetes import client

from testing.listenerenv import (
    Env,
    ListenerProcess,
    Runtime,
    add_runtime,
    own_namespace,
    remove_namespace,
)
from tether.kube import apitypes
from tether.wire import changes

pytestmark = pytest.mark.processes
QUOTA = 100
COMMON = {
    "TETHER_LISTENER_QUOTA_RECORDS": str(QUOTA),
    "TETHER_LISTENER_QUOTA_CACHE_SECONDS": "600",  # no recount in the middle of a batch
    "TETHER_LISTENER_HEARTBEAT_INTERVAL_SECONDS": "0",
}


@pytest.fixture(scope="module")
def env(listener_env: Env) -> Iterator[Env]:
    e = own_namespace(listener_env, "kpb")
    yield e
    remove_namespace(e)


@pytest.fixture(scope="module")
def sequential(env: Env) -> Iterator[ListenerProcess]:
    p = ListenerProcess(env, "seq", TETHER_LISTENER_PERSIST_CONCURRENCY="1", **COMMON)
    yield p
    p.stop()


@pytest.fixture(scope="module")
def concurrent(env: Env) -> Iterator[ListenerProcess]:
    p = ListenerProcess(env, "conc", TETHER_LISTENER_PERSIST_CONCURRENCY="8", **COMMON)
    yield p
    p.stop()


def new_runtime(env: Env) -> Runtime:
    rid = f"rt-{uuid.uuid4().hex[:12]}"
    return add_runtime(env, rid, f"c-{rid[3:9]}.kyma.example.com")


def post(p: ListenerProcess, rt: Runtime, recs: list[dict[str, Any]]) -> requests.Response:
    doc: Any = recs[0] if len(recs) == 1 else changes.batch(recs)  # type: ignore[arg-type]
    with rt.session() as s:
        return s.post(f"{p.url}/v1/runtimes/{rt.id}/changes", json=doc, timeout=120)


def answered(r: requests.Response) -> list[tuple[str, str, str, str]]:
    assert r.status_code == 200, r.text[:500]
    return [
        (i["namespace"], i["name"], i["resourceVersion"], i["outcome"]) for i in r.json()["results"]
    ]


def state(env: Env, rt: Runtime) -> dict[tuple[str, str], tuple[str, bool, Any]]:
    """What the KCP holds for the runtime: key -> (resourceVersion, deleted, data)."""
    return {
        (o["spec"]["namespace"], o["spec"]["name"]): (
            o["spec"]["resourceVersion"],
            o["spec"]["deleted"],
            o["spec"].get("data"),
        )
        for o in env.stored(rt.id)
    }


def plan(seed: int) -> list[list[tuple[str, str, int, bool]]]:
    """Two batches of 200 records over 60 keys of two namespaces: repeated keys, updates,
    duplicates, late (stale) records and tombstones; ``five`` updated 5 times in the first."""
    rng = random.Random(seed)
    keys = [(("team-a", "team-b")[i % 2], f"obj-{i:02d}") for i in range(59)]
    batches = []
    for b in range(2):
        items = [("team-a", "five", 100 * b + 10 * (j + 1), False) for j in range(5)]
        while len(items) < 190:
            ns, name = rng.choice(keys)
            items.append((ns, name, 100 * b + rng.randint(1, 60), rng.random() < 0.1))
        rng.shuffle(items)
        for ns, name in keys[:10]:  # a key's newest record again: a duplicate
            items.append(
                max(
                    (x for x in items if x[:2] == (ns, name)),
                    key=lambda x: x[2],
                    default=(ns, name, 100 * b + 1, False),
                )
            )
        batches.append(items)
    # "five"'s records keep batch order whatever the shuffle: rv 10..50 (110..150) ascending
    for items in batches:
        fives = sorted(i for i, x in enumerate(items) if x[1] == "five")
        rvs = sorted(items[i][2] for i in fives)
        for i, rv in zip(fives, rvs, strict=True):
            items[i] = ("team-a", "five", rv, False)
    return batches


def records_of(rt: Runtime, items: list[tuple[str, str, int, bool]]) -> list[dict[str, Any]]:
    return [
        rt.record(name, rv, ns=ns, deleted=deleted, data=None if deleted else {"v": f"{name}-{rv}"})
        for ns, name, rv, deleted in items
    ]


def test_a_batch_persisted_at_once_gives_the_answers_and_state_of_one_after_another(
    sequential: ListenerProcess, concurrent: ListenerProcess, env: Env
) -> None:
    one, many = new_runtime(env), new_runtime(env)
    for items in plan(26):
        a = answered(post(sequential, one, records_of(one, items)))
        b = answered(post(concurrent, many, records_of(many, items)))
        assert a == b  # every record's outcome, in batch order
        assert [r[:3] for r in b] == [(ns, name, str(rv)) for ns, name, rv, _ in items]
        assert {r[3] for r in b} >= {"persisted", "duplicate", "stale"}
        assert state(env, one) == state(env, many)
    five = state(env, many)[("team-a", "five")]
    assert five[0] == "150" and five[2] == {"v": "five-150"}  # the last of its 5 updates
    assert len(state(env, many)) == 60


def test_a_quota_filling_batch_never_overshoots_and_the_re_send_converges(
    concurrent: ListenerProcess, env: Env
) -> None:
    rt = new_runtime(env)
    recs = [rt.record(f"fill-{i:03d}", 7) for i in range(QUOTA + 30)]
    r = post(concurrent, rt, recs)
    assert r.status_code == 413, r.text[:300]
    assert r.json()["details"]["reason"] == "quota_records"
    assert len(env.stored(rt.id)) == QUOTA  # what the lanes admitted between them: the cap
    codes = [post(concurrent, rt, [rec]).status_code for rec in recs]  # the senders' re-send
    assert codes.count(200) == QUOTA and codes.count(413) == 30
    assert len(env.stored(rt.id)) == QUOTA


REFUSED = "refused-by-kcp"


@pytest.fixture
def admission_policy(env: Env) -> Iterator[str]:
    """A ValidatingAdmissionPolicy of the KCP apiserver refusing (422) the RuntimeConfigMaps
    of records named ``refused-*`` in the module's namespace only."""
    api = client.AdmissionregistrationV1Api(env.api)
    name = f"tether-test-{env.namespace}"
    policy: Any = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": name},
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {
                "resourceRules": [
                    {
                        "apiGroups": [apitypes.RUNTIME_CONFIGMAPS.group],
                        "apiVersions": ["*"],
                        "operations": ["CREATE", "UPDATE"],
                        "resources": [apitypes.RUNTIME_CONFIGMAPS.plural],
                    }
                ]
            },
            "validations": [
                {
                    "expression": "!object.spec.name.startsWith('refused-')",
                    "reason": "Invalid",
                    "message": "refused by the test's policy",
                }
            ],
        },
    }
    binding: Any = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": name},
        "spec": {
            "policyName": name,
            "validationActions": ["Deny"],
            "matchResources": {
                "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": env.namespace}}
            },
        },
    }
    api.create_validating_admission_policy(policy)
    api.create_validating_admission_policy_binding(binding)
    try:
        yield name
    finally:
        api.delete_validating_admission_policy_binding(name)
        api.delete_validating_admission_policy(name)


def test_a_record_the_kcp_rejects_is_named_in_a_400_and_a_re_send_completes_the_rest(
    concurrent: ListenerProcess, env: Env, admission_policy: str
) -> None:
    rt = new_runtime(env)
    deadline, rv = time.monotonic() + 90, 1
    while post(concurrent, rt, [rt.record("refused-probe", rv)]).status_code != 400:
        assert time.monotonic() < deadline, "the admission policy never took effect"
        rv += 1
        time.sleep(0.5)
    names = [f"ok-{i:02d}" for i in range(40)]
    names[5], names[30] = REFUSED, "refused-later"
    recs = [rt.record(n, 3) for n in names] + [rt.record("ok-00", 4)]
    r = post(concurrent, rt, recs)
    assert r.status_code == 400, r.text[:300]
    assert r.json()["error"] == "rejected by the KCP API"
    assert r.json()["details"].startswith(f"team-a/{REFUSED}: "), r.text[:300]  # the earliest
    for rec in recs:  # the senders' re-send, record by record: the rest completes
        got = post(concurrent, rt, [rec])
        assert got.status_code == (400 if rec["name"].startswith("refused-") else 200), got.text
    held = {k[1]: v[0] for k, v in state(env, rt).items() if k[1] != "refused-probe"}
    assert held == {**{n: "3" for n in names if not n.startswith("refused-")}, "ok-00": "4"}
