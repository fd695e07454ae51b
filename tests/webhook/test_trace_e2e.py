"""One trace per change, end to end: SKR apiserver -> webhook (gunicorn) -> listener
(gunicorn, mTLS) -> RuntimeConfigMap in the KCP. The stored record's traceparent annotation
names the KCP's trace ID the listener's audit line of that write carries (beside the
runtime's trace, ``runtime_trace_id``, which the KCP links and never continues), and the
runtime's RuntimeDelivery lists it with the recent records (what the admin runtime page
shows)."""

from __future__ import annotations

import pathlib
import time
from collections.abc import Callable
from typing import Any

from kubernetes import client

from listener.fleet import heartbeat
from testing import controlplane
from testing import webhookstack as stack
from testing.listenerenv import Env, ListenerProcess, Runtime
from tether.base import tracing
from tether.kube import apitypes


def test_the_stored_records_trace_is_the_one_the_listener_logged(
    skr: controlplane.ControlPlane,
    skr_api: client.ApiClient,
    namespace: str,
    listener_env: Env,
    listener: ListenerProcess,
    runtime: Callable[..., Runtime],
    tmp_path: pathlib.Path,
) -> None:
    rt = runtime()
    proc = stack.WebhookProcess(
        tmp_path,
        {
            "TETHER_RUNTIME_ID": rt.id,
            "TETHER_LISTENER_URL": listener.url,
            "TETHER_LISTENER_CA_FILE": str(listener_env.server_ca_file),
            "TETHER_CLIENT_CERT_FILE": str(rt.cert_file),
            "TETHER_CLIENT_KEY_FILE": str(rt.key_file),
            "TETHER_KUBECONFIG": str(skr.kubeconfig),
        },
    ).start()
    vwc = stack.vwc_body(
        f"tether-trace-{namespace}", proc.url + "/validate", proc.ca.cert_pem, namespace
    )
    stack.register(skr_api, vwc)
    core = client.CoreV1Api(skr_api)
    try:
        core.create_namespaced_config_map(
            namespace,
            client.V1ConfigMap(metadata=client.V1ObjectMeta(name="traced"), data={"k": "v1"}),
        )
        deadline = time.monotonic() + 30
        while (obj := listener_env.stored_one(rt.id, namespace, "traced")) is None:
            assert time.monotonic() < deadline, proc.log()  # until the apiserver calls us
            core.patch_namespaced_config_map(
                "traced", namespace, {"metadata": {"labels": {"n": str(time.monotonic_ns())}}}
            )
            time.sleep(0.3)
        header = obj["metadata"]["annotations"][apitypes.TRACEPARENT_ANNOTATION]
        stored = tracing.parse(header)
        assert stored is not None, header
        rv = obj["spec"]["resourceVersion"]
        writes = [
            a
            for a in listener.audit()
            if a.get("event") == "change"
            and a.get("object") == f"{namespace}/traced"
            and a.get("resourceVersion") == rv
            and a.get("outcome") == "persisted"
        ]
        assert [a["trace_id"] for a in writes] == [stored.trace_hex], writes
        runtime_trace = writes[0].get("runtime_trace_id", "")
        assert len(runtime_trace) == 32 and runtime_trace != stored.trace_hex, writes
        assert all("data" not in a and "v1" not in str(a) for a in writes)  # no record data
        assert "v1" not in header and stored.trace_hex not in str(obj["spec"])

        deadline = time.monotonic() + 45  # a worker merges its counts every 15 s by default
        while not any(
            r.get("name") == "traced" and r.get("traceId") == stored.trace_hex
            for r in _recent(listener_env, rt.id)
        ):
            assert time.monotonic() < deadline, _recent(listener_env, rt.id)
            time.sleep(0.5)
    finally:
        stack.unregister(skr_api, vwc["metadata"]["name"])
        rc = proc.stop()
    assert rc == 0, proc.log()


def _recent(env: Env, runtime_id: str) -> list[dict[str, Any]]:
    """The recent records of the runtime's RuntimeDelivery (the admin runtime page's table)."""
    res = apitypes.RUNTIME_DELIVERIES
    try:
        obj: Any = client.CustomObjectsApi(env.api).get_namespaced_custom_object(
            res.group, res.version, env.namespace, res.plural, heartbeat.lease_name(runtime_id)
        )
    except client.ApiException as e:
        if e.status == 404:
            return []
        raise
    return list((obj.get("status") or {}).get("recent") or [])
