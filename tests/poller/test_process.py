"""``tether poller`` processes against the real planes: leadership over a Lease (only the
holder runs jobs; kill it and the other takes over), the poller alone propagating changes
once the webhook's configuration is deleted from the runtime, and a listener outage ridden
out by the process (failed runs, backoff, then the exact state)."""

from __future__ import annotations

import pathlib
from collections.abc import Callable
from typing import Any

import pytest
import requests
from kubernetes import client

from testing import controlplane
from testing import webhookstack as stack
from testing.listenerenv import ListenerProcess, Runtime
from testing.pollerenv import (
    Env,
    PollerProcess,
    kcp_state,
    poller_env,
    runtime_state,
    unique_selector,
    wait_until,
)

pytestmark = pytest.mark.processes
Pollers = Callable[[str, dict[str, str]], PollerProcess]


def lease_holder(api: client.ApiClient, namespace: str, name: str) -> tuple[str | None, int]:
    try:
        lease: Any = client.CoordinationV1Api(api).read_namespaced_lease(name, namespace)
    except client.ApiException as e:
        if e.status == 404:
            return None, 0
        raise
    return lease.spec.holder_identity, lease.spec.lease_transitions or 0


class _SamePortListener(ListenerProcess):
    """A listener restarted on the port of a stopped one (the poller keeps its URL)."""

    def __init__(self, env: Env, name: str, port: int) -> None:
        self._fixed = port
        super().__init__(env, name, TETHER_LISTENER_BIND=f"127.0.0.1:{port}")

    def _wait(self) -> None:
        self.port, self.url = self._fixed, f"https://127.0.0.1:{self._fixed}"
        super()._wait()


def runs(p: PollerProcess, outcome: str | None = None) -> float:
    return p.metric("tether_poller_runs_total", **({"outcome": outcome} if outcome else {}))


def test_only_the_lease_holder_runs_jobs_and_the_other_takes_over_when_it_dies(
    listener: ListenerProcess,
    runtime: Callable[..., Runtime],
    skr: controlplane.ControlPlane,
    skr_api: client.ApiClient,
    least_privilege: pathlib.Path,
    pollers: Pollers,
) -> None:
    """With only the RBAC of manifests/skr (as the tether ServiceAccount), Lease in
    tether-system."""
    rt = runtime()
    _, selector = unique_selector()
    namespace = "tether-system"
    env = poller_env(
        rt,
        listener.url,
        skr,
        selector,
        namespace,
        TETHER_KUBECONFIG=str(least_privilege),
        TETHER_POLLER_INTERVAL_SECONDS="0.5",
        TETHER_POLLER_JITTER_SECONDS="0",
        TETHER_POLLER_LEASE_DURATION_SECONDS="3",
        TETHER_POLLER_RENEW_DEADLINE_SECONDS="2",
        TETHER_POLLER_RETRY_PERIOD_SECONDS="0.5",
    )
    a = pollers("poller-a", env)
    b = pollers("poller-b", env)
    by_name = {"poller-a": a, "poller-b": b}
    lease_name = env["TETHER_POLLER_LEASE_NAME"]
    holder = wait_until(
        lambda: lease_holder(skr_api, namespace, lease_name)[0], 30, "a Lease holder"
    )
    lead = by_name[holder]
    other = b if lead is a else a
    wait_until(lambda: runs(lead, "ok") >= 3, 30, "three runs of the leader")
    assert lead.metric("tether_poller_leader") == 1
    assert other.metric("tether_poller_leader") == 0
    assert runs(other) == 0  # the follower ran no job, not even a skipped one
    assert other.metric("tether_poller_listener_requests_total") == 0
    assert other.metric("tether_poller_apiserver_requests_total") == 0
    _, transitions = lease_holder(skr_api, namespace, lease_name)

    lead.kill()  # no chance to release the Lease: the other waits for it to expire
    wait_until(
        lambda: lease_holder(skr_api, namespace, lease_name)[0] == other.identity,
        30,
        "the other poller to take the Lease",
    )
    wait_until(lambda: runs(other, "ok") >= 2, 30, "runs of the new leader")
    assert other.metric("tether_poller_leader") == 1
    assert lease_holder(skr_api, namespace, lease_name)[1] == transitions + 1
    assert other.metric("tether_poller_last_success_timestamp_seconds") > 0


