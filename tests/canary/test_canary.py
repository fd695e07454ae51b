"""One probe of the canary, in-process, on the session's real planes (no other process): the
runtime reached through its kubeconfig Secret in the KCP (the allow-list and bounds of
``skr_clients``), the records read as the listener writes them (``listener.storage.records``).

Shown: a record carrying the nonce ends the stored stage ok with its seconds; a chain that
stores nothing (no listener) counts ``timeout``; no kubeconfig Secret, or one the allow-list
refuses, counts ``write_failed`` without a word of the kubeconfig in the log; a missing Watch
counts ``read_failed`` and writes nothing."""

from __future__ import annotations

import base64
import dataclasses
import datetime
import logging
import threading
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client

from canary import canary, metrics, settings
from listener.storage import records
from testing import compassenv, controlplane, localnet, pollerenv, watchenv
from testing.listenerenv import create_kyma, install_crd
from tether.kube import apitypes, gateway, skr_clients

CM = {"group": "", "version": "v1", "resource": "configmaps", "kind": "ConfigMap"}
LABEL = "canary.tether-test.example.com/probe"
KEY = "tether-canary"


@dataclasses.dataclass
class Setup:
    kcp: gateway.Kube
    kcp_api: client.ApiClient
    core: client.CoreV1Api  # the runtime's
    ns: str  # KCP: Kyma CRs, the Watch, its records
    skr_ns: str
    runtime: str
    kyma: str
    watch: str

    def settings(self, **over: Any) -> settings.Settings:
        base: dict[str, Any] = dict(
            kcp_namespace=self.ns,
            runtime=self.runtime,
            watch=self.watch,
            namespace=self.skr_ns,
            label=(LABEL, "yes"),
            timeout=2.0,
            poll=0.1,
            runtimes=localnet.policy(timeout=5.0),
        )
        return settings.Settings(**{**base, **over})

    def canary(self, **over: Any) -> tuple[canary.Canary, metrics.Metrics]:
        s = self.settings(**over)
        meters = metrics.Metrics()
        skrs = skr_clients.SkrClients(self.kcp, self.ns, s.runtimes)
        return canary.Canary(self.kcp, skrs, s, meters), meters

    def nonce(self) -> str | None:
        try:
            cm = self.core.read_namespaced_config_map("tether-canary", self.skr_ns)
        except client.ApiException:
            return None
        return (cm.data or {}).get(KEY)

    def store(self, value: str) -> None:
        """What the listener would persist for the canary ConfigMap's change record."""
        now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        rec = {
            "apiVersion": "tether.kyma-project.io/v1",
            "kind": "ConfigMapChange",
            "runtimeId": self.runtime,
            "watch": self.watch,
            "namespace": self.skr_ns,
            "name": "tether-canary",
            "uid": str(uuid.uuid4()),
            "resourceVersion": "1",
            "observedAt": now,
            "deleted": False,
            "source": "webhook",
            "labels": {LABEL: "yes"},
            "annotations": {},
            "data": {KEY: value},
            "binaryData": {},
        }
        body = records.body(rec, self.ns)
        r = apitypes.RUNTIME_CONFIGMAPS
        client.CustomObjectsApi(self.kcp_api).create_namespaced_custom_object(
            r.group, r.version, self.ns, r.plural, body
        )


def count(meters: metrics.Metrics, name: str, **labels: str) -> float:
    return meters.registry.get_sample_value(name, labels) or 0.0


@pytest.fixture
def setup(
    skr: controlplane.ControlPlane,
    kcp: controlplane.ControlPlane,
    kcp_api: client.ApiClient,
    skr_api: client.ApiClient,
    kyma_crd: str,
    namespace: str,
    kcp_namespace: str,
) -> Iterator[Setup]:
    install_crd(kcp_api)
    watchenv.install_crd(kcp_api)
    runtime = f"rt-canary-{uuid.uuid4().hex[:8]}"
    kyma = create_kyma(kcp_api, kcp_namespace, runtime, None)["metadata"]["name"]
    watch = f"canary-{uuid.uuid4().hex[:8]}"
    watchenv.apply(
        kcp_api,
        watchenv.watch(
            watch,
            CM,
            kcp_namespace,
            selector={"matchLabels": {LABEL: "yes"}},
            namespaces=[namespace],
        ),
    )
    kcp_gw = gateway.from_kubeconfig(str(kcp.kubeconfig))
    yield Setup(
        kcp_gw,
        kcp_api,
        client.CoreV1Api(skr_api),
        kcp_namespace,
        namespace,
        runtime,
        kyma,
        watch,
    )
    kcp_gw.close()


