"""The webhook under gunicorn, called by the real SKR kube-apiserver, forwarding to the
recording receiver over mTLS."""

from __future__ import annotations

import dataclasses
import json
import pathlib
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client

from testing import controlplane, denier
from testing import receiver as receiver_mod
from testing import webhookstack as stack
from testing.receiver import Receiver
from tether.base import certs

pytestmark = pytest.mark.processes


@dataclasses.dataclass
class Stack:
    ns: str
    ignored_ns: str
    core: client.CoreV1Api
    receiver: Receiver
    webhook: stack.WebhookProcess
    api: client.ApiClient
    workdir: pathlib.Path

    def cm(
        self,
        name: str,
        data: dict[str, str],
        labels: dict[str, str] | None = None,
        ns: str | None = None,
    ) -> client.V1ConfigMap:
        return self.core.create_namespaced_config_map(
            ns or self.ns,
            client.V1ConfigMap(metadata=client.V1ObjectMeta(name=name, labels=labels), data=data),
        )

    def patch(self, name: str, data: dict[str, str], ns: str | None = None) -> client.V1ConfigMap:
        return self.core.patch_namespaced_config_map(name, ns or self.ns, {"data": data})

    def of(self, name: str) -> list[dict[str, Any]]:
        return [r for r in self.receiver.records() if r["name"] == name]

    def wait(self, name: str, predicate: Any, timeout: float = 20.0) -> list[dict[str, Any]]:
        got = self.receiver.wait_for(
            lambda recs: predicate([r for r in recs if r["name"] == name]), timeout
        )
        return [r for r in got if r["name"] == name]


def _namespace(core: client.CoreV1Api, prefix: str) -> str:
    name = f"{prefix}-{uuid.uuid4().hex[:8]}"
    controlplane.retry_busy(
        lambda: core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
    )
    return name


@pytest.fixture(scope="module")
def wh(
    skr: controlplane.ControlPlane,
    skr_api: client.ApiClient,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Stack]:
    work = tmp_path_factory.mktemp("webhook")
    core = client.CoreV1Api(skr_api)
    ns, ignored = _namespace(core, "wh"), _namespace(core, "whi")
    ca = certs.CertificateAuthority.create("kcp-runtime-ca")
    pair = ca.issue(receiver_mod.RUNTIME_ID, dns_names=["c-4a1f.kyma.example.com"], client=True)
    pair.write(work / "runtime.crt", work / "runtime.key")
    receiver = Receiver(work, ca).start()
    proc = stack.WebhookProcess(
        work,
        {
            "TETHER_RUNTIME_ID": receiver_mod.RUNTIME_ID,
            "TETHER_LISTENER_URL": receiver.url,
            "TETHER_LISTENER_CA_FILE": str(receiver.ca_file),
            "TETHER_CLIENT_CERT_FILE": str(work / "runtime.crt"),
            "TETHER_CLIENT_KEY_FILE": str(work / "runtime.key"),
            "TETHER_KUBECONFIG": str(skr.kubeconfig),
            "TETHER_IGNORED_NAMESPACES": f"kube-system,tether-system,{ignored}",
            "TETHER_LISTENER_TIMEOUT_SECONDS": "1",
            "TETHER_WEBHOOK_RETRY_BASE_SECONDS": "0.05",
            "TETHER_WEBHOOK_RETRY_CAP_SECONDS": "0.5",
            "TETHER_WEBHOOK_READBACK_SECONDS": "1.5",
            "TETHER_CERT_RELOAD_SECONDS": "0.5",
            # no Watch list (absent in its own namespace, whatever other tests put into
            # tether-system): the environment's scope and v1 records, as before Watches
            "TETHER_WATCHES_CONFIGMAP": f"{ns}/tether-watches",
        },
    ).start()
    vwc = stack.vwc_body(f"tether-test-{ns}", proc.url + "/validate", proc.ca.cert_pem, ns)
    vwc["webhooks"][0]["namespaceSelector"] = {
        "matchExpressions": [
            {"key": "kubernetes.io/metadata.name", "operator": "In", "values": [ns, ignored]}
        ]
    }
    stack.register(skr_api, vwc)
    s = Stack(ns, ignored, core, receiver, proc, skr_api, work)
    try:
        # the apiserver picks the configuration up asynchronously: write until it calls us
        deadline = time.monotonic() + 30
        s.cm("probe", {"n": "0"})
        n = 0
        while not s.of("probe"):
            assert time.monotonic() < deadline, f"webhook never called:\n{proc.log()}"
            n += 1
            s.patch("probe", {"n": str(n)})
            time.sleep(0.2)
        yield s
    finally:
        stack.unregister(skr_api, vwc["metadata"]["name"])
        rc = proc.stop()
        receiver.stop()
        for name in (ns, ignored):
            core.delete_collection_namespaced_config_map(name)
            core.delete_namespace(name)
    assert rc == 0, proc.log()


