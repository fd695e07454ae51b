"""Another admission webhook that denies every request it gets (HTTPS, for the apiserver)."""

from __future__ import annotations

import json
import pathlib
import ssl
import threading
from http import server
from typing import Any

from tether.base import certs


class Denier:
    def __init__(self, workdir: pathlib.Path) -> None:
        self.ca = certs.CertificateAuthority.create("denier-ca")
        pair = self.ca.issue("denier", ip_addresses=["127.0.0.1"], server=True)
        self.cert, self.key = workdir / "denier.crt", workdir / "denier.key"
        pair.write(self.cert, self.key)
        self.calls = 0
        self._httpd: server.ThreadingHTTPServer | None = None
        self.port = 0

    def start(self) -> Denier:
        owner = self

        class Handler(server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:  # noqa: N802
                review = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                owner.calls += 1
                body = json.dumps(
                    {
                        "apiVersion": "admission.k8s.io/v1",
                        "kind": "AdmissionReview",
                        "response": {
                            "uid": review["request"]["uid"],
                            "allowed": False,
                            "status": {"code": 403, "message": "denied by test"},
                        },
                    }
                ).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        ctx.load_cert_chain(self.cert, self.key)
        httpd = server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        httpd.daemon_threads = True
        httpd.socket = ctx.wrap_socket(httpd.socket, server_side=True)
        self.port = httpd.server_address[1]
        self._httpd = httpd
        threading.Thread(
            target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        ).start()
        return self

    def vwc(self, name: str, namespace: str) -> dict[str, Any]:
        import base64

        return {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingWebhookConfiguration",
            "metadata": {"name": name},
            "webhooks": [
                {
                    "name": "deny.tests.tether.kyma-project.io",
                    "admissionReviewVersions": ["v1"],
                    "clientConfig": {
                        "url": f"https://127.0.0.1:{self.port}/deny",
                        "caBundle": base64.b64encode(self.ca.cert_pem).decode(),
                    },
                    "rules": [
                        {
                            "apiGroups": [""],
                            "apiVersions": ["v1"],
                            "operations": ["CREATE", "UPDATE"],
                            "resources": ["configmaps"],
                        }
                    ],
                    "failurePolicy": "Fail",
                    "sideEffects": "None",
                    "timeoutSeconds": 5,
                    "namespaceSelector": {
                        "matchLabels": {"kubernetes.io/metadata.name": namespace}
                    },
                    "objectSelector": {"matchLabels": {"deny": "true"}},
                }
            ],
        }

    def stop(self) -> None:
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
