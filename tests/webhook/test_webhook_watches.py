"""The webhook in Watch mode, end to end: a runtime's Watch list (a tether-watches ConfigMap
in this test's own namespace, ``TETHER_WATCHES_CONFIGMAP``), the real SKR apiserver calling
the webhook through one registered webhook per Watch (``watchwire.webhook_entries``, as the
enroller renders them), the webhook under gunicorn sending to the recording receiver. What
the receiver gets is what would leave the runtime: each record is checked by the KCP's own
rule (``watches.violation``)."""

from __future__ import annotations

import base64
import dataclasses
import json
import pathlib
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client

from testing import controlplane, watchenv
from testing import receiver as receiver_mod
from testing import webhookstack as stack
from testing.receiver import Receiver
from tether.base import certs
from tether.wire import changes, digests, watches, watchwire

pytestmark = pytest.mark.processes

GROUP = "webhook-watches.example.com"
WIDGET = watchenv.widgets(GROUP)
CM = {"group": "", "version": "v1", "resource": "configmaps", "kind": "ConfigMap"}
SECRET = {"group": "", "version": "v1", "resource": "secrets", "kind": "Secret"}
CRD = watchenv.widget_crd(GROUP)
SECRET_VALUE = "hunter2-do-not-send"
DIGEST_KEY = b"this-runtime's-32-byte-digest-key"


def _watches(ns: str) -> tuple[watches.Watch, ...]:
    def w(name: str, resource: dict[str, str], **spec: Any) -> watches.Watch:
        return watches.parse(
            {
                "metadata": {"name": name, "generation": 1},
                "spec": {"resource": resource, "namespaces": [ns], **spec},
            }
        )

    return (
        w("conf", CM, selector={"matchLabels": {"conf": "yes"}}),
        w("meta", CM, selector={"matchLabels": {"meta": "yes"}}, send={"mode": "metadata"}),
        w("secrets", SECRET, send={"mode": "digest"}),
        w("widgets", WIDGET),
    )


@dataclasses.dataclass
class Stack:
    ns: str
    core: client.CoreV1Api
    custom: client.CustomObjectsApi
    receiver: Receiver
    webhook: stack.WebhookProcess
    by_name: dict[str, watches.Watch]

    def cm(
        self, name: str, labels: dict[str, str] | None = None, data: dict[str, str] | None = None
    ) -> client.V1ConfigMap:
        return self.core.create_namespaced_config_map(
            self.ns,
            client.V1ConfigMap(
                metadata=client.V1ObjectMeta(name=name, labels=labels), data=data or {"k": "v"}
            ),
        )

    def of(self, name: str, watch: str | None = None) -> list[dict[str, Any]]:
        return [
            r
            for r in self.receiver.records()
            if r["name"] == name and (watch is None or r.get("watch") == watch)
        ]

    def wait(
        self, name: str, watch: str, n: int = 1, timeout: float = 20.0
    ) -> list[dict[str, Any]]:
        self.receiver.wait_for(lambda _: len(self.of(name, watch)) >= n, timeout)
        return self.of(name, watch)

    def bodies(self) -> str:
        return json.dumps([r["body"] for r in self.receiver.requests])


def _namespace(core: client.CoreV1Api, prefix: str) -> str:
    name = f"{prefix}-{uuid.uuid4().hex[:8]}"
    controlplane.retry_busy(
        lambda: core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
    )
    return name


def _start(
    skr: controlplane.ControlPlane, work: pathlib.Path, receiver: Receiver, wire: str
) -> stack.WebhookProcess:
    return stack.WebhookProcess(
        work,
        {
            "TETHER_RUNTIME_ID": receiver_mod.RUNTIME_ID,
            "TETHER_LISTENER_URL": receiver.url,
            "TETHER_LISTENER_CA_FILE": str(receiver.ca_file),
            "TETHER_CLIENT_CERT_FILE": str(work / "runtime.crt"),
            "TETHER_CLIENT_KEY_FILE": str(work / "runtime.key"),
            "TETHER_KUBECONFIG": str(skr.kubeconfig),
            "TETHER_WATCHES_CONFIGMAP": wire,
            "TETHER_WEBHOOK_READBACK_SECONDS": "1.5",
            "TETHER_DIGEST_KEY_FILE": str(work / "digest-key"),  # as mounted from the client Secret
        },
    ).start()


