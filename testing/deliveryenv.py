"""A runtime's delivery health in the KCP for the listener's tests: its RuntimeDelivery read
back (``delivery_object``) and summarized (``summary``), and ``Delayer``, an admission webhook
that the KCP calls on ``runtimedeliveries/status`` and that answers after ``delay`` seconds, so
that a flush is observably slow (``vwc`` registers it for one namespace)."""

from __future__ import annotations

import base64
import datetime
import json
import ssl
import threading
import time
from http import server
from typing import Any

from kubernetes import client

from listener.fleet import heartbeat
from testing.listenerenv import Env
from tether.base import certs
from tether.kube import apitypes
from tether.wire import delivery


def delivery_object(env: Env, runtime_id: str) -> dict[str, Any] | None:
    try:
        obj: Any = client.CustomObjectsApi(env.api).get_namespaced_custom_object(
            apitypes.RUNTIME_DELIVERIES.group,
            apitypes.RUNTIME_DELIVERIES.version,
            env.namespace,
            apitypes.RUNTIME_DELIVERIES.plural,
            heartbeat.lease_name(runtime_id),
        )
        return dict(obj)
    except client.ApiException as e:
        if e.status == 404:
            return None
        raise


def summary(env: Env, runtime_id: str) -> delivery.Summary | None:
    obj = delivery_object(env, runtime_id)
    if obj is None or "status" not in obj:
        return None
    return delivery.summarize(obj["status"], datetime.datetime.now(datetime.UTC))


class Delayer:
    """Allows every request after ``delay`` seconds; counts the calls."""

    def __init__(self, workdir: Any) -> None:
        self.ca = certs.CertificateAuthority.create("delayer-ca")
        pair = self.ca.issue("delayer", ip_addresses=["127.0.0.1"], server=True)
        self.cert, self.key = workdir / "delayer.crt", workdir / "delayer.key"
        pair.write(self.cert, self.key)
        self.delay = 0.0
        self.calls = 0
        owner = self

        class Handler(server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.0"  # one request per connection: none left open

            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:  # noqa: N802
                review = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                owner.calls += 1
                time.sleep(owner.delay)
                body = json.dumps(
                    {
                        "apiVersion": "admission.k8s.io/v1",
                        "kind": "AdmissionReview",
                        "response": {"uid": review["request"]["uid"], "allowed": True},
                    }
                ).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        ctx.load_cert_chain(self.cert, self.key)
        self.httpd = server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.httpd.socket = ctx.wrap_socket(self.httpd.socket, server_side=True)
        self.port = self.httpd.server_address[1]
        threading.Thread(
            target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        ).start()

    def vwc(self, name: str, namespace: str) -> dict[str, Any]:
        return {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingWebhookConfiguration",
            "metadata": {"name": name},
            "webhooks": [
                {
                    "name": "delay.tests.tether.kyma-project.io",
                    "admissionReviewVersions": ["v1"],
                    "clientConfig": {
                        "url": f"https://127.0.0.1:{self.port}/delay",
                        "caBundle": base64.b64encode(self.ca.cert_pem).decode(),
                    },
                    "rules": [
                        {
                            "apiGroups": [apitypes.RUNTIME_DELIVERIES.group],
                            "apiVersions": [apitypes.RUNTIME_DELIVERIES.version],
                            "operations": ["UPDATE"],
                            "resources": [f"{apitypes.RUNTIME_DELIVERIES.plural}/status"],
                        }
                    ],
                    "failurePolicy": "Fail",
                    "sideEffects": "None",
                    "timeoutSeconds": 15,
                    "namespaceSelector": {
                        "matchLabels": {"kubernetes.io/metadata.name": namespace}
                    },
                }
            ],
        }
