"""Version skew (issue 24): a runtime whose webhook predates Watches keeps delivering the
ConfigMaps a Watch asks for while the KCP runs this version's listener, and what no Watch
asks for is refused; once the runtime runs this version (its Watch list rendered, one webhook
per Watch) it delivers the new kinds, and the key a record had before the upgrade is the key
it has after.

The runtime before Watches is a ``git archive`` of ``PREVIOUS`` (d18055a: its webhook sends
every ConfigMap as a v1 record), older than every release in releases.json and pinned on
purpose: it is the runtime of the v1-only wire, which this listener still takes (every
runtime without a Watch list still sends v1 records, ``tether.wire.conversion``), so this
test does not follow releases.json; the rounds against the previous release of the record are
tests/skew/test_release_skew.py. It runs via ``testing.skewenv.webhook``
(``testing.webhookstack.WebhookProcess(code=...)``); the listener is this checkout's, against
a real KCP, with mTLS and the runtime's certificate; the SKR apiserver calls both webhooks for
real."""

from __future__ import annotations

import pathlib
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kubernetes import client

from testing import controlplane, listenerenv, skewenv, watchenv
from testing import webhookstack as stack
from testing.listenerenv import Env, ListenerProcess
from tether.wire import watches, watchwire

pytestmark = pytest.mark.processes

PREVIOUS = "d18055a"  # the last landed commit before Watches (its webhook sends v1 records only)
GROUP = "skew.example.com"
WIDGET = watchenv.widgets(GROUP)
CRD = watchenv.widget_crd(GROUP)