@pytest.fixture(autouse=True)
def _reset(wh: Stack) -> None:
    wh.receiver.mode = "ok"


def test_create_update_delete_each_arrive_as_one_record(wh: Stack) -> None:
    created = wh.cm("life", {"k": "v1"}, labels={"team": "a"})
    rec = wh.wait("life", lambda r: len(r) >= 1)[0]
    assert rec["resourceVersion"] == created.metadata.resource_version
    assert (rec["data"], rec["labels"], rec["deleted"]) == ({"k": "v1"}, {"team": "a"}, False)
    assert (rec["runtimeId"], rec["uid"], rec["source"]) == (
        receiver_mod.RUNTIME_ID,
        created.metadata.uid,
        "webhook",
    )
    assert (rec["apiVersion"], rec["kind"]) == ("tether.kyma-project.io/v1", "ConfigMapChange")
    assert "watch" not in rec  # no Watch list in this runtime: v1 records, as before Watches

    updated = wh.patch("life", {"k": "v2"})
    rec = wh.wait("life", lambda r: len(r) >= 2)[1]
    assert (rec["resourceVersion"], rec["data"]) == (updated.metadata.resource_version, {"k": "v2"})

    wh.core.delete_namespaced_config_map("life", wh.ns)
    recs = wh.wait("life", lambda r: len(r) >= 3)
    tomb = recs[2]
    assert tomb["deleted"] is True and "data" not in tomb
    assert tomb["uid"] == created.metadata.uid
    assert int(tomb["resourceVersion"]) >= int(updated.metadata.resource_version)
    assert len(recs) == 3
    assert all(r["cn"] == receiver_mod.RUNTIME_ID for r in wh.receiver.requests)


@pytest.mark.parametrize("mode", ["down", "slow", "error"])
def test_writes_succeed_while_the_receiver_fails_and_changes_arrive_later(
    wh: Stack, mode: str
) -> None:
    name = f"outage-{mode}"
    before = wh.webhook.metric("tether_webhook_admission_requests_total", outcome="enqueued")
    if mode == "down":
        wh.receiver.stop()
    elif mode == "slow":
        wh.receiver.mode, wh.receiver.delay = "slow", 3.0  # longer than the webhook's 2s timeout
    else:
        wh.receiver.mode, wh.receiver.status = "error", 500
    wh.cm(name, {"k": "0"})
    for i in range(1, 4):
        wh.patch(name, {"k": str(i)})
    assert wh.webhook.metric("tether_webhook_admission_requests_total", outcome="enqueued") > before
    if mode == "error":
        wh.receiver.wait_for(lambda _: any(r["answered"] == 500 for r in wh.receiver.requests))
    assert wh.of(name) == []
    if mode == "down":
        wh.receiver.start()
    wh.receiver.mode = "ok"
    recs = wh.wait(name, lambda r: bool(r) and r[-1]["data"] == {"k": "3"}, timeout=30)
    assert (
        recs[-1]["resourceVersion"]
        == wh.core.read_namespaced_config_map(name, wh.ns).metadata.resource_version
    )


def _marker(wh: Stack, name: str) -> None:
    """A write whose record shows the forwarder got past everything before it."""
    wh.cm(name, {"m": "1"})
    wh.wait(name, lambda r: len(r) == 1)


def test_dry_run_ignored_namespace_and_no_op_update_give_no_record(wh: Stack) -> None:
    wh.core.create_namespaced_config_map(
        wh.ns,
        client.V1ConfigMap(metadata=client.V1ObjectMeta(name="dry"), data={"k": "v"}),
        dry_run="All",
    )
    wh.cm("quiet", {"k": "v"}, labels={"l": "1"})
    wh.wait("quiet", lambda r: len(r) == 1)
    wh.core.patch_namespaced_config_map("quiet", wh.ns, {"data": {"k": "v2"}}, dry_run="All")
    wh.core.patch_namespaced_config_map(
        "quiet", wh.ns, {"metadata": {"labels": {"l": "1"}}, "data": {"k": "v"}}
    )
    body = wh.core.read_namespaced_config_map("quiet", wh.ns)
    wh.core.replace_namespaced_config_map("quiet", wh.ns, body)  # same content: a no-op update
    ignored_before = wh.webhook.metric(
        "tether_webhook_admission_requests_total", outcome="not-watched"
    )
    wh.cm("elsewhere", {"k": "v"}, ns=wh.ignored_ns)
    wh.core.delete_namespaced_config_map("elsewhere", wh.ignored_ns)
    _marker(wh, "after-quiet")
    assert wh.of("dry") == [] and wh.of("elsewhere") == []
    assert len(wh.of("quiet")) == 1
    # dry-run and no-op writes never reached the handler: the manifest's matchConditions cut them
    for outcome in ("dry-run", "no-change"):
        assert wh.webhook.metric("tether_webhook_admission_requests_total", outcome=outcome) == 0
    # the ignored namespace reached the webhook and its built-in Watch did not take it
    assert (
        wh.webhook.metric("tether_webhook_admission_requests_total", outcome="not-watched")
        == ignored_before + 2
    )


