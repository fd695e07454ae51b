"""Where the listener may write and what it may delete (issue 38, items 4 and 5), against the
real KCP plane: the manifests' ValidatingAdmissionPolicy (manifests/kcp/listener/policy.yaml),
installed here for the test's listener user with the test's namespace as the listener's own,
and a listener run as the manifests run it (no ``TETHER_LISTENER_STORAGE_NAMESPACES``).

Hostile: a Watch's author names a storage namespace the KCP's admins did not label
record-storage (another consumer's, where it reads records): the runtime's records of that
Watch are answered 503, counted, and nothing lands there, while a Watch storing in a labelled
Namespace is written without touching the listener; and the listener's own credentials,
used directly (a listener taken over), can neither write there nor delete a runtime's record.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import yaml
from kubernetes import client, config

from listener.storage import records
from listener.storage.namespaces import STORAGE_LABEL
from testing import controlplane, watchenv
from testing.listenercalls import post, running
from testing.listenerenv import (
    LISTENER_USER,
    Env,
    ListenerProcess,
    Runtime,
    add_runtime,
    metric_value,
    own_namespace,
    remove_namespace,
)
from tether.kube import apitypes
from tether.wire import changes, conversion, watches

RCM = apitypes.RUNTIME_CONFIGMAPS
CM = {"group": "", "version": "v1", "resource": "configmaps", "kind": "ConfigMap"}
POLICY = controlplane.REPO_ROOT / "manifests" / "kcp" / "listener" / "policy.yaml"
SHIPPED_USER = "system:serviceaccount:tether-system:tether-listener"
SHIPPED_OWN = "'kcp-system'"


class Setup:
    def __init__(self, env: Env, elsewhere: str, marked: str) -> None:
        self.env, self.elsewhere, self.marked = env, elsewhere, marked


@pytest.fixture(scope="module")
def setup(listener_env: Env) -> Iterator[Setup]:
    env = own_namespace(listener_env, "kwp")
    tag = uuid.uuid4().hex[:6]
    elsewhere = f"kwp-other-{tag}"  # another consumer's namespace, not marked as record storage
    marked = f"kwp-marked-{tag}"  # a consumer's storage namespace the admins labelled
    core = client.CoreV1Api(env.api)
    for ns, labels in ((elsewhere, None), (marked, {STORAGE_LABEL: "true"})):
        controlplane.retry_busy(
            lambda ns=ns, labels=labels: core.create_namespace(
                client.V1Namespace(metadata=client.V1ObjectMeta(name=ns, labels=labels))
            )
        )
    watchenv.apply(
        env.api, watchenv.watch("planted", CM, env.namespace, storage={"namespace": elsewhere})
    )
    watchenv.apply(
        env.api, watchenv.watch("shipped", CM, env.namespace, storage={"namespace": marked})
    )
    adm = client.AdmissionregistrationV1Api(env.api)
    name = ""
    for d in (d for d in yaml.safe_load_all(POLICY.read_text()) if d):
        d["metadata"]["name"] = f"{d['metadata']['name']}-{tag}"
        if d["kind"] == "ValidatingAdmissionPolicy":
            cond, own = d["spec"]["matchConditions"][0], d["spec"]["variables"][0]
            assert SHIPPED_USER in cond["expression"] and own["expression"] == SHIPPED_OWN
            cond["expression"] = cond["expression"].replace(SHIPPED_USER, LISTENER_USER)
            own["expression"] = f"'{env.namespace}'"  # the test's kcp-system
            name = d["metadata"]["name"]
            adm.create_validating_admission_policy(d)
        else:
            d["spec"]["policyName"] = name
            d["spec"]["matchResources"] = {
                "namespaceSelector": {
                    "matchExpressions": [
                        {
                            "key": "kubernetes.io/metadata.name",
                            "operator": "In",
                            "values": [env.namespace, elsewhere, marked],
                        }
                    ]
                }
            }
            adm.create_validating_admission_policy_binding(d)
    # the policy takes effect a moment after it is created: a dry-run create as the listener
    # until it is refused (before that the listener's records could land anywhere)
    cm = {
        "metadata": {"namespace": "team-a", "name": "probe", "uid": "u", "resourceVersion": "1"},
        "data": {},
    }
    probe = records.body(
        {**conversion.from_configmap(cm, runtime_id="probe", source="webhook"), "watch": "planted"},
        elsewhere,
    )
    until_refused(
        lambda: as_listener(env).create_namespaced_custom_object(
            RCM.group, RCM.version, elsewhere, RCM.plural, probe, dry_run="All"
        )
    )
    yield Setup(env, elsewhere, marked)
    adm.delete_validating_admission_policy_binding(name)
    adm.delete_validating_admission_policy(name)
    for ns in (elsewhere, marked):
        client.CustomObjectsApi(env.api).delete_collection_namespaced_custom_object(
            RCM.group, RCM.version, ns, RCM.plural
        )
        core.delete_namespace(ns)
    remove_namespace(env)


@pytest.fixture(scope="module")
def listener(setup: Setup) -> Iterator[ListenerProcess]:
    yield from running(setup.env, "write-policy", TETHER_LISTENER_UNBACKED_TOMBSTONES="1")


def objects(env: Env, namespace: str, rid: str) -> list[dict[str, Any]]:
    resp: Any = client.CustomObjectsApi(env.api).list_namespaced_custom_object(
        RCM.group,
        RCM.version,
        namespace,
        RCM.plural,
        label_selector=f"{apitypes.RUNTIME_ID_LABEL}={rid}",
    )
    return list(resp["items"])


def planted_record(env: Env, rt: Runtime, watch: str, name: str) -> dict[str, Any]:
    body: Any = client.CustomObjectsApi(env.api).get_namespaced_custom_object(
        apitypes.WATCHES.group,
        apitypes.WATCHES.version,
        env.namespace,
        apitypes.WATCHES.plural,
        watch,
    )
    o = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "data": {"k": "v"},
        "metadata": {"namespace": "team-a", "name": name, "uid": "u", "resourceVersion": "5"},
    }
    return dict(
        changes.from_object(o, watch=watches.parse(body), runtime_id=rt.id, source="webhook")
    )


def as_listener(env: Env) -> client.CustomObjectsApi:
    return client.CustomObjectsApi(config.new_client_from_config(str(env.kubeconfig)))


def until_refused(attempt: Any) -> client.ApiException:
    """The policy takes effect a moment after it is created: ``attempt`` until it is refused."""
    deadline = time.monotonic() + 60
    while True:
        try:
            attempt()
        except client.ApiException as e:
            if e.status == 403:
                return e
            raise
        assert time.monotonic() < deadline, "the policy never refused the listener"
        time.sleep(0.5)


def test_records_of_a_watch_storing_in_an_unmarked_namespace_land_nowhere(
    setup: Setup, listener: ListenerProcess
) -> None:
    env = setup.env
    rt = add_runtime(env, f"rt-{uuid.uuid4().hex[:10]}")
    deadline = time.monotonic() + 30
    while True:  # the listener reads the Watches every few seconds
        r = post(listener, rt, planted_record(env, rt, "planted", "planted-cm"))
        if r.status_code == 503 and "not one the KCP lets" in r.text:
            break
        assert r.status_code != 200 and time.monotonic() < deadline, r.text
        time.sleep(0.5)
    assert STORAGE_LABEL in r.text, r.text
    assert objects(env, setup.elsewhere, rt.id) == []
    assert metric_value(listener.metrics(), "tether_listener_storage_namespace_refused_total") >= 1
    # a Watch storing in a Namespace the admins labelled: written, no listener setting changed
    r = post(listener, rt, planted_record(env, rt, "shipped", "shipped-cm"))
    assert r.status_code == 200, r.text
    assert [o["spec"]["name"] for o in objects(env, setup.marked, rt.id)] == ["shipped-cm"]
    # the runtime's other records go on where they belong
    assert post(listener, rt, rt.record("fine", 5)).status_code == 200
    assert [o["spec"]["name"] for o in objects(env, env.namespace, rt.id)] == ["fine"]
    assert objects(env, setup.elsewhere, rt.id) == []


def test_the_listeners_credentials_cannot_write_outside_nor_delete_a_record(
    setup: Setup, listener: ListenerProcess
) -> None:
    env, api = setup.env, as_listener(setup.env)
    rt = add_runtime(env, f"rt-{uuid.uuid4().hex[:10]}")
    body = records.body({**rt.record("forged", 5), "watch": "planted"}, setup.elsewhere)
    e = until_refused(
        lambda: api.create_namespaced_custom_object(
            RCM.group, RCM.version, setup.elsewhere, RCM.plural, body
        )
    )
    assert "record-storage=true, not in " + setup.elsewhere in str(e.body)
    assert objects(env, setup.elsewhere, rt.id) == []
    # a runtime's record: not deleted
    assert post(listener, rt, rt.record("real", 10)).status_code == 200
    (real,) = objects(env, env.namespace, rt.id)
    e = until_refused(
        lambda: api.delete_namespaced_custom_object(
            RCM.group, RCM.version, env.namespace, RCM.plural, real["metadata"]["name"]
        )
    )
    assert "unbacked" in str(e.body)
    assert len(objects(env, env.namespace, rt.id)) == 1
    # the listener's own evictions pass the policy: a cap of 1, two unbacked tombstones
    for name in ("gone-1", "gone-2"):
        assert post(listener, rt, rt.record(name, 10, deleted=True)).status_code == 200
    ghosts = [
        o["spec"]["name"]
        for o in objects(env, env.namespace, rt.id)
        if records.is_unbacked(o["metadata"])
    ]
    assert ghosts == ["gone-2"]
    assert (
        metric_value(listener.metrics(), "tether_listener_unbacked_tombstones_evicted_total") == 1
    )
