"""One poll run against the real SKR plane and a real listener on the KCP plane: after a
listener outage the KCP holds exactly the runtime's state, tombstones included; a poller
record never overwrites a newer webhook record that raced it."""

from __future__ import annotations

import pathlib
from collections.abc import Callable, Iterator

import pytest
from kubernetes import client

from poller import scan
from testing import controlplane
from testing import webhookstack as stack
from testing.listenerenv import ListenerProcess, Runtime
from testing.pollerenv import (
    Env,
    InProcess,
    kcp_state,
    runtime_state,
    unique_selector,
    wait_until,
)

pytestmark = pytest.mark.processes


def make_cm(
    core: client.CoreV1Api, ns: str, name: str, data: dict[str, str], labels: dict[str, str]
) -> client.V1ConfigMap:
    return core.create_namespaced_config_map(
        ns, client.V1ConfigMap(metadata=client.V1ObjectMeta(name=name, labels=labels), data=data)
    )


def test_after_a_listener_outage_one_run_restores_exactly_the_runtime_state(
    listener_env: Env,
    runtime: Callable[..., Runtime],
    skr_api: client.ApiClient,
    namespace: str,
) -> None:
    rt = runtime()
    core = client.CoreV1Api(skr_api)
    labels, selector = unique_selector()
    for i in range(30):
        make_cm(core, namespace, f"cm-{i:02d}", {"v": "0"}, labels)
    lp = ListenerProcess(listener_env, "poller-outage")
    first = InProcess(rt, lp.url, skr_api, selector, page_size=7, batch_items=10)
    try:
        res = first.run()
        assert res.outcome == "ok", res
        assert res.differences == {"missing": 30, "changed": 0, "deleted": 0}
        assert kcp_state(listener_env, rt.id, namespace)[0] == runtime_state(
            core, namespace, selector
        )
    finally:
        lp.stop()

    # the listener is down: 50 changes happen (20 creates, 20 updates, 10 deletes)
    for i in range(30, 50):
        make_cm(core, namespace, f"cm-{i:02d}", {"v": "new"}, labels)
    for i in range(0, 20):
        core.patch_namespaced_config_map(
            f"cm-{i:02d}", namespace, {"data": {"v": "1", "w": str(i)}}
        )
    for i in range(20, 30):
        core.delete_namespaced_config_map(f"cm-{i:02d}", namespace)
    down = first.run()
    assert down.outcome == "listener-failed" and down.sent == 0
    first.close()

    lp2 = ListenerProcess(listener_env, "poller-outage-2")
    poller = InProcess(rt, lp2.url, skr_api, selector, page_size=7, batch_items=10)
    try:
        res = poller.run()
        assert res.outcome == "ok", res
        assert res.differences == {"missing": 20, "changed": 20, "deleted": 10}
        assert res.sent == 50 and res.scanned == 40
        live, dead = kcp_state(listener_env, rt.id, namespace)
        assert live == runtime_state(core, namespace, selector)
        assert sorted(dead) == [(namespace, f"cm-{i:02d}") for i in range(20, 30)]
        for spec in dead.values():
            assert spec["source"] == "poller" and "data" not in spec and spec["uid"]
        list_rv = int(core.list_namespaced_config_map(namespace, limit=1).metadata.resource_version)
        assert all(int(s["resourceVersion"]) <= list_rv for s in dead.values())
        # requests grow with pages and differences: 40 objects / 7 per page, 50 records / 10
        assert poller.sample("tether_poller_apiserver_requests_total") == 6
        assert poller.sample("tether_poller_listener_requests_total", call="changes") == 5
        assert poller.sample("tether_poller_listener_requests_total", call="state") == 1
        # the next run finds nothing and sends nothing (the state GET is its heartbeat)
        again = poller.run()
        assert (again.outcome, again.sent) == ("ok", 0)
        assert again.differences == {"missing": 0, "changed": 0, "deleted": 0}
        assert poller.sample("tether_poller_listener_requests_total", call="changes") == 5
        assert poller.sample("tether_poller_listener_requests_total", call="state") == 2
    finally:
        poller.close()
        lp2.stop()