def test_with_the_webhook_configuration_deleted_the_poller_alone_propagates_changes(
    listener: ListenerProcess,
    listener_env: Env,
    runtime: Callable[..., Runtime],
    skr: controlplane.ControlPlane,
    skr_api: client.ApiClient,
    namespace: str,
    pollers: Pollers,
    tmp_path: pathlib.Path,
) -> None:
    rt = runtime()
    core = client.CoreV1Api(skr_api)
    labels, selector = unique_selector()
    wh = stack.WebhookProcess(
        tmp_path,
        {
            "TETHER_RUNTIME_ID": rt.id,
            "TETHER_LISTENER_URL": listener.url,
            "TETHER_LISTENER_CA_FILE": str(listener_env.server_ca_file),
            "TETHER_CLIENT_CERT_FILE": str(rt.cert_file),
            "TETHER_CLIENT_KEY_FILE": str(rt.key_file),
            "TETHER_KUBECONFIG": str(skr.kubeconfig),
            "TETHER_LABEL_SELECTOR": selector,
            "TETHER_WEBHOOK_READBACK_SECONDS": "2",
        },
    ).start()
    vwc = stack.vwc_body(
        f"tether-poller-only-{namespace}", wh.url + "/validate", wh.ca.cert_pem, namespace
    )
    stack.register(skr_api, vwc)
    registered = True

    def cm(name: str, data: dict[str, str]) -> None:
        core.create_namespaced_config_map(
            namespace,
            client.V1ConfigMap(metadata=client.V1ObjectMeta(name=name, labels=labels), data=data),
        )

    def admitted() -> float:
        return wh.metric("tether_webhook_admission_requests_total")

    try:
        cm("kept", {"v": "0"})
        cm("to-delete", {"v": "0"})
        n = [0]

        def delivered_by_webhook() -> bool:  # until the apiserver calls the webhook
            n[0] += 1
            core.patch_namespaced_config_map("kept", namespace, {"data": {"v": f"w{n[0]}"}})
            rec = listener_env.stored_one(rt.id, namespace, "kept")
            return rec is not None and rec["spec"]["source"] == "webhook"

        wait_until(delivered_by_webhook, 30, "the webhook path to deliver", interval=0.3)
        p = pollers(
            "poller-only",
            poller_env(
                rt,
                listener.url,
                skr,
                selector,
                namespace,
                TETHER_POLLER_INTERVAL_SECONDS="2",
                TETHER_POLLER_JITTER_SECONDS="0.2",
                TETHER_POLLER_LEASE_DURATION_SECONDS="3",
            ),
        )
        wait_until(lambda: runs(p, "ok") >= 1, 30, "a first poll run")

        stack.unregister(skr_api, vwc["metadata"]["name"])
        registered = False

        def webhook_no_longer_called() -> bool:  # the apiserver drops the configuration
            before = admitted()
            n[0] += 1
            core.patch_namespaced_config_map("kept", namespace, {"data": {"v": f"w{n[0]}"}})
            return admitted() == before

        wait_until(webhook_no_longer_called, 30, "the apiserver to stop calling the webhook")
        calls = admitted()

        cm("created-later", {"v": "1", "secret": "s3cr3t-value-never-logged"})
        core.patch_namespaced_config_map("kept", namespace, {"data": {"v": "final"}})
        core.delete_namespaced_config_map("to-delete", namespace)
        at_change = runs(p, "ok")
        # the second run completing after the changes started after them: by then the KCP
        # holds them (the changes arrive within one interval plus one run)
        wait_until(lambda: runs(p, "ok") >= at_change + 2, 60, "two more poll runs")
        live, dead = kcp_state(listener_env, rt.id, namespace)
        assert live == runtime_state(core, namespace, selector)
        assert live[(namespace, "kept")]["data"] == {"v": "final"}
        assert list(dead) == [(namespace, "to-delete")]
        stored = {(s["name"]): s["source"] for s in (o["spec"] for o in listener_env.stored(rt.id))}
        assert stored["created-later"] == stored["kept"] == stored["to-delete"] == "poller"
        assert admitted() == calls  # the webhook saw none of it
        assert p.metric("tether_poller_differences_total", type="deleted") >= 1
        assert p.metric("tether_poller_records_sent_total", outcome="persisted") >= 3
        assert "s3cr3t-value-never-logged" not in p.log_path.read_text()  # data never logged
    finally:
        if registered:
            stack.unregister(skr_api, vwc["metadata"]["name"])
        assert wh.stop() == 0, wh.log()


