"""End to end with the real listener: SKR apiserver -> webhook (gunicorn) -> listener
(gunicorn, mTLS, the runtime's certificate from the KCP CA) -> RuntimeConfigMap in the KCP.

Reuses the listener tests' fixtures (a listener process, a runtime with a Kyma CR and a
matching client certificate)."""

from __future__ import annotations

import json
import pathlib
import time
from collections.abc import Callable
from typing import Any

from kubernetes import client

from listener.fleet import watchlist
from testing import controlplane, watchenv
from testing import webhookstack as stack
from testing.listenerenv import COMPAT_WATCH, Env, ListenerProcess, Runtime
from tether.kube import apitypes
from tether.wire import digests, watches, watchwire


def _stored(
    env: Env,
    rid: str,
    ns: str,
    name: str,
    predicate: Callable[[dict[str, Any]], bool],
    watch: str = COMPAT_WATCH,
) -> dict[str, Any]:
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        obj = env.stored_one(rid, ns, name, watch)
        if obj is not None and predicate(obj["spec"]):
            return dict(obj["spec"])
        time.sleep(0.1)
    raise AssertionError(f"not stored as expected: {env.stored_one(rid, ns, name, watch)}")


def test_changes_reach_the_kcp_through_the_real_listener(
    skr: controlplane.ControlPlane,
    skr_api: client.ApiClient,
    namespace: str,
    listener_env: Env,
    listener: ListenerProcess,  # noqa: F811
    runtime: Callable[..., Runtime],
    tmp_path: pathlib.Path,
) -> None:  # noqa: F811
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
        f"tether-test-{namespace}", proc.url + "/validate", proc.ca.cert_pem, namespace
    )
    stack.register(skr_api, vwc)
    core = client.CoreV1Api(skr_api)
    try:
        created = core.create_namespaced_config_map(
            namespace,
            client.V1ConfigMap(metadata=client.V1ObjectMeta(name="app"), data={"k": "v1"}),
        )
        deadline = time.monotonic() + 30
        rv = created.metadata.resource_version
        while (
            listener_env.stored_one(rt.id, namespace, "app") is None
        ):  # until the apiserver calls us
            assert time.monotonic() < deadline, proc.log()
            rv = core.patch_namespaced_config_map(
                "app",
                namespace,
                {"data": {"k": "v1"}, "metadata": {"labels": {"n": str(time.monotonic_ns())}}},
            ).metadata.resource_version
            time.sleep(0.3)
        spec = _stored(listener_env, rt.id, namespace, "app", lambda s: s["resourceVersion"] == rv)
        assert spec["data"] == {"k": "v1"} and spec["source"] == "webhook"

        updated = core.patch_namespaced_config_map("app", namespace, {"data": {"k": "v2"}})
        spec = _stored(
            listener_env,
            rt.id,
            namespace,
            "app",
            lambda s: s["resourceVersion"] == updated.metadata.resource_version,
        )
        assert spec["data"] == {"k": "v2"} and spec["deleted"] is False

        core.delete_namespaced_config_map("app", namespace)
        spec = _stored(listener_env, rt.id, namespace, "app", lambda s: s["deleted"] is True)
        assert int(spec["resourceVersion"]) >= int(updated.metadata.resource_version)
        assert proc.metric("tether_webhook_forwarded_records_total", outcome="persisted") >= 3
    finally:
        stack.unregister(skr_api, vwc["metadata"]["name"])
        rc = proc.stop()
    assert rc == 0, proc.log()


