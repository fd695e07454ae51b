"""The admission path in Watch mode through the Flask app, its Watch list read from a real
SKR apiserver (webhook.scope.Scope over tether.wire.watchset): entries per Watch, the skips, the
environment's scope when the list is absent, nothing forwarded while the list could never
be read (RBAC refuses it), and a changed list taking effect at the next read."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client
from prometheus_client import CollectorRegistry

from testing import controlplane
from testing.webhookapp import app_settings
from tether.kube import gateway
from tether.runtime import sender
from tether.wire import conversion, watches, watchset, watchwire
from webhook import app, forwarder, keyqueue, metrics, readback, scope
from webhook import services as services_mod

CM = {"group": "", "version": "v1", "resource": "configmaps", "kind": "ConfigMap"}
WIDGET = {"group": "scope.example.com", "version": "v1", "resource": "widgets", "kind": "Widget"}


def _watch(name: str, resource: dict[str, str], **spec: Any) -> watches.Watch:
    return watches.parse({"metadata": {"name": name}, "spec": {"resource": resource, **spec}})


CONF = _watch("conf", CM, selector={"matchLabels": {"conf": "yes"}})
META = _watch("meta", CM, send={"mode": "metadata"}, namespaces=["app"])
WIDGETS = _watch("widgets", WIDGET)


def review(
    resource: dict[str, str],
    labels: dict[str, str] | None = None,
    ns: str = "app",
    name: str = "o",
    op: str = "CREATE",
) -> dict[str, Any]:
    obj = {
        "metadata": {"name": name, "namespace": ns, "uid": "u1", "labels": labels or {}},
        "data": {"k": "v"},
    }
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "r1",
            "operation": op,
            "namespace": ns,
            "name": name,
            "kind": {k: resource[k] for k in ("group", "version", "kind")},
            "resource": {k: resource[k] for k in ("group", "version", "resource")},
            "object": obj,
            "oldObject": None,
        },
    }


@pytest.fixture
def wire_ns(skr_api: client.ApiClient) -> Iterator[str]:
    core = client.CoreV1Api(skr_api)
    ns = f"wl-{uuid.uuid4().hex[:8]}"
    controlplane.retry_busy(
        lambda: core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=ns)))
    )
    yield ns
    core.delete_namespace(ns)


def _write(api: client.ApiClient, ns: str, in_force: tuple[watches.Watch, ...]) -> None:
    core = client.CoreV1Api(api)
    body = client.V1ConfigMap(
        metadata=client.V1ObjectMeta(name=watchwire.WIRE_CONFIGMAP),
        data={watchwire.WIRE_KEY: watchwire.to_wire(in_force)},
    )
    try:
        core.create_namespaced_config_map(ns, body)
    except client.ApiException as e:
        if e.status != 409:
            raise
        core.replace_namespaced_config_map(watchwire.WIRE_CONFIGMAP, ns, body)


def _app(kubeconfig: str, ns: str) -> tuple[Any, services_mod.Services, scope.Scope]:
    s = app_settings()
    registry = CollectorRegistry()
    ws = watchset.WatchSet(gateway.from_kubeconfig(kubeconfig), ns, ttl=3600)
    sc = scope.Scope(ws, 3600)
    svc = services_mod.Services(
        s, keyqueue.KeyQueue(100), metrics.build(registry), registry, watch_scope=sc
    )
    return app.create_app(s, svc).test_client(), svc, sc


def _post(c: Any, doc: dict[str, Any]) -> dict[str, Any]:
    r = c.post("/validate", data=json.dumps(doc), content_type="application/json")
    assert r.status_code == 200
    body: dict[str, Any] = r.get_json()
    assert body["response"] == {"uid": "r1", "allowed": True}
    return body


def _outcomes(c: Any) -> dict[str, float]:
    out: dict[str, float] = {}
    for line in c.get("/metrics").get_data(as_text=True).splitlines():
        if line.startswith("tether_webhook_admission_requests_total{"):
            outcome = line.split('outcome="')[1].split('"')[0]
            out[outcome] = out.get(outcome, 0) + float(line.rsplit(" ", 1)[1])
    return out


def test_entries_per_watch_and_the_skips(
    skr: controlplane.ControlPlane, skr_api: client.ApiClient, wire_ns: str
) -> None:
    _write(skr_api, wire_ns, (CONF, META, WIDGETS))
    c, svc, sc = _app(str(skr.kubeconfig), wire_ns)
    assert sc.settled() and sc.current() == (CONF, META, WIDGETS)
    _post(c, review(CM, {"conf": "yes"}, name="both"))  # conf and meta
    _post(c, review(CM, {}, name="meta-only"))  # meta only: conf's selector does not match
    _post(c, review(CM, {"conf": "yes"}, ns="other", name="conf-only"))  # meta: not its namespace
    _post(c, review(WIDGET, {}, name="w"))
    _post(c, review(CM, {}, ns="other", name="nobody"))  # no Watch admits it
    _post(
        c, review({**CM, "resource": "secrets", "kind": "Secret"}, {"conf": "yes"})
    )  # no Watch covers it
    keys = sorted(i.key for i in svc.queue.take(100, 0))
    assert keys == [
        ("app", "both", "conf"),
        ("app", "both", "meta"),
        ("app", "meta-only", "meta"),
        ("app", "w", "widgets"),
        ("other", "conf-only", "conf"),
    ]
    assert _outcomes(c) == {"enqueued": 4, "not-watched": 1, "other-kind": 1}

    _write(
        skr_api, wire_ns, (WIDGETS,)
    )  # the enroller changed the list: effective at the next read
    assert sc.refresh() == (WIDGETS,)
    _post(c, review(CM, {"conf": "yes"}, name="later"))
    assert len(svc.queue) == 0 and _outcomes(c)["other-kind"] == 2


def test_without_the_list_the_environments_scope_applies(
    skr: controlplane.ControlPlane, wire_ns: str
) -> None:
    c, svc, sc = _app(str(skr.kubeconfig), wire_ns)  # no tether-watches in wire_ns
    assert sc.settled() and sc.current() is None
    _post(c, review(CM, {}, name="any"))
    _post(c, review(WIDGET, {}, name="w"))
    # the built-in Watch: ConfigMaps only (sent as v1 records)
    assert [i.key for i in svc.queue.take(100, 0)] == [("app", "any", conversion.BUILTIN_NAME)]
    assert _outcomes(c) == {"enqueued": 1, "other-kind": 1}
    _post(c, review(CM, {}, name="elsewhere", ns="kube-system"))
    assert _outcomes(c)["not-watched"] == 1
    assert not sc._wake.is_set()  # the built-in Watch's skips ask for no read of the list


def test_nothing_is_forwarded_while_the_list_could_never_be_read(
    skr: controlplane.ControlPlane, skr_api: client.ApiClient, wire_ns: str
) -> None:
    _write(skr_api, wire_ns, (CONF,))
    nobody = skr.issue_client_cert(f"nobody-{uuid.uuid4().hex[:6]}")  # no RBAC: 403
    c, svc, sc = _app(str(nobody), wire_ns)
    assert not sc.settled() and sc.current() is None
    _post(c, review(CM, {"conf": "yes"}))
    assert len(svc.queue) == 0 and _outcomes(c) == {"watches-unknown": 1}


def test_a_kind_it_may_not_read_is_dropped_at_once(
    skr: controlplane.ControlPlane, skr_api: client.ApiClient, wire_ns: str
) -> None:
    """The webhook's own grant (the bundle's ClusterRole: ConfigMaps) and a Watch of Secrets
    nobody granted: its entries are dropped at the first refusal, counted, not retried for a
    minute; the ConfigMap Watch's entries are read and sent; without Watches a refusal is
    retried as before."""
    user = f"webhook-{uuid.uuid4().hex[:6]}"
    kubeconfig = skr.issue_client_cert(user)
    rbac = client.RbacAuthorizationV1Api(skr_api)
    rbac.create_cluster_role(
        {
            "metadata": {"name": user},
            "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list"]}],
        }
    )
    rbac.create_cluster_role_binding(
        {
            "metadata": {"name": user},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": user,
            },
            "subjects": [{"kind": "User", "name": user, "apiGroup": "rbac.authorization.k8s.io"}],
        }
    )
    core = client.CoreV1Api(skr_api)
    try:
        core.create_namespaced_secret(
            wire_ns,
            client.V1Secret(metadata=client.V1ObjectMeta(name="o"), string_data={"pw": "x"}),
        )
        core.create_namespaced_config_map(
            wire_ns,
            client.V1ConfigMap(
                metadata=client.V1ObjectMeta(name="o", labels={"conf": "yes"}), data={"k": "v"}
            ),
        )
        secrets = _watch(
            "secrets", {**CM, "resource": "secrets", "kind": "Secret"}, send={"mode": "digest"}
        )
        s = app_settings()
        m = metrics.build(CollectorRegistry())
        fwd = forwarder.Forwarder(
            s.forwarder,
            "rt",
            keyqueue.KeyQueue(10),
            readback.Reader(gateway.from_kubeconfig(str(kubeconfig))),
            sender.ListenerClient(s.listener),
            m,
            in_force=lambda: (CONF, secrets),
        )

        def entry(w: watches.Watch) -> forwarder._Pending:
            return forwarder._Pending(
                keyqueue.Item(wire_ns, "o", "u", "UPDATE", "0", 0.0, watch=w), time.monotonic()
            )

        assert fwd._resolve(entry(secrets)) is None
        assert m.readbacks.labels("forbidden")._value.get() == 1
        rec = fwd._resolve(entry(CONF))
        assert isinstance(rec, dict) and rec["watch"] == "conf" and rec["data"] == {"k": "v"}
        # no Watch list: the built-in Watch's ConfigMaps, refused, are dropped the same way
        fwd._in_force = lambda: (conversion.BUILTIN,)
        fwd.reader = readback.Reader(
            gateway.from_kubeconfig(str(skr.issue_client_cert(f"{user}-x")))
        )
        assert fwd._resolve(entry(conversion.BUILTIN)) is None
        assert m.readbacks.labels("forbidden")._value.get() == 2
    finally:
        rbac.delete_cluster_role_binding(user)
        rbac.delete_cluster_role(user)


def test_a_call_no_watch_here_takes_reads_the_list_again_at_once(
    skr: controlplane.ControlPlane, skr_api: client.ApiClient, wire_ns: str
) -> None:
    """The registration (rendered from the KCP's Watches) is ahead of this webhook's list:
    the call it makes for a kind no Watch here covers is skipped, and nudges the list's
    reader, so the next one is taken within a second or so rather than the list's ttl."""
    _write(skr_api, wire_ns, (CONF,))
    c, svc, sc = _app(str(skr.kubeconfig), wire_ns)  # ttl 3600 s
    sc.start()
    try:
        _write(skr_api, wire_ns, (CONF, WIDGETS))  # the enroller renders a new Watch
        t0 = time.monotonic()
        _post(c, review(WIDGET))
        while [w.name for w in sc.current() or ()] != ["conf", "widgets"]:
            assert time.monotonic() - t0 < 10, "the list was not read again"
            time.sleep(0.05)
        print(f"read again {time.monotonic() - t0:.2f} s after the call")
        _post(c, review(WIDGET))
        assert _outcomes(c) == {"other-kind": 1, "enqueued": 1} and len(svc.queue) == 1
    finally:
        sc.stop()
