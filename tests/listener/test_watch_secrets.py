"""No Secret value reaches the KCP by any Watch (issue 38, item 3), against the real planes.

A Watch author tries: the Watch CRD refuses a Watch whose kind is not its resource's (the
issue's ``resource: secrets, kind: ConfigMap, send.mode: full``) and a Secret Watch with a
value mode. What it may create (a Secret Watch in ``metadata`` and in ``digest`` mode, a
``full`` Watch of ConfigMaps with the Secret's labels) is run by the real poller against
the runtime plane, and a hostile runtime posts the Secret's value itself under each of
them. Then every record stored in the KCP, in every namespace, is searched for the value,
plain and base64.
"""

from __future__ import annotations

import base64
import json
import secrets
import uuid
from collections.abc import Callable

from kubernetes import client

from poller import metrics, run, scan, watchrun
from testing import watchenv
from testing.listenercalls import post
from testing.listenerenv import Env, ListenerProcess, Runtime
from testing.pollerenv import client_settings, wait_until
from tether.kube import apitypes, gateway
from tether.runtime import sender
from tether.wire import changes, digests, filters, watches, watchkinds, watchset, watchwire

SECRET = {"group": "", "version": "v1", "resource": "secrets", "kind": "Secret"}
DIGEST_KEY = secrets.token_bytes(32)  # the runtime's, as its client Secret would mount it
CM = {"group": "", "version": "v1", "resource": "configmaps", "kind": "ConfigMap"}


def refused(api: client.ApiClient, body: dict[str, object]) -> str:
    """The API server's refusal of creating ``body`` (a test failure when it is created)."""
    try:
        watchenv.apply(api, body)  # type: ignore[arg-type]
    except client.ApiException as e:
        assert e.status == 422, e.body
        return str(e.body)
    name = body["metadata"]["name"]  # type: ignore[index]
    raise AssertionError(f"the Watch {name} was created")


def test_the_crd_refuses_a_watch_whose_kind_is_not_its_resources(
    kcp_api: client.ApiClient, kcp_namespace: str
) -> None:
    watchenv.install_crd(kcp_api)
    disguised = watchenv.watch(
        "steal", {**SECRET, "kind": "ConfigMap"}, kcp_namespace, send={"mode": "full"}
    )
    assert "secrets: Secret" in refused(kcp_api, disguised)
    for resource, send in (
        ({**SECRET, "kind": "ConfigMap"}, {"mode": "metadata"}),
        ({**CM, "kind": "Secret"}, {"mode": "metadata"}),
        (
            {"group": "apps", "version": "v1", "resource": "deployments", "kind": "ConfigMap"},
            {"mode": "full"},
        ),
        ({**CM, "resource": "namespaces", "kind": "Namespace"}, {"mode": "full"}),
    ):
        refused(kcp_api, watchenv.watch("bad", resource, kcp_namespace, send=send))
    for mode in ("full", "keys", "exclude"):
        why = refused(
            kcp_api,
            watchenv.watch("bad", SECRET, kcp_namespace, send={"mode": mode, "keys": ["pw"]}),
        )
        assert "metadata or digest" in why
    # what the table holds is accepted, and a custom group is left to the runtime's discovery
    co = client.CustomObjectsApi(kcp_api)
    for group, table in watchkinds.BUILTIN.items():
        for plural, kind in table.items():
            body = watchenv.watch(
                "ok",
                {"group": group, "version": "v1", "resource": plural, "kind": kind},
                kcp_namespace,
                send={"mode": "metadata"},
            )
            co.create_namespaced_custom_object(
                apitypes.WATCHES.group,
                apitypes.WATCHES.version,
                kcp_namespace,
                apitypes.WATCHES.plural,
                body,
                dry_run="All",
            )
    created = watchenv.apply(
        kcp_api,
        watchenv.watch(
            "gadgets",
            {"group": "example.com", "version": "v1", "resource": "widgets", "kind": "Gadget"},
            kcp_namespace,
        ),
    )
    assert created["spec"]["resource"]["kind"] == "Gadget"