def test_a_write_rejected_by_another_webhook_gives_no_record(
    wh: Stack, skr_api: client.ApiClient
) -> None:
    d = denier.Denier(wh.workdir).start()
    body = d.vwc(f"tether-test-deny-{wh.ns}", wh.ns)
    stack.register(skr_api, body)
    try:
        wh.cm("kept", {"k": "v"})
        wh.wait("kept", lambda r: len(r) == 1)
        deadline = time.monotonic() + 30
        while True:  # until the denying configuration is active
            try:
                wh.cm("denied", {"k": "v"}, labels={"deny": "true"})
            except client.ApiException as e:
                assert e.status in (400, 403), e
                break
            wh.core.delete_namespaced_config_map("denied", wh.ns)
            assert time.monotonic() < deadline, "denying webhook never active"
            time.sleep(0.2)
        rejected_before = wh.webhook.metric("tether_webhook_readbacks_total", result="rejected")
        with pytest.raises(client.ApiException):
            wh.core.patch_namespaced_config_map(
                "kept", wh.ns, {"metadata": {"labels": {"deny": "true"}}, "data": {"k": "denied"}}
            )
        wh.receiver.wait_for(
            lambda _: wh.webhook.metric("tether_webhook_readbacks_total", result="unchanged") >= 1,
            timeout=20,
        )
    finally:
        stack.unregister(skr_api, body["metadata"]["name"])
        d.stop()
    _marker(wh, "after-denied")
    assert [r["data"] for r in wh.of("kept")] == [{"k": "v"}]
    denied = wh.of("denied")
    # attempts before the denier was active were real writes (and deletes); the refused one is not
    assert all(r["deleted"] or r["resourceVersion"] for r in denied)
    assert (
        wh.webhook.metric("tether_webhook_readbacks_total", result="rejected")
        >= rejected_before + 1
    )


def test_a_burst_on_one_configmap_becomes_few_records_ending_with_the_final_data(wh: Stack) -> None:
    wh.cm("burst", {"i": "0"})
    for i in range(1, 101):
        wh.patch("burst", {"i": str(i)})
    recs = wh.wait("burst", lambda r: bool(r) and r[-1]["data"] == {"i": "100"})
    assert len(recs) <= 30, len(recs)
    assert (
        recs[-1]["resourceVersion"]
        == wh.core.read_namespaced_config_map("burst", wh.ns).metadata.resource_version
    )
    assert wh.webhook.metric("tether_webhook_queue_coalesced_total") >= 50


DISPATCH = "tether_webhook_dispatch_seconds"


def test_an_isolated_write_is_sent_before_the_old_coalescing_window(wh: Stack) -> None:
    """Leading edge: the forwarder starts the POST of an isolated write's record within the
    100 ms that every key used to wait after its admission (its own histogram of admission
    to POST start says so; the old queue could not start before 100 ms, by construction)."""
    fast = 0
    writes = 6
    for i in range(writes):
        count = wh.webhook.metric(DISPATCH + "_count")
        below = wh.webhook.metric(DISPATCH + "_bucket", le="0.1")
        name = f"iso-{i}"
        if i % 2 == 0:
            wh.cm(name, {"k": "v"})  # a CREATE: read back as soon as it is persisted
        else:
            wh.cm(name, {"k": "v"})
            wh.wait(name, lambda r: len(r) == 1)
            count = wh.webhook.metric(DISPATCH + "_count")
            below = wh.webhook.metric(DISPATCH + "_bucket", le="0.1")
            time.sleep(0.3)  # past the hot-key interval: an isolated UPDATE
            wh.patch(name, {"k": "v2"})
        want = {"k": "v2" if i % 2 else "v"}
        recs = wh.wait(name, lambda r, want=want: bool(r) and r[-1]["data"] == want)
        assert recs[-1]["source"] == "webhook"
        deadline = time.monotonic() + 5
        while wh.webhook.metric(DISPATCH + "_count") < count + 1:  # observed before the POST
            assert time.monotonic() < deadline
            time.sleep(0.05)
        assert wh.webhook.metric(DISPATCH + "_count") == count + 1  # one record, one POST start
        fast += int(wh.webhook.metric(DISPATCH + "_bucket", le="0.1") == below + 1)
    # generous on a shared machine: most, not all, below the old window
    assert fast >= writes // 2, f"{fast} of {writes} records were dispatched within 100 ms"


