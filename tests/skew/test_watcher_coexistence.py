"""Tether next to lifecycle-manager's watcher (issue 27 item 3): both in one runtime.

lifecycle-manager installs its runtime-watcher webhook in every SKR (``testing.watcherpeer``
describes exactly what, from lifecycle-manager's sources). Tether runs beside it and replaces
nothing: the two share no object name, no webhook name, no namespace and no CA, and their
rules meet only where a Watcher CR of the KCP asks lifecycle-manager's watcher for the same
objects (a module watching ConfigMaps); then the apiserver calls both for one write.

On a real SKR plane: Tether's webhook (its manifest's configuration, scoped to the test's
namespace) and lifecycle-manager's ``skr-webhook`` configuration built as lifecycle-manager
builds it from two Watchers (its own, of Kyma CRs, and a module's, of labelled ConfigMaps),
each with its own serving CA, pointed at ``watcherpeer.WatcherPeer`` (a stand-in of the
runtime-watcher server: why, in its docstring). A customer ConfigMap write is admitted, each
webhook called over TLS verified with its own CA (both are failurePolicy Ignore: a call that
failed would pass silently, so the calls themselves are asserted), and the write reaches the
KCP through Tether; a Kyma CR write calls only the watcher. The latency of the write with
none, one and both webhooks: bench/two_webhooks.py (docs/webhook.md)."""

from __future__ import annotations

import pathlib
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import yaml
from kubernetes import client

from testing import controlplane, listenerenv, skewenv, watcherpeer
from testing import webhookstack as stack
from testing.listenerenv import Env, ListenerProcess

pytestmark = pytest.mark.processes  # starts processes of its own (testing/tiers.py)

SKR_MANIFESTS = controlplane.REPO_ROOT / "manifests" / "skr"


def _tether_skr_objects() -> tuple[set[tuple[str, str]], set[str], set[str]]:
    """(kind, name) of every object of manifests/skr and of the Secrets it mounts or reads;
    its webhook names; its namespaces."""
    objects: set[tuple[str, str]] = set()
    hooks: set[str] = set()
    namespaces = {"tether-system"}
    for path in sorted(SKR_MANIFESTS.rglob("*.yaml")):
        if path.name == "kustomization.yaml":
            continue
        for doc in (d for d in yaml.safe_load_all(path.read_text()) if d):
            objects.add((doc["kind"], doc["metadata"]["name"]))
            namespaces.add(doc["metadata"].get("namespace", "tether-system"))
            hooks.update(h["name"] for h in doc.get("webhooks", []))
            objects.update(("Secret", s) for s in _secret_names(doc))
    return objects, hooks, namespaces


def _secret_names(node: Any) -> Iterator[str]:
    if isinstance(node, dict):
        if isinstance(node.get("secretName"), str):
            yield node["secretName"]
        if isinstance(node.get("secretKeyRef"), dict):
            yield node["secretKeyRef"]["name"]
        for v in node.values():
            yield from _secret_names(v)
    elif isinstance(node, list):
        for v in node:
            yield from _secret_names(v)


def test_tether_and_lifecycle_managers_watcher_share_no_name_namespace_or_webhook() -> None:
    objects, hooks, namespaces = _tether_skr_objects()
    assert ("ValidatingWebhookConfiguration", "tether-configmaps") in objects  # the walk found them
    assert ("Secret", "tether-runtime-client") in objects
    klm = {(kind, name) for kind, _, name in watcherpeer.KLM_SKR_OBJECTS}
    assert objects & klm == set()
    assert watcherpeer.REMOTE_NAMESPACE not in namespaces
    assert hooks and watcherpeer.webhook_name(watcherpeer.KLM_WATCHER) not in hooks
    assert all(not h.endswith("." + watcherpeer.OPERATOR_GROUP) for h in hooks)
    # lifecycle-manager's own Watcher never matches a ConfigMap, Tether's webhook never a Kyma
    klm_rules = watcherpeer.vwc_body(b"ca", [watcherpeer.KLM_WATCHER], "https://x")["webhooks"][0][
        "rules"
    ]
    assert klm_rules == [
        {
            "apiGroups": ["operator.kyma-project.io"],
            "apiVersions": ["*"],
            "resources": ["kymas"],
            "operations": ["CREATE", "UPDATE", "DELETE"],
        }
    ]
    tether_rules = yaml.safe_load(stack.VWC_FILE.read_text())["webhooks"][0]["rules"]
    assert [r["resources"] for r in tether_rules] == [["configmaps"]]


@pytest.fixture
def env(listener_env: Env) -> Iterator[Env]:
    own = listenerenv.own_namespace(listener_env, "coexist")
    yield own
    listenerenv.remove_namespace(own)