class _RacingLister:
    """The real lister; after the first page is read, ``race`` runs before the poller
    sees the page (so the poller holds an older version than what happens meanwhile)."""

    def __init__(self, inner: scan.Lister, race: Callable[[], None]) -> None:
        self.inner, self.race = inner, race

    def pages(self) -> Iterator[scan.Page]:
        for i, page in enumerate(self.inner.pages()):
            if i == 0:
                self.race()
            yield page


def test_a_poller_record_never_overwrites_a_newer_webhook_record_that_raced_it(
    listener: ListenerProcess,
    listener_env: Env,
    runtime: Callable[..., Runtime],
    skr: controlplane.ControlPlane,
    skr_api: client.ApiClient,
    namespace: str,
    tmp_path: pathlib.Path,
) -> None:
    rt = runtime()
    core = client.CoreV1Api(skr_api)
    labels, selector = unique_selector()
    # created while no webhook watches: unknown to the KCP, so the poller will send it
    v1 = make_cm(core, namespace, "raced", {"v": "1"}, labels)
    wh = stack.WebhookProcess(
        tmp_path,
        {
            "TETHER_RUNTIME_ID": rt.id,
            "TETHER_LISTENER_URL": listener.url,
            "TETHER_LISTENER_CA_FILE": str(listener_env.server_ca_file),
            "TETHER_CLIENT_CERT_FILE": str(rt.cert_file),
            "TETHER_CLIENT_KEY_FILE": str(rt.key_file),
            "TETHER_KUBECONFIG": str(skr.kubeconfig),
            "TETHER_WEBHOOK_READBACK_SECONDS": "2",
            "TETHER_LABEL_SELECTOR": selector,  # the same filter as the poller's
        },
    ).start()
    vwc = stack.vwc_body(
        f"tether-poller-race-{namespace}", wh.url + "/validate", wh.ca.cert_pem, namespace
    )
    stack.register(skr_api, vwc)
    try:
        make_cm(core, namespace, "probe", {"n": "0"}, labels)
        n = [0]

        def webhook_delivered_probe() -> bool:
            n[0] += 1
            core.patch_namespaced_config_map("probe", namespace, {"data": {"n": str(n[0])}})
            return listener_env.stored_one(rt.id, namespace, "probe") is not None

        wait_until(webhook_delivered_probe, 30, "the webhook to be called", interval=0.3)
        last = core.read_namespaced_config_map("probe", namespace).metadata.resource_version
        wait_until(
            lambda: (
                (listener_env.stored_one(rt.id, namespace, "probe") or {})
                .get("spec", {})
                .get("resourceVersion")
                == last
            ),
            30,
            "the probe's last version",
        )
        newer: list[str] = []

        def race() -> None:
            cm = core.patch_namespaced_config_map("raced", namespace, {"data": {"v": "2"}})
            newer.append(cm.metadata.resource_version)
            wait_until(
                lambda: (
                    (listener_env.stored_one(rt.id, namespace, "raced") or {})
                    .get("spec", {})
                    .get("resourceVersion")
                    == newer[0]
                ),
                30,
                "the webhook's record",
            )

        poller = InProcess(
            rt, listener.url, skr_api, selector, lister=lambda inner: _RacingLister(inner, race)
        )
        try:
            res = poller.run()
        finally:
            poller.close()
        assert res.outcome == "ok"
        assert res.differences["missing"] == 1 and res.sent == 1  # it sent v1 (rv of the listing)
        assert poller.sample("tether_poller_records_sent_total", outcome="stale") == 1
        stored = listener_env.stored_one(rt.id, namespace, "raced")
        assert stored is not None
        spec = stored["spec"]
        assert (spec["resourceVersion"], spec["data"], spec["source"]) == (
            newer[0],
            {"v": "2"},
            "webhook",
        )
        assert int(newer[0]) > int(v1.metadata.resource_version)
        # the next run sees the listener's record is current: nothing is resent
        plain = InProcess(rt, listener.url, skr_api, selector)
        try:
            again = plain.run()
        finally:
            plain.close()
        assert (again.outcome, again.sent, again.differences["changed"]) == ("ok", 0, 0)
    finally:
        stack.unregister(skr_api, vwc["metadata"]["name"])
        assert wh.stop() == 0, wh.log()
