"""Where the listener may write and what it may delete (issue 38, items 4 and 5), against the
real KCP plane: the listener's own check (``TETHER_LISTENER_STORAGE_NAMESPACES``) and the
manifests' ValidatingAdmissionPolicy (manifests/kcp/listener/policy.yaml), installed here for
the test's listener user with the test's namespace as the listener's storage namespace.

Hostile: a Watch's author names a storage namespace the listener is not meant to write in
(where another consumer reads records): the runtime's records of that Watch are refused and
nothing lands there; and the listener's own credentials, used directly (a listener taken
over), can neither write there nor delete a runtime's record.
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
from tether import apitypes, changes, watches

pytestmark = pytest.mark.slow
RCM = apitypes.RUNTIME_CONFIGMAPS
CM = {"group": "", "version": "v1", "resource": "configmaps", "kind": "ConfigMap"}
POLICY = controlplane.REPO_ROOT / "manifests" / "kcp" / "listener" / "policy.yaml"
SHIPPED_USER = "system:serviceaccount:tether-system:tether-listener"
SHIPPED_STORAGE = "['kcp-system', 'tether-configuration']"


class Setup:
    def __init__(self, env: Env, elsewhere: str) -> None:
        self.env, self.elsewhere = env, elsewhere


@pytest.fixture(scope="module")
def setup(listener_env: Env) -> Iterator[Setup]:
    env = own_namespace(listener_env, "kwp")
    elsewhere = f"kwp-other-{uuid.uuid4().hex[:6]}"  # another consumer's namespace
    core = client.CoreV1Api(env.api)
    controlplane.retry_busy(lambda: core.create_namespace(
        client.V1Namespace(metadata=client.V1ObjectMeta(name=elsewhere))))
    watchenv.apply(env.api, watchenv.watch("planted", CM, env.namespace,
                                           storage={"namespace": elsewhere}))
    adm = client.AdmissionregistrationV1Api(env.api)
    tag = uuid.uuid4().hex[:6]
    name = ""
    for d in (d for d in yaml.safe_load_all(POLICY.read_text()) if d):
        d["metadata"]["name"] = f"{d['metadata']['name']}-{tag}"
        if d["kind"] == "ValidatingAdmissionPolicy":
            cond, storage = d["spec"]["matchConditions"][0], d["spec"]["variables"][0]
            assert SHIPPED_USER in cond["expression"] and storage["expression"] == SHIPPED_STORAGE
            cond["expression"] = cond["expression"].replace(SHIPPED_USER, LISTENER_USER)
            storage["expression"] = f"['{env.namespace}']"  # the test's kcp-system
            name = d["metadata"]["name"]
            adm.create_validating_admission_policy(d)
        else:
            d["spec"]["policyName"] = name
            d["spec"]["matchResources"] = {"namespaceSelector": {"matchExpressions": [{
                "key": "kubernetes.io/metadata.name", "operator": "In",
                "values": [env.namespace, elsewhere]}]}}
            adm.create_validating_admission_policy_binding(d)
    yield Setup(env, elsewhere)
    adm.delete_validating_admission_policy_binding(name)
    adm.delete_validating_admission_policy(name)
    client.CustomObjectsApi(env.api).delete_collection_namespaced_custom_object(
        RCM.group, RCM.version, elsewhere, RCM.plural)
    core.delete_namespace(elsewhere)
    remove_namespace(env)


@pytest.fixture(scope="module")
def listener(setup: Setup) -> Iterator[ListenerProcess]:
    yield from running(setup.env, "write-policy", TETHER_LISTENER_UNBACKED_TOMBSTONES="1",
                       TETHER_LISTENER_STORAGE_NAMESPACES=setup.env.namespace)


def objects(env: Env, namespace: str, rid: str) -> list[dict[str, Any]]:
    resp: Any = client.CustomObjectsApi(env.api).list_namespaced_custom_object(
        RCM.group, RCM.version, namespace, RCM.plural,
        label_selector=f"{apitypes.RUNTIME_ID_LABEL}={rid}")
    return list(resp["items"])


def planted_record(env: Env, rt: Runtime, name: str) -> dict[str, Any]:
    body: Any = client.CustomObjectsApi(env.api).get_namespaced_custom_object(
        apitypes.WATCHES.group, apitypes.WATCHES.version, env.namespace, apitypes.WATCHES.plural,
        "planted")
    o = {"apiVersion": "v1", "kind": "ConfigMap", "data": {"k": "v"},
         "metadata": {"namespace": "team-a", "name": name, "uid": "u", "resourceVersion": "5"}}
    return dict(changes.from_object(o, watch=watches.parse(body), runtime_id=rt.id,
                                    source="webhook"))


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


def test_records_of_a_watch_storing_outside_the_listeners_namespaces_land_nowhere(
        setup: Setup, listener: ListenerProcess) -> None:
    env = setup.env
    rt = add_runtime(env, f"rt-{uuid.uuid4().hex[:10]}")
    deadline = time.monotonic() + 30
    while True:  # the listener reads the Watches every few seconds
        r = post(listener, rt, planted_record(env, rt, "planted-cm"))
        if r.status_code == 503:
            break
        assert r.status_code != 200 and time.monotonic() < deadline, r.text
        time.sleep(0.5)
    assert "not one the listener writes in" in r.text
    assert objects(env, setup.elsewhere, rt.id) == []
    assert metric_value(listener.metrics(), "tether_listener_storage_namespace_refused_total") >= 1
    # the runtime's other records go on where they belong
    assert post(listener, rt, rt.record("fine", 5)).status_code == 200
    assert [o["spec"]["name"] for o in objects(env, env.namespace, rt.id)] == ["fine"]


def test_the_listeners_credentials_cannot_write_outside_nor_delete_a_record(
        setup: Setup, listener: ListenerProcess) -> None:
    env, api = setup.env, as_listener(setup.env)
    rt = add_runtime(env, f"rt-{uuid.uuid4().hex[:10]}")
    body = records.body({**rt.record("forged", 5), "watch": "planted"}, setup.elsewhere)
    e = until_refused(lambda: api.create_namespaced_custom_object(
        RCM.group, RCM.version, setup.elsewhere, RCM.plural, body))
    assert "storage namespaces" in str(e.body)
    assert objects(env, setup.elsewhere, rt.id) == []
    # a runtime's record: not deleted
    assert post(listener, rt, rt.record("real", 10)).status_code == 200
    (real,) = objects(env, env.namespace, rt.id)
    e = until_refused(lambda: api.delete_namespaced_custom_object(
        RCM.group, RCM.version, env.namespace, RCM.plural, real["metadata"]["name"]))
    assert "unbacked" in str(e.body)
    assert len(objects(env, env.namespace, rt.id)) == 1
    # the listener's own evictions pass the policy: a cap of 1, two unbacked tombstones
    for name in ("gone-1", "gone-2"):
        assert post(listener, rt, rt.record(name, 10, deleted=True)).status_code == 200
    ghosts = [o["spec"]["name"] for o in objects(env, env.namespace, rt.id)
              if records.is_unbacked(o["metadata"])]
    assert ghosts == ["gone-2"]
    assert metric_value(listener.metrics(),
                        "tether_listener_unbacked_tombstones_evicted_total") == 1