@pytest.fixture(scope="module")
def wh(
    skr: controlplane.ControlPlane,
    skr_api: client.ApiClient,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Stack]:
    work = tmp_path_factory.mktemp("webhook-watches")
    core = client.CoreV1Api(skr_api)
    controlplane.install_crds(skr_api, CRD)
    ns, wns = _namespace(core, "ww"), _namespace(core, "wwl")
    in_force = _watches(ns)
    core.create_namespaced_config_map(
        wns,
        client.V1ConfigMap(
            metadata=client.V1ObjectMeta(name=watchwire.WIRE_CONFIGMAP),
            data={watchwire.WIRE_KEY: watchwire.to_wire(in_force)},
        ),
    )
    ca = certs.CertificateAuthority.create("kcp-runtime-ca")
    ca.issue(receiver_mod.RUNTIME_ID, client=True).write(work / "runtime.crt", work / "runtime.key")
    (work / "digest-key").write_bytes(DIGEST_KEY)
    receiver = Receiver(work, ca).start()
    proc = _start(skr, work, receiver, f"{wns}/{watchwire.WIRE_CONFIGMAP}")
    template = stack.vwc_body("x", proc.url + "/validate", proc.ca.cert_pem, ns)["webhooks"][0]
    vwc = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": f"tether-test-{ns}"},
        "webhooks": watchwire.webhook_entries(in_force, template),
    }
    stack.register(skr_api, vwc)
    s = Stack(
        ns, core, client.CustomObjectsApi(skr_api), receiver, proc, {w.name: w for w in in_force}
    )
    try:
        deadline = time.monotonic() + 30
        s.cm("probe", {"conf": "yes"})
        n = 0
        while not s.of("probe"):  # the apiserver picks the configuration up asynchronously
            assert time.monotonic() < deadline, f"webhook never called:\n{proc.log()}"
            n += 1
            core.patch_namespaced_config_map("probe", ns, {"data": {"n": str(n)}})
            time.sleep(0.2)
        yield s
    finally:
        stack.unregister(skr_api, vwc["metadata"]["name"])
        rc = proc.stop()
        receiver.stop()
        for name in (ns, wns):
            core.delete_namespace(name)
    assert rc == 0, proc.log()