def with_secret(s: Setup, skr: controlplane.ControlPlane) -> Setup:
    compassenv.create_kubeconfig_secret(s.kcp_api, s.ns, s.kyma, skr)
    return s


def test_a_record_with_the_nonce_ends_the_stored_stage_ok(
    setup: Setup, skr: controlplane.ControlPlane
) -> None:
    s = with_secret(setup, skr)
    can, meters = s.canary(timeout=20.0)
    done: list[canary.Report] = []
    t = threading.Thread(target=lambda: done.append(can.run()))
    t.start()
    try:
        value = pollerenv.wait_until(s.nonce, 15.0, "the canary ConfigMap written")
        s.store(value)
    finally:
        t.join(30)
    [report] = done
    assert report.ok and [(r.stage, r.outcome) for r in report.results] == [("stored", "ok")]
    seconds = report.results[0].seconds
    assert seconds is not None and 0 < seconds < 20
    assert count(meters, "tether_canary_seconds_count", stage="stored") == 1
    assert count(meters, "tether_canary_probes_total", stage="stored", outcome="ok") == 1
    last = count(meters, "tether_canary_last_success_timestamp_seconds", stage="stored")
    assert abs(last - datetime.datetime.now(datetime.UTC).timestamp()) < 30
    cm: Any = s.core.read_namespaced_config_map("tether-canary", s.skr_ns)
    assert cm.metadata.labels[LABEL] == "yes"
    assert cm.metadata.labels[apitypes.MANAGED_BY_LABEL] == "tether-canary"


def test_a_chain_that_stores_nothing_counts_a_timeout(
    setup: Setup, skr: controlplane.ControlPlane
) -> None:
    s = with_secret(setup, skr)
    can, meters = s.canary(timeout=1.0)
    first = can.run()
    assert not first.ok and [(r.stage, r.outcome) for r in first.results] == [("stored", "timeout")]
    value = s.nonce()
    assert value is not None and len(value) == 16
    can.run()  # the next probe writes a fresh nonce and times out again
    assert s.nonce() not in (None, value)
    assert count(meters, "tether_canary_probes_total", stage="stored", outcome="timeout") == 2
    assert count(meters, "tether_canary_seconds_count", stage="stored") == 0
    assert (
        meters.registry.get_sample_value(
            "tether_canary_last_success_timestamp_seconds", {"stage": "stored"}
        )
        is None
    )


def test_no_kubeconfig_secret_counts_write_failed(setup: Setup) -> None:
    can, meters = setup.canary(timeout=1.0)
    report = can.run()
    assert [(r.stage, r.outcome) for r in report.results] == [("stored", "write_failed")]
    assert count(meters, "tether_canary_probes_total", stage="stored", outcome="write_failed") == 1
    assert setup.nonce() is None


HOSTILE = b"""apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:6443"}}]
users: [{name: u, user: {token: canary-secret-token-1234,
  exec: {apiVersion: client.authentication.k8s.io/v1, command: /bin/sh, args: [-c, id]}}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
"""


def test_a_hostile_kubeconfig_counts_write_failed_and_is_never_logged(
    setup: Setup, caplog: pytest.LogCaptureFixture
) -> None:
    compassenv.create_kubeconfig_secret(setup.kcp_api, setup.ns, setup.kyma, HOSTILE)
    can, meters = setup.canary(timeout=1.0)
    with caplog.at_level(logging.DEBUG):
        report = can.run()
    assert [(r.stage, r.outcome) for r in report.results] == [("stored", "write_failed")]
    assert "not written" in caplog.text and "exec" in caplog.text  # the field, named
    for secret in ("canary-secret-token-1234", "/bin/sh", base64.b64encode(HOSTILE).decode()[:40]):
        assert secret not in caplog.text


def test_a_missing_watch_counts_read_failed_and_writes_nothing(
    setup: Setup, skr: controlplane.ControlPlane
) -> None:
    s = with_secret(setup, skr)
    can, meters = s.canary(watch="no-such-watch", timeout=1.0)
    report = can.run()
    assert [(r.stage, r.outcome) for r in report.results] == [("stored", "read_failed")]
    assert count(meters, "tether_canary_probes_total", stage="stored", outcome="read_failed") == 1
    assert s.nonce() is None


def test_no_probe_runtime_probes_nothing(setup: Setup) -> None:
    can, meters = setup.canary(runtime="")
    assert can.run().skipped
    assert count(meters, "tether_canary_enabled") == 0
    assert (
        sum(
            count(meters, "tether_canary_probes_total", stage=st, outcome=o)
            for st in metrics.STAGES
            for o in metrics.OUTCOMES
        )
        == 0
    )
