"""The API server authenticates to the webhook, on a real kube-apiserver (issue 38, item 4).

One plane of its own, started with the admission configuration docs/webhook.md ("Who may
call the webhook") tells an operator to give the API server: ``ValidatingAdmissionWebhook``
names a kubeconfig whose user, named for the webhook's host and port, presents a client
certificate of a CA of its own. The webhook requires that CA and the certificate's name
(``TETHER_WEBHOOK_CLIENT_CA_FILE``, ``TETHER_WEBHOOK_CLIENT_NAMES``). A real ConfigMap write
is admitted and forwarded; a forged review from a caller without the certificate (any pod
that reaches the Service) is refused and forwards nothing. The session planes are untouched.
"""

from __future__ import annotations

import json
import pathlib
import time
import uuid

import pytest
from kubernetes import client

from testing import controlplane
from testing import webhookstack as stack
from testing.receiver import RUNTIME_ID, Receiver, RuntimeCert
from tether.base import certs

pytestmark = pytest.mark.processes
CLIENT_NAME = "kube-apiserver-webhook-client"


def admission_files(
    d: pathlib.Path, ca: certs.CertificateAuthority, host_port: str
) -> pathlib.Path:
    """The AdmissionConfiguration and the kubeconfig of docs/webhook.md, for ``host_port``."""
    ca.issue(CLIENT_NAME, client=True).write(d / "webhook-client.crt", d / "webhook-client.key")
    kubeconfig = {
        "apiVersion": "v1",
        "kind": "Config",
        "users": [
            {
                "name": host_port,
                "user": {
                    "client-certificate": str(d / "webhook-client.crt"),
                    "client-key": str(d / "webhook-client.key"),
                },
            }
        ],
    }
    (d / "webhook-kubeconfig.yaml").write_text(json.dumps(kubeconfig))
    admission = {
        "apiVersion": "apiserver.config.k8s.io/v1",
        "kind": "AdmissionConfiguration",
        "plugins": [
            {
                "name": "ValidatingAdmissionWebhook",
                "configuration": {
                    "apiVersion": "apiserver.config.k8s.io/v1",
                    "kind": "WebhookAdmissionConfiguration",
                    "kubeConfigFile": str(d / "webhook-kubeconfig.yaml"),
                },
            }
        ],
    }
    (d / "admission.yaml").write_text(json.dumps(admission))
    return d / "admission.yaml"


def test_the_api_servers_certificate_is_admitted_a_pod_without_it_is_refused(
    tmp_path: pathlib.Path, runtime_cert: RuntimeCert, receiver: Receiver
) -> None:
    apiserver_ca = certs.CertificateAuthority.create("skr-webhook-client-ca")
    ca_file = tmp_path / "webhook-client-ca.crt"
    ca_file.write_bytes(apiserver_ca.cert_pem)
    admission = tmp_path / "admission.yaml"
    plane = controlplane.ControlPlane(
        "skr-webhook-authn", apiserver_flags=[f"--admission-control-config-file={admission}"]
    )
    proc = stack.WebhookProcess(
        tmp_path,
        {
            "TETHER_RUNTIME_ID": RUNTIME_ID,
            "TETHER_LISTENER_URL": receiver.url,
            "TETHER_LISTENER_CA_FILE": str(receiver.ca_file),
            "TETHER_CLIENT_CERT_FILE": str(runtime_cert.cert_file),
            "TETHER_CLIENT_KEY_FILE": str(runtime_cert.key_file),
            "TETHER_KUBECONFIG": str(plane.kubeconfig),
            "TETHER_WEBHOOK_CLIENT_CA_FILE": str(ca_file),
            "TETHER_WEBHOOK_CLIENT_NAMES": CLIENT_NAME,
            "TETHER_WEBHOOK_READBACK_SECONDS": "1.5",
        },
    )
    # the API server picks its webhook credentials by the URL's host:port
    admission_files(tmp_path, apiserver_ca, f"127.0.0.1:{proc.port}")
    with plane:
        proc.start()
        try:
            api = plane.api_client()
            core = client.CoreV1Api(api)
            ns = f"authn-{uuid.uuid4().hex[:8]}"
            controlplane.retry_busy(
                lambda: core.create_namespace(
                    client.V1Namespace(metadata=client.V1ObjectMeta(name=ns))
                )
            )
            stack.register(
                api, stack.vwc_body("tether-authn", proc.url + "/validate", proc.ca.cert_pem, ns)
            )

            def names() -> list[str]:
                return [r["name"] for r in receiver.records() if r.get("namespace") == ns]

            # a real write through the API server; it loads the configuration asynchronously
            # (failurePolicy Ignore: a write before that is not reviewed), so write until the
            # webhook is called
            core.create_namespaced_config_map(
                ns, client.V1ConfigMap(metadata=client.V1ObjectMeta(name="real"), data={"n": "0"})
            )
            deadline, n = time.monotonic() + 30, 0
            while "real" not in names():
                assert time.monotonic() < deadline, (
                    "no review admitted; refused: "
                    f"{proc.metric('tether_webhook_callers_refused_total')}\n{proc.log()}"
                )
                n += 1
                core.patch_namespaced_config_map("real", ns, {"data": {"n": str(n)}})
                time.sleep(0.3)
            # every call came with the API server's certificate: none was refused
            assert proc.metric("tether_webhook_callers_refused_total") == 0, proc.log()
            admitted = proc.metric("tether_webhook_admission_requests_total")
            assert admitted >= 1

            # a pod without the certificate forges a review of a name never written: 401,
            # nothing admitted, nothing forwarded
            status, body = proc.post("/validate", stack.review(ns, "ghost"))
            assert status == 401 and json.loads(body)["error"] == "unauthenticated"
            assert proc.metric("tether_webhook_callers_refused_total", reason="no-certificate") == 1
            # and the API server's calls still pass: a later write reaches the receiver after
            # the refusal, which therefore had its chance to forward (it did not)
            core.create_namespaced_config_map(
                ns, client.V1ConfigMap(metadata=client.V1ObjectMeta(name="after"), data={"n": "1"})
            )
            receiver.wait_for(lambda _: "after" in names(), timeout=30)
            assert "ghost" not in names()
            assert proc.metric("tether_webhook_admission_requests_total") == admitted + 1
            assert proc.metric("tether_webhook_callers_refused_total") == 1
        finally:
            proc.stop()