def test_the_poller_process_rides_out_a_listener_outage_and_then_restores_the_state(
    listener_env: Env,
    runtime: Callable[..., Runtime],
    skr: controlplane.ControlPlane,
    skr_api: client.ApiClient,
    namespace: str,
    pollers: Pollers,
) -> None:
    rt = runtime()
    core = client.CoreV1Api(skr_api)
    labels, selector = unique_selector()
    for i in range(10):
        core.create_namespaced_config_map(
            namespace,
            client.V1ConfigMap(
                metadata=client.V1ObjectMeta(name=f"o-{i}", labels=labels), data={"v": "0"}
            ),
        )
    lp = ListenerProcess(listener_env, "poller-proc-outage")
    restarted: ListenerProcess | None = None
    try:
        p = pollers(
            "poller-outage",
            poller_env(
                rt,
                lp.url,
                skr,
                selector,
                namespace,
                TETHER_POLLER_INTERVAL_SECONDS="0.5",
                TETHER_POLLER_JITTER_SECONDS="0",
                TETHER_POLLER_LEASE_DURATION_SECONDS="3",
                TETHER_POLLER_BACKOFF_BASE_SECONDS="1",
                TETHER_POLLER_BACKOFF_CAP_SECONDS="2",
                TETHER_POLLER_SEND_ATTEMPTS="1",
                TETHER_LISTENER_TIMEOUT_SECONDS="2",
            ),
        )
        wait_until(
            lambda: (
                kcp_state(listener_env, rt.id, namespace)[0]
                == runtime_state(core, namespace, selector)
            ),
            30,
            "the first runs to deliver",
        )
        lp.stop()
        for i in range(10, 15):
            core.create_namespaced_config_map(
                namespace,
                client.V1ConfigMap(
                    metadata=client.V1ObjectMeta(name=f"o-{i}", labels=labels), data={"v": "1"}
                ),
            )
        for i in range(0, 5):
            core.patch_namespaced_config_map(f"o-{i}", namespace, {"data": {"v": "2"}})
        for i in range(5, 8):
            core.delete_namespaced_config_map(f"o-{i}", namespace)
        wait_until(
            lambda: runs(p, "listener-failed") >= 2, 30, "runs failing while the listener is down"
        )
        assert p.proc is not None and p.proc.poll() is None  # still running
        assert requests_ok(p)
        restarted = _SamePortListener(listener_env, "poller-proc-outage-2", lp.port)

        def restored() -> bool:
            live, dead = kcp_state(listener_env, rt.id, namespace)
            return live == runtime_state(core, namespace, selector) and sorted(dead) == [
                (namespace, f"o-{i}") for i in range(5, 8)
            ]

        wait_until(restored, 60, "the exact runtime state, tombstones included, after the outage")
        assert p.metric("tether_poller_differences_total", type="changed") >= 5
        assert p.metric("tether_poller_differences_total", type="deleted") >= 3
    finally:
        if restarted is not None:
            restarted.stop()
        lp.stop()


def requests_ok(p: PollerProcess) -> bool:
    """Probes stay up while runs fail: the process is alive, only its peer is not."""
    return all(
        requests.get(p.url + path, timeout=5).status_code == 200 for path in ("/healthz", "/readyz")
    )