def test_a_customer_write_passes_both_webhooks_and_reaches_the_kcp_through_tether(
    skr: controlplane.ControlPlane, skr_api: client.ApiClient, env: Env, tmp_path: pathlib.Path
) -> None:
    core, custom = client.CoreV1Api(skr_api), client.CustomObjectsApi(skr_api)
    controlplane.install_crds(skr_api, controlplane.KYMA_CRD)
    ns = skewenv.namespace(core, "coexist")
    rt = listenerenv.add_runtime(env, f"rt-coexist-{uuid.uuid4().hex[:6]}")
    listener = ListenerProcess(env, "coexist")
    wh = skewenv.webhook(skr, env, listener.url, rt, tmp_path / "tether")
    peer = watcherpeer.WatcherPeer(tmp_path).start()
    module_label = {"example.kyma-project.io/watched-by": f"module-{ns}"}
    module = watcherpeer.Watcher(
        "kcp-system", "configmaps", "example-module", module_label, "", "v1", "configmaps"
    )
    klm_vwc = watcherpeer.vwc_body(peer.ca.cert_pem, [watcherpeer.KLM_WATCHER, module], peer.url)
    tether_vwc = stack.vwc_body(f"tether-configmaps-{ns}", wh.url + "/validate", wh.ca.cert_pem, ns)
    assert (
        klm_vwc["webhooks"][0]["clientConfig"]["caBundle"]
        != tether_vwc["webhooks"][0]["clientConfig"]["caBundle"]
    )
    stack.register(skr_api, tether_vwc)
    stack.register(skr_api, klm_vwc)
    try:
        _customer_write(core, env, rt, ns, module_label, peer, wh)
        before = wh.metric("tether_webhook_admission_requests_total")
        labels = {**watcherpeer.WATCHED_BY, "operator.kyma-project.io/kyma-name": "default"}
        custom.create_namespaced_custom_object(
            "operator.kyma-project.io",
            "v1beta2",
            ns,
            "kymas",
            {
                "apiVersion": "operator.kyma-project.io/v1beta2",
                "kind": "Kyma",
                "metadata": {"name": "default", "labels": labels},
                "spec": {"channel": "regular"},
            },
        )
        skewenv.until(
            lambda: (
                watcherpeer.Call("lifecycle-manager", "Kyma", "CREATE", ns, "default")
                in peer.calls()
            ),
            30,
            lambda: f"the watcher never saw the Kyma CR: {peer.calls()}",
        )
        assert wh.metric("tether_webhook_admission_requests_total") == before
    finally:
        stack.unregister(skr_api, klm_vwc["metadata"]["name"])
        stack.unregister(skr_api, tether_vwc["metadata"]["name"])
        peer.stop()
        rc = wh.stop()
        listener.stop()
        core.delete_namespace(ns)
    assert rc == 0, wh.log()


def _customer_write(
    core: client.CoreV1Api,
    env: Env,
    rt: listenerenv.Runtime,
    ns: str,
    labels: dict[str, str],
    peer: watcherpeer.WatcherPeer,
    wh: stack.WebhookProcess,
) -> None:
    """A labelled customer ConfigMap: written (patched until the apiserver calls both new
    configurations), then one more write seen by both webhooks and stored in the KCP."""
    core.create_namespaced_config_map(
        ns,
        client.V1ConfigMap(
            metadata=client.V1ObjectMeta(name="customer", labels=labels), data={"k": "0"}
        ),
    )

    def seen_by_both(data: str | None = None) -> bool:
        rec = env.stored_one(rt.id, ns, "customer")
        ours = [
            c
            for c in peer.calls()
            if (c.manager, c.kind, c.namespace, c.name)
            == ("example-module", "ConfigMap", ns, "customer")
        ]
        return (
            bool(ours)
            and rec is not None
            and rec["spec"]["source"] == "webhook"
            and (data is None or rec["spec"]["data"] == {"k": data})
        )

    n = [0]

    def picked_up() -> bool:
        n[0] += 1
        core.patch_namespaced_config_map("customer", ns, {"data": {"k": str(n[0])}})
        return seen_by_both()

    skewenv.until(
        picked_up,
        60,
        lambda: (
            f"not seen by both: {len(peer.calls())} watcher calls, "
            f"last {peer.calls()[-2:]}\n{wh.log()}"
        ),
    )
    calls = len(peer.calls())
    core.patch_namespaced_config_map(
        "customer", ns, {"data": {"k": "final"}}
    )  # admitted: no exception
    skewenv.until(
        lambda: seen_by_both("final"), 30, lambda: f"the last write not stored: {wh.log()}"
    )
    assert peer.calls()[calls:] == [
        watcherpeer.Call("example-module", "ConfigMap", "UPDATE", ns, "customer")
    ]
    stored = env.stored_one(rt.id, ns, "customer")
    assert stored is not None and stored["spec"]["source"] == "webhook"