@pytest.fixture(scope="module")
def previous_tree(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    return skewenv.tree(PREVIOUS, tmp_path_factory.mktemp("previous"))


@pytest.fixture
def kcp_env(listener_env: Env) -> Iterator[Env]:
    """A KCP namespace of its own whose Watches are the shipped one and one of widgets,
    both limited to the test's SKR namespace (set by the test)."""
    env = listenerenv.own_namespace(listener_env, "skew")
    watchenv.delete(env.api, env.namespace, "all-configmaps")
    yield env
    listenerenv.remove_namespace(env)


def _watches(env: Env, ns: str) -> tuple[watches.Watch, ...]:
    shipped = watchenv.load(watchenv.DEFAULT_WATCH, env.namespace)
    shipped["spec"]["namespaces"] = [ns]
    # its records in this test's namespace: the shipped storage namespace (tether-configuration)
    # is one per KCP, and this plane is shared by every test
    shipped["spec"].pop("storage", None)
    stored = [
        watchenv.apply(env.api, shipped),
        watchenv.apply(env.api, watchenv.watch("widgets", WIDGET, env.namespace, namespaces=[ns])),
    ]
    return tuple(watches.parse(w) for w in stored)


def test_a_runtime_of_the_previous_release_keeps_delivering_and_after_its_upgrade_sends_new_kinds(
    skr: controlplane.ControlPlane,
    skr_api: client.ApiClient,
    kcp_env: Env,
    previous_tree: pathlib.Path,
    tmp_path: pathlib.Path,
) -> None:
    core, custom = client.CoreV1Api(skr_api), client.CustomObjectsApi(skr_api)
    controlplane.install_crds(skr_api, CRD)
    ns, wire_ns = skewenv.namespace(core, "skew"), skewenv.namespace(core, "skeww")
    in_force = _watches(kcp_env, ns)
    rt = listenerenv.add_runtime(kcp_env, f"rt-skew-{uuid.uuid4().hex[:6]}")
    listener = ListenerProcess(kcp_env, "skew", TETHER_LISTENER_WATCH_CACHE_SECONDS="0")
    label = {watchenv.OPT_IN_LABEL: "true"}

    def stored(name: str, watch: str, pred: Callable[[dict[str, Any]], bool]) -> dict[str, Any]:
        return dict(
            skewenv.until(
                lambda: (
                    (o := kcp_env.stored_one(rt.id, ns, name, watch=watch))
                    and pred(o["spec"])
                    and o["spec"]
                ),
                30,
                lambda: (
                    f"{name} not stored under {watch}: "
                    f"{kcp_env.stored_one(rt.id, ns, name, watch=watch)}"
                ),
            )
        )

    old = skewenv.webhook(skr, kcp_env, listener.url, rt, tmp_path / "old", previous_tree)
    old_vwc = stack.vwc_body(f"tether-skew-old-{ns}", old.url + "/validate", old.ca.cert_pem, ns)
    stack.register(skr_api, old_vwc)
    try:
        # the previous webhook sends every ConfigMap as v1; the listener takes the labelled one
        # through the runtime's compat Watch (the shipped one) and refuses the other
        core.create_namespaced_config_map(
            ns,
            client.V1ConfigMap(
                metadata=client.V1ObjectMeta(name="settings", labels=label), data={"k": "v1"}
            ),
        )
        n = 0
        while (
            kcp_env.stored_one(rt.id, ns, "settings", watch="configuration") is None
        ):  # VWC pickup
            n += 1
            core.patch_namespaced_config_map(
                "settings", ns, {"metadata": {"annotations": {"n": str(n)}}}
            )
            time.sleep(0.3)
            assert n < 100, old.log()
        before = stored("settings", "configuration", lambda s: s["data"] == {"k": "v1"})
        assert before["watch"] == "configuration" and before["source"] == "webhook"
        core.create_namespaced_config_map(
            ns,
            client.V1ConfigMap(
                metadata=client.V1ObjectMeta(name="private"), data={"password": "not-for-the-kcp"}
            ),
        )
        skewenv.until(
            lambda: (
                listenerenv.metric_value(
                    listener.metrics(),
                    "tether_listener_watch_refusals_total",
                    reason="watch_violation",
                )
                >= 1
            ),
            30,
            lambda: old.log() + listener.log_file.read_text()[-3000:],
        )
        assert kcp_env.stored_one(rt.id, ns, "private", watch="configuration") is None
        assert not [o for o in kcp_env.stored(rt.id) if "not-for-the-kcp" in str(o)]
    finally:
        stack.unregister(skr_api, old_vwc["metadata"]["name"])
        assert old.stop() == 0, old.log()

    # the upgrade: the runtime's Watch list and one webhook per Watch, as the enroller renders
    core.create_namespaced_config_map(
        wire_ns,
        client.V1ConfigMap(
            metadata=client.V1ObjectMeta(name=watchwire.WIRE_CONFIGMAP),
            data={watchwire.WIRE_KEY: watchwire.to_wire(in_force)},
        ),
    )
    new = skewenv.webhook(
        skr,
        kcp_env,
        listener.url,
        rt,
        tmp_path / "new",
        controlplane.REPO_ROOT,
        TETHER_WATCHES_CONFIGMAP=f"{wire_ns}/{watchwire.WIRE_CONFIGMAP}",
    )
    template = stack.vwc_body("x", new.url + "/validate", new.ca.cert_pem, ns)["webhooks"][0]
    new_vwc = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": f"tether-skew-new-{ns}"},
        "webhooks": watchwire.webhook_entries(in_force, template),
    }
    stack.register(skr_api, new_vwc)
    try:
        n = 0
        while kcp_env.stored_one(rt.id, ns, "settings", watch="configuration")["spec"]["data"] != {
            "k": "v2"
        }:
            n += 1
            core.patch_namespaced_config_map(
                "settings", ns, {"data": {"k": "v2"}, "metadata": {"annotations": {"m": str(n)}}}
            )
            time.sleep(0.3)
            assert n < 100, new.log()
        after = stored("settings", "configuration", lambda s: s["data"] == {"k": "v2"})
        assert after["resource"] == {"group": "", "version": "v1", "kind": "ConfigMap"}
        assert int(after["resourceVersion"]) > int(before["resourceVersion"])  # the same key, newer
        custom.create_namespaced_custom_object(
            GROUP,
            "v1",
            ns,
            "widgets",
            {
                "apiVersion": f"{GROUP}/v1",
                "kind": "Widget",
                "metadata": {"name": "w1"},
                "spec": {"size": 3},
            },
        )
        widget = stored("w1", "widgets", lambda s: True)
        assert widget["resource"] == {"group": GROUP, "version": "v1", "kind": "Widget"}
        assert widget["source"] == "webhook"
    finally:
        stack.unregister(skr_api, new_vwc["metadata"]["name"])
        rc = new.stop()
        listener.stop()
        for name in (ns, wire_ns):
            core.delete_namespace(name)
    assert rc == 0, new.log()