def test_concurrent_writes_to_one_key_end_with_the_final_state_in_few_records(wh: Stack) -> None:
    """Admissions during a send in flight (several writers at once) coalesce; the last
    record carries the final state."""
    import concurrent.futures

    wh.cm("racing", {"w": "none"})
    wh.wait("racing", lambda r: len(r) == 1)

    def writer(w: int) -> None:
        for i in range(20):
            wh.patch("racing", {"w": f"{w}-{i}"})

    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        list(pool.map(writer, range(4)))
    final = wh.core.read_namespaced_config_map("racing", wh.ns)
    recs = wh.wait(
        "racing", lambda r: bool(r) and r[-1]["resourceVersion"] == final.metadata.resource_version
    )
    assert recs[-1]["data"] == final.data
    assert len(recs) <= 1 + 40, len(recs)  # 80 writes: coalesced, never one record each
    rvs = [int(r["resourceVersion"]) for r in recs]
    assert rvs == sorted(rvs)  # one key is never in flight twice: records in order


def test_bad_requests_get_clear_errors_and_the_process_survives(wh: Stack) -> None:
    status, body = wh.webhook.post("/validate", b"{not json")
    assert status == 400 and json.loads(body)["error"] == "invalid JSON"
    status, body = wh.webhook.post(
        "/validate",
        json.dumps(
            {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {}}
        ).encode(),
    )
    doc = json.loads(body)
    assert status == 400 and doc["error"] == "invalid AdmissionReview"
    assert "request.uid must be a non-empty string" in doc["details"]
    status, body = wh.webhook.post("/validate", b"x" * (9 * 1024 * 1024))
    assert status == 413 and json.loads(body)["error"] == "request too large"
    status, body = wh.webhook.post("/validate", b"{}", content_type="text/plain")
    assert status == 415 and "Content-Type" in json.loads(body)["details"]
    assert b"Traceback" not in body
    assert wh.webhook.get("/healthz")[0] == 200
    assert wh.webhook.proc is not None and wh.webhook.proc.poll() is None


def test_metrics_are_exposed_without_object_labels(wh: Stack) -> None:
    status, text = wh.webhook.get("/metrics")
    assert status == 200
    body = text.decode()
    for name in (
        "tether_webhook_admission_requests_total",
        "tether_webhook_http_request_duration_seconds_bucket",
        "tether_webhook_queue_depth",
        "tether_webhook_queue_coalesced_total",
        "tether_webhook_queue_overflowed_total",
        "tether_webhook_forwards_total",
        "tether_webhook_forward_seconds_bucket",
        "tether_webhook_last_forward_success_timestamp_seconds",
    ):
        assert name in body, name
    assert wh.ns not in body and "life" not in body
    assert wh.webhook.metric("tether_webhook_last_forward_success_timestamp_seconds") > 0


def test_a_permanent_refusal_is_not_retried(wh: Stack) -> None:
    wh.receiver.mode, wh.receiver.status = "error", 422
    before = wh.webhook.metric(
        "tether_webhook_forwards_total", result="permanent", reason="http-422"
    )
    wh.cm("refused", {"k": "v"})
    wh.receiver.wait_for(
        lambda _: (
            wh.webhook.metric(
                "tether_webhook_forwards_total", result="permanent", reason="http-422"
            )
            > before
        )
    )
    wh.receiver.mode = "ok"
    _marker(wh, "after-refused")  # the forwarder went on; the refused record was dropped
    tries = [
        r
        for r in wh.receiver.requests
        if r["body"].get("name") == "refused"
        or any(i.get("name") == "refused" for i in r["body"].get("items", []))
    ]
    assert len(tries) == 1 and tries[0]["answered"] == 422
    assert wh.of("refused") == []
    assert "listener refused" in wh.webhook.log() and "injected" in wh.webhook.log()