def test_no_secret_value_reaches_the_kcp_by_any_watch(
    skr_api: client.ApiClient,
    kcp_api: client.ApiClient,
    namespace: str,
    listener_env: Env,
    listener: ListenerProcess,
    runtime: Callable[..., Runtime],
) -> None:
    watchenv.install_crd(kcp_api)
    rt = runtime()
    password = secrets.token_hex(16)
    pw64 = base64.b64encode(password.encode()).decode()
    labels = {"app": f"db-{uuid.uuid4().hex[:6]}"}
    only_me = {
        "runtimes": {"selector": {"matchLabels": {apitypes.RUNTIME_ID_LABEL: rt.id}}},
        "namespaces": [namespace],
        "selector": {"matchLabels": labels},
    }
    tag = uuid.uuid4().hex[:6]
    ns = listener_env.namespace
    refused(
        kcp_api,
        watchenv.watch(
            f"steal-{tag}", {**SECRET, "kind": "ConfigMap"}, ns, send={"mode": "full"}, **only_me
        ),
    )
    refused(kcp_api, watchenv.watch(f"steal-{tag}", SECRET, ns, send={"mode": "full"}, **only_me))
    bodies = [
        watchenv.watch(f"meta-{tag}", SECRET, ns, send={"mode": "metadata"}, **only_me),
        watchenv.watch(f"digest-{tag}", SECRET, ns, send={"mode": "digest"}, **only_me),
        watchenv.watch(f"cms-{tag}", CM, ns, send={"mode": "full"}, **only_me),
    ]
    in_force = tuple(
        sorted((watches.parse(watchenv.apply(kcp_api, b)) for b in bodies), key=lambda w: w.name)
    )
    cms, digest, meta = in_force
    core = client.CoreV1Api(skr_api)
    core.create_namespaced_secret(
        namespace,
        client.V1Secret(
            metadata=client.V1ObjectMeta(
                name="db",
                labels=labels,
                annotations={
                    "example.com/copy": password,
                    "meta.helm.sh/release-name": "db",
                    watchkinds.LAST_APPLIED: json.dumps({"stringData": {"pw": password}}),
                },
            ),
            string_data={"pw": password},
        ),
    )
    core.create_namespaced_config_map(
        namespace,
        client.V1ConfigMap(
            metadata=client.V1ObjectMeta(name=watchwire.WIRE_CONFIGMAP),
            data={watchwire.WIRE_KEY: watchwire.to_wire(in_force)},
        ),
    )
    lc = sender.ListenerClient(client_settings(rt, listener.url))

    def known() -> bool:  # the listener reads the Watches every few seconds
        try:
            return all(lc.state_page(10, watch=w.name) is not None for w in in_force)
        except sender.ListenerError:
            return False

    try:
        wait_until(known, 30, "the listener holds the Watches in force")
        m = metrics.Metrics()
        kube = gateway.Kube(skr_api)
        flt = filters.ConfigMapFilter.build(filters.DEFAULT_IGNORED_NAMESPACES, "")
        lister = scan.Lister(kube, flt, page_size=50, timeout=30)
        runner = run.Runner(
            rt.id,
            run.RunSettings(),
            flt,
            lister,
            lc,
            m,
            identity=lister.identity,
            watches=watchrun.Watching(
                watchset.WatchSet(kube, namespace, ttl=0, digest_key=DIGEST_KEY), lister
            ),
        )
        assert runner.run().outcome == "ok"
        stored_meta = listener_env.stored_one(rt.id, namespace, "db", meta.name)
        stored_digest = listener_env.stored_one(rt.id, namespace, "db", digest.name)
        assert stored_meta is not None and stored_digest is not None  # the Secret was seen
        assert stored_meta["spec"]["annotations"] == {"meta.helm.sh/release-name": "db"}
        # keyed by the runtime's digest key: the KCP holds no digest a guess can be checked against
        assert stored_digest["spec"]["data"]["pw"] == digests.of(password.encode(), DIGEST_KEY)
        assert stored_digest["spec"]["data"]["pw"] != digests.of(password.encode())
        assert listener_env.stored_one(rt.id, namespace, "db", cms.name) is None

        # the runtime itself posts the value under each Watch: refused, nothing stored
        secret = {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {
                "namespace": namespace,
                "name": "db",
                "uid": "u-db",
                "resourceVersion": "999999999",
                "labels": labels,
            },
        }
        for w, kind, values in (
            (meta, "Secret", {"data": {"pw": pw64}}),
            (digest, "Secret", {"data": {"pw": password}}),
            (digest, "Secret", {"binaryData": {"pw": pw64}}),
            (meta, "Secret", {"annotations": {"example.com/copy": password}}),
            (cms, "Secret", {"data": {"pw": pw64}}),
        ):
            rec = dict(changes.from_object(secret, watch=w, runtime_id=rt.id, source="webhook"))
            rec["resource"] = {**rec["resource"], "kind": kind}
            rec.update(values)
            r = post(listener, rt, rec)
            assert r.status_code == 403, (w.name, values, r.text)
            assert password not in r.text and pw64 not in r.text
    finally:
        for b in bodies:
            watchenv.delete(kcp_api, ns, b["metadata"]["name"])
    every = client.CustomObjectsApi(kcp_api).list_cluster_custom_object(
        apitypes.RUNTIME_CONFIGMAPS.group,
        apitypes.RUNTIME_CONFIGMAPS.version,
        apitypes.RUNTIME_CONFIGMAPS.plural,
    )["items"]
    text = json.dumps(every)
    # every record anywhere on the KCP, not only this runtime's (other tests' records may carry
    # no labels)
    assert any(
        (o["metadata"].get("labels") or {}).get(apitypes.RUNTIME_ID_LABEL) == rt.id for o in every
    )
    for needle in (password, pw64, pw64.rstrip("=")):
        assert needle not in text
