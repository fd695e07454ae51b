"""``tether_webhook_delivery_seconds``: from the admission that first enqueued a key to the
listener's acknowledgement of its record, with the real SKR apiserver calling the webhook
(gunicorn) and the real listener (or the recording receiver, to make the listener fail)."""

from __future__ import annotations

import contextlib
import pathlib
import time
from collections.abc import Callable, Iterator

import pytest
from kubernetes import client

from testing import controlplane
from testing import receiver as receiver_mod
from testing import webhookstack as stack
from testing.listenerenv import Env, ListenerProcess, Runtime
from tether.base import certs

pytestmark = pytest.mark.processes
COUNT = "tether_webhook_delivery_seconds_count"
SUM = "tether_webhook_delivery_seconds_sum"


@contextlib.contextmanager
def _webhook(
    tmp_path: pathlib.Path,
    skr: controlplane.ControlPlane,
    env: dict[str, str],
    api: client.ApiClient,
    namespace: str,
) -> Iterator[stack.WebhookProcess]:
    proc = stack.WebhookProcess(
        tmp_path,
        {
            "TETHER_KUBECONFIG": str(skr.kubeconfig),
            "TETHER_WEBHOOK_RETRY_BASE_SECONDS": "0.05",
            "TETHER_WEBHOOK_RETRY_CAP_SECONDS": "0.5",
            **env,
        },
    ).start()
    vwc = stack.vwc_body(
        f"tether-test-ds-{namespace}", proc.url + "/validate", proc.ca.cert_pem, namespace
    )
    stack.register(api, vwc)
    try:
        yield proc
    finally:
        stack.unregister(api, vwc["metadata"]["name"])
        rc = proc.stop()
        assert rc == 0, proc.log()


def _until_called(
    core: client.CoreV1Api, namespace: str, done: Callable[[], bool], what: str, timeout: float = 30
) -> None:
    """Write the ConfigMap ``app`` until ``done``: the apiserver picks the webhook
    configuration up asynchronously."""
    deadline = time.monotonic() + timeout
    core.create_namespaced_config_map(
        namespace, client.V1ConfigMap(metadata=client.V1ObjectMeta(name="app"), data={"k": "0"})
    )
    n = 0
    while not done():
        assert time.monotonic() < deadline, what
        n += 1
        core.patch_namespaced_config_map("app", namespace, {"data": {"k": str(n)}})
        time.sleep(0.3)


def test_the_histogram_counts_a_delivery_through_the_real_listener(
    skr: controlplane.ControlPlane,
    skr_api: client.ApiClient,
    namespace: str,
    listener_env: Env,
    listener: ListenerProcess,
    runtime: Callable[..., Runtime],
    tmp_path: pathlib.Path,
) -> None:
    rt = runtime()
    core = client.CoreV1Api(skr_api)
    with _webhook(
        tmp_path,
        skr,
        {
            "TETHER_RUNTIME_ID": rt.id,
            "TETHER_LISTENER_URL": listener.url,
            "TETHER_LISTENER_CA_FILE": str(listener_env.server_ca_file),
            "TETHER_CLIENT_CERT_FILE": str(rt.cert_file),
            "TETHER_CLIENT_KEY_FILE": str(rt.key_file),
        },
        skr_api,
        namespace,
    ) as proc:
        assert proc.metric(COUNT) == 0
        _until_called(
            core,
            namespace,
            lambda: listener_env.stored_one(rt.id, namespace, "app") is not None,
            "the record never reached the KCP",
        )
        deadline = time.monotonic() + 10
        while proc.metric(COUNT, outcome="persisted") < 1:
            assert time.monotonic() < deadline, proc.log()
            time.sleep(0.1)
        n = proc.metric(COUNT)
        total = proc.metric(SUM)
        assert n == proc.metric("tether_webhook_forwarded_records_total")  # one per acked record
        assert 0 < total / n < 30  # settle + read-back + POST, within seconds
        # every observation is within the top bound; none is above it
        assert proc.metric("tether_webhook_delivery_seconds_bucket", le="300.0") == n
        text = proc.get("/metrics")[1].decode()
        assert rt.id not in text and "namespace=" not in text  # bounded labels only


def test_retries_during_a_listener_outage_are_part_of_the_delivery_time(
    skr: controlplane.ControlPlane,
    skr_api: client.ApiClient,
    namespace: str,
    tmp_path: pathlib.Path,
) -> None:
    ca = certs.CertificateAuthority.create("kcp-runtime-ca")
    pair = ca.issue(receiver_mod.RUNTIME_ID, dns_names=["c-4a1f.kyma.example.com"], client=True)
    pair.write(tmp_path / "runtime.crt", tmp_path / "runtime.key")
    receiver = receiver_mod.Receiver(tmp_path, ca).start()
    core = client.CoreV1Api(skr_api)
    try:
        with _webhook(
            tmp_path,
            skr,
            {
                "TETHER_RUNTIME_ID": receiver_mod.RUNTIME_ID,
                "TETHER_LISTENER_URL": receiver.url,
                "TETHER_LISTENER_CA_FILE": str(receiver.ca_file),
                "TETHER_CLIENT_CERT_FILE": str(tmp_path / "runtime.crt"),
                "TETHER_CLIENT_KEY_FILE": str(tmp_path / "runtime.key"),
            },
            skr_api,
            namespace,
        ) as proc:
            receiver.mode, receiver.status, receiver.retry_after = "error", 503, "1"
            _until_called(
                core, namespace, lambda: bool(receiver.requests), "the listener never called"
            )
            failed_at = time.monotonic()
            assert proc.metric(COUNT) == 0  # a refused delivery is not a delivery
            time.sleep(2.5)  # the outage: the delivery's time must include it
            receiver.mode = "ok"
            receiver.wait_for(lambda recs: any(r["name"] == "app" for r in recs), timeout=30)
            waited = time.monotonic() - failed_at
            deadline = time.monotonic() + 10
            while proc.metric(COUNT) < 1:
                assert time.monotonic() < deadline, proc.log()
                time.sleep(0.1)
            n = proc.metric(COUNT)
            assert n >= 1
            # the record waited through the outage: its delivery took at least that long
            total = proc.metric(SUM)
            assert total >= 2.5 and total <= n * (waited + 30)
            assert proc.metric("tether_webhook_delivery_seconds_bucket", le="1.0") < n
    finally:
        receiver.stop()