def _checked(s: Stack, recs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Every record is a valid v2 record its Watch admits (the KCP's check)."""
    for r in recs:
        assert r["apiVersion"] == changes.API_VERSION_V2, r
        assert changes.validate_record(r) == [], r
        assert watches.violation(s.by_name[r["watch"]], r) is None, r
    return recs


def test_a_labelled_configmap_is_sent_under_its_watches_an_unlabelled_one_not_at_all(
    wh: Stack,
) -> None:
    wh.cm("plain", data={"k": "secret-ish"})
    made = wh.cm("both", {"conf": "yes", "meta": "yes"}, {"k": "v1"})
    conf, meta = wh.wait("both", "conf")[0], wh.wait("both", "meta")[0]
    _checked(wh, [conf, meta])
    assert (conf["data"], conf["resourceVersion"], conf["source"]) == (
        {"k": "v1"},
        made.metadata.resource_version,
        "webhook",
    )
    assert conf["resource"] == {"group": "", "version": "v1", "kind": "ConfigMap"}
    assert meta["data"] == {} and meta["labels"] == {"conf": "yes", "meta": "yes"}  # metadata only
    marker = wh.cm("marker", {"conf": "yes"})  # written after "plain": arrives after it would have
    assert wh.wait("marker", "conf")[0]["resourceVersion"] == marker.metadata.resource_version
    assert wh.of("plain") == [] and "secret-ish" not in wh.bodies()
    assert all(r["apiVersion"] == changes.API_VERSION_V2 for r in wh.receiver.records())


def test_relabelling_out_sends_a_tombstone_of_that_watch(wh: Stack) -> None:
    wh.cm("leaver", {"conf": "yes"})
    wh.wait("leaver", "conf")
    moved = wh.core.patch_namespaced_config_map(
        "leaver", wh.ns, {"metadata": {"labels": {"conf": "no"}}}
    )
    tomb = _checked(wh, wh.wait("leaver", "conf", 2))[-1]
    assert tomb["deleted"] is True and "data" not in tomb
    assert tomb["resourceVersion"] == moved.metadata.resource_version
    wh.core.patch_namespaced_config_map("leaver", wh.ns, {"data": {"k": "later"}})
    # neither old nor new labels match: the apiserver does not even call us (a ConfigMap
    # written after it arrives after a record of it would have)
    wh.wait(wh.cm("leaver-marker", {"conf": "yes"}).metadata.name, "conf")
    assert len(wh.of("leaver")) == 2 and "later" not in wh.bodies()


def test_deleting_sends_a_tombstone(wh: Stack) -> None:
    made = wh.cm("gone", {"conf": "yes"})
    wh.wait("gone", "conf")
    wh.core.delete_namespaced_config_map("gone", wh.ns)
    tomb = _checked(wh, wh.wait("gone", "conf", 2))[-1]
    assert tomb["deleted"] is True and tomb["uid"] == made.metadata.uid
    assert int(tomb["resourceVersion"]) >= int(made.metadata.resource_version)


def test_a_digest_watch_of_secrets_sends_digests_never_the_value(wh: Stack) -> None:
    enc = base64.b64encode(SECRET_VALUE.encode()).decode()
    wh.core.create_namespaced_secret(
        wh.ns, client.V1Secret(metadata=client.V1ObjectMeta(name="creds"), data={"pw": enc})
    )
    first = _checked(wh, wh.wait("creds", "secrets"))[0]
    # keyed by the runtime's digest key (its client Secret's, mounted): a guess without the
    # key (the unkeyed digest of the value) does not match what leaves the runtime
    assert first["data"] == {"pw": digests.of(SECRET_VALUE.encode(), DIGEST_KEY)}
    assert first["data"]["pw"].startswith("hmac-sha256:")
    assert first["data"]["pw"] != digests.of(SECRET_VALUE.encode())
    assert first["resource"]["kind"] == "Secret" and first.get("binaryData") == {}
    wh.core.patch_namespaced_secret(
        "creds", wh.ns, {"data": {"pw": base64.b64encode(b"other").decode()}}
    )
    second = _checked(wh, wh.wait("creds", "secrets", 2))[-1]
    assert (
        second["data"]["pw"] != first["data"]["pw"] == digests.of(SECRET_VALUE.encode(), DIGEST_KEY)
    )
    bodies = wh.bodies()
    for value in (
        SECRET_VALUE,
        enc,
        base64.b64encode(b"other").decode(),
        DIGEST_KEY.decode(),
        base64.b64encode(DIGEST_KEY).decode(),
    ):
        assert value not in bodies
    log_text = wh.webhook.log_path.read_text(errors="replace")
    assert SECRET_VALUE not in log_text and DIGEST_KEY.decode() not in log_text


def test_a_custom_resource_is_delivered(wh: Stack) -> None:
    made = wh.custom.create_namespaced_custom_object(
        GROUP,
        "v1",
        wh.ns,
        "widgets",
        {
            "apiVersion": f"{GROUP}/v1",
            "kind": "Widget",
            "metadata": {"name": "w1"},
            "spec": {"size": 3},
        },
    )
    rec = _checked(wh, wh.wait("w1", "widgets"))[0]
    assert rec["resource"] == {"group": GROUP, "version": "v1", "kind": "Widget"}
    assert rec["resourceVersion"] == made["metadata"]["resourceVersion"]
    assert json.loads(rec["data"]["spec"]) == {"size": 3} and "status" not in rec["data"]
    # a controller writes status through the subresource: registered too (watchwire)
    ready = wh.custom.patch_namespaced_custom_object_status(
        GROUP, "v1", wh.ns, "widgets", "w1", {"status": {"ready": True}}
    )
    rec = _checked(wh, wh.wait("w1", "widgets", 2))[-1]
    assert rec["resourceVersion"] == ready["metadata"]["resourceVersion"]
    assert json.loads(rec["data"]["status"]) == {"ready": True}
    grown = wh.custom.patch_namespaced_custom_object(
        GROUP, "v1", wh.ns, "widgets", "w1", {"spec": {"size": 4}}
    )  # a spec change alone
    rec = _checked(wh, wh.wait("w1", "widgets", 3))[-1]
    assert rec["resourceVersion"] == grown["metadata"]["resourceVersion"]
    assert json.loads(rec["data"]["spec"]) == {"size": 4}
    wh.custom.delete_namespaced_custom_object(GROUP, "v1", wh.ns, "widgets", "w1")
    tomb = _checked(wh, wh.wait("w1", "widgets", 4))[-1]
    assert tomb["deleted"] is True and tomb["resource"]["kind"] == "Widget"
