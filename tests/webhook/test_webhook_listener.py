"""End to end with the real listener: SKR apiserver -> webhook (gunicorn) -> listener
(gunicorn, mTLS, the runtime's certificate from the KCP CA) -> RuntimeConfigMap in the KCP.

Reuses the listener tests' fixtures (a listener process, a runtime with a Kyma CR and a
matching client certificate)."""

from __future__ import annotations

import pathlib
import time
from collections.abc import Callable
from typing import Any

import pytest
from kubernetes import client

from testing import controlplane
from testing import webhookstack as stack
from testing.listenerenv import Env, ListenerProcess, Runtime

pytestmark = pytest.mark.slow


def _stored(env: Env, rid: str, ns: str, name: str, predicate: Callable[[dict[str, Any]], bool]) -> dict[str, Any]:
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        obj = env.stored_one(rid, ns, name)
        if obj is not None and predicate(obj["spec"]):
            return dict(obj["spec"])
        time.sleep(0.1)
    raise AssertionError(f"not stored as expected: {env.stored_one(rid, ns, name)}")


def test_changes_reach_the_kcp_through_the_real_listener(
        skr: controlplane.ControlPlane, skr_api: client.ApiClient, namespace: str,
        listener_env: Env, listener: ListenerProcess,  # noqa: F811
        runtime: Callable[..., Runtime], tmp_path: pathlib.Path) -> None:  # noqa: F811
    rt = runtime()
    proc = stack.WebhookProcess(tmp_path, {
        "TETHER_RUNTIME_ID": rt.id,
        "TETHER_LISTENER_URL": listener.url,
        "TETHER_LISTENER_CA_FILE": str(listener_env.server_ca_file),
        "TETHER_CLIENT_CERT_FILE": str(rt.cert_file),
        "TETHER_CLIENT_KEY_FILE": str(rt.key_file),
        "TETHER_KUBECONFIG": str(skr.kubeconfig),
    }).start()
    vwc = stack.vwc_body(f"tether-test-{namespace}", proc.url + "/validate", proc.ca.cert_pem, namespace)
    stack.register(skr_api, vwc)
    core = client.CoreV1Api(skr_api)
    try:
        created = core.create_namespaced_config_map(namespace, client.V1ConfigMap(
            metadata=client.V1ObjectMeta(name="app"), data={"k": "v1"}))
        deadline = time.monotonic() + 30
        rv = created.metadata.resource_version
        while listener_env.stored_one(rt.id, namespace, "app") is None:  # until the apiserver calls us
            assert time.monotonic() < deadline, proc.log()
            rv = core.patch_namespaced_config_map("app", namespace, {"data": {"k": "v1"},
                                                  "metadata": {"labels": {"n": str(time.monotonic_ns())}}}
                                                  ).metadata.resource_version
            time.sleep(0.3)
        spec = _stored(listener_env, rt.id, namespace, "app", lambda s: s["resourceVersion"] == rv)
        assert spec["data"] == {"k": "v1"} and spec["source"] == "webhook"

        updated = core.patch_namespaced_config_map("app", namespace, {"data": {"k": "v2"}})
        spec = _stored(listener_env, rt.id, namespace, "app",
                       lambda s: s["resourceVersion"] == updated.metadata.resource_version)
        assert spec["data"] == {"k": "v2"} and spec["deleted"] is False

        core.delete_namespaced_config_map("app", namespace)
        spec = _stored(listener_env, rt.id, namespace, "app", lambda s: s["deleted"] is True)
        assert int(spec["resourceVersion"]) >= int(updated.metadata.resource_version)
        assert proc.metric("tether_webhook_forwarded_records_total", outcome="persisted") >= 3
    finally:
        stack.unregister(skr_api, vwc["metadata"]["name"])
        rc = proc.stop()
    assert rc == 0, proc.log()