def test_watch_mode_through_the_real_listener(
    skr: controlplane.ControlPlane,
    skr_api: client.ApiClient,
    namespace: str,
    listener_env: Env,
    listener: ListenerProcess,  # noqa: F811
    runtime: Callable[..., Runtime],
    tmp_path: pathlib.Path,
) -> None:  # noqa: F811
    """The runtime's Watch list and the KCP's Watches agree (as the enroller makes them):
    a labelled ConfigMap is stored under its Watch, an unlabelled one nowhere, a Secret
    under a digest Watch as digests only, relabelling out deletes the stored record; the
    listener refuses nothing the webhook sends."""
    rt = runtime()
    only_me = {
        "runtimes": {"selector": {"matchLabels": {apitypes.RUNTIME_ID_LABEL: rt.id}}},
        "namespaces": [namespace],
    }
    conf, sec = f"zz-conf-{rt.id}"[:63], f"zz-sec-{rt.id}"[:63]
    bodies = [
        watchenv.watch(
            conf,
            {"group": "", "version": "v1", "resource": "configmaps", "kind": "ConfigMap"},
            listener_env.namespace,
            selector={"matchLabels": {"conf": "yes"}},
            **only_me,
        ),
        watchenv.watch(
            sec,
            {"group": "", "version": "v1", "resource": "secrets", "kind": "Secret"},
            listener_env.namespace,
            send={"mode": "digest"},
            **only_me,
        ),
    ]
    in_force = tuple(watches.parse(watchenv.apply(listener_env.api, b)) for b in bodies)
    applied = time.monotonic()
    core = client.CoreV1Api(skr_api)
    core.create_namespaced_config_map(
        namespace,
        client.V1ConfigMap(
            metadata=client.V1ObjectMeta(name=watchwire.WIRE_CONFIGMAP),
            data={watchwire.WIRE_KEY: watchwire.to_wire(in_force)},
        ),
    )
    proc = stack.WebhookProcess(
        tmp_path,
        {
            "TETHER_RUNTIME_ID": rt.id,
            "TETHER_LISTENER_URL": listener.url,
            "TETHER_LISTENER_CA_FILE": str(listener_env.server_ca_file),
            "TETHER_CLIENT_CERT_FILE": str(rt.cert_file),
            "TETHER_CLIENT_KEY_FILE": str(rt.key_file),
            "TETHER_KUBECONFIG": str(skr.kubeconfig),
            "TETHER_WATCHES_CONFIGMAP": f"{namespace}/{watchwire.WIRE_CONFIGMAP}",
        },
    ).start()
    template = stack.vwc_body("x", proc.url + "/validate", proc.ca.cert_pem, namespace)["webhooks"][
        0
    ]
    vwc = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": f"tether-test-{namespace}"},
        "webhooks": watchwire.webhook_entries(in_force, template),
    }
    stack.register(skr_api, vwc)
    # a listener worker reads the KCP's Watches again at once for a Watch it does not know,
    # but at most once per REFRESH_FLOOR (1 s): a record of a new Watch is refused as not in
    # force only within that second after the Watch was applied
    time.sleep(max(0.0, applied + watchlist.REFRESH_FLOOR + 0.2 - time.monotonic()))
    try:
        core.create_namespaced_config_map(
            namespace,
            client.V1ConfigMap(
                metadata=client.V1ObjectMeta(name="plain"), data={"k": "not-asked-for"}
            ),
        )
        core.create_namespaced_config_map(
            namespace,
            client.V1ConfigMap(
                metadata=client.V1ObjectMeta(name="app", labels={"conf": "yes"}), data={"k": "v1"}
            ),
        )
        deadline = time.monotonic() + 30
        while listener_env.stored_one(rt.id, namespace, "app", conf) is None:
            assert time.monotonic() < deadline, proc.log()  # until the apiserver calls us
            core.patch_namespaced_config_map(
                "app", namespace, {"metadata": {"labels": {"n": str(time.monotonic_ns())}}}
            )
            time.sleep(0.3)
        stored = listener_env.stored_one(rt.id, namespace, "app", conf)
        assert stored is not None and stored["metadata"]["labels"][watches.WATCH_LABEL] == conf
        assert stored["spec"]["data"] == {"k": "v1"}

        core.create_namespaced_secret(
            namespace,
            client.V1Secret(
                metadata=client.V1ObjectMeta(name="creds"), string_data={"pw": "hunter2-kcp"}
            ),
        )
        spec = _stored(listener_env, rt.id, namespace, "creds", lambda s: True, sec)
        assert spec["data"] == {"pw": digests.of(b"hunter2-kcp")}
        everything = json.dumps(listener_env.stored(rt.id))
        assert "hunter2-kcp" not in everything and "not-asked-for" not in everything

        moved = core.patch_namespaced_config_map(
            "app", namespace, {"metadata": {"labels": {"conf": "no"}}}
        )
        spec = _stored(listener_env, rt.id, namespace, "app", lambda s: s["deleted"] is True, conf)
        assert spec["resourceVersion"] == moved.metadata.resource_version
        assert all(
            listener_env.stored_one(rt.id, namespace, "plain", w) is None
            for w in (conf, sec, COMPAT_WATCH)
        )
        assert proc.metric("tether_webhook_forwards_total", result="permanent") == 0, proc.log()
        assert proc.metric("tether_webhook_forwarded_records_total", outcome="persisted") >= 3
    finally:
        stack.unregister(skr_api, vwc["metadata"]["name"])
        rc = proc.stop()
        for b in bodies:
            watchenv.delete(listener_env.api, listener_env.namespace, b["metadata"]["name"])
    assert rc == 0, proc.log()
