"""lifecycle-manager's watcher in an SKR, as lifecycle-manager registers it, beside Tether.

What lifecycle-manager installs in every SKR (kyma-project/lifecycle-manager@c5b83f1,
``skr-webhook/resources.yaml`` and ``internal/service/watcher/resources``): in the remote
namespace ``kyma-system`` a Deployment, Services ``skr-webhook`` and ``skr-webhook-metrics``,
PriorityClass ``skr-webhook-priority``, four NetworkPolicies ``kyma-project.io--*``, the
Secret ``skr-webhook-tls`` (its own CA's ``ca.crt``, ``tls.crt``, ``tls.key``) and one
ValidatingWebhookConfiguration ``skr-webhook`` with one webhook per Watcher CR of the KCP
(``BuildValidatingWebhookConfigFromWatchers``): name
``<namespace>.<name>.operator.kyma-project.io``,
objectSelector the Watcher's ``labelsToWatch`` (no namespaceSelector), one rule of the
Watcher's group/version/resource (``<resource>/status`` for ``field: status``) on CREATE,
UPDATE and DELETE, failurePolicy Ignore, timeoutSeconds 15, sideEffects NoneOnDryRun,
admissionReviewVersions v1, caBundle the Secret's CA, service ``skr-webhook`` path
``/validate/<manager>``. lifecycle-manager's own Watcher (config/watcher/kyma_watcher.yaml)
watches ``kymas`` of ``operator.kyma-project.io`` labelled
``operator.kyma-project.io/watched-by: kyma``.

``WatcherPeer`` is a stand-in for the runtime-watcher server (kyma-project/runtime-watcher@f92889f,
``runtime-watcher/``), not the real binary: its Go module
``github.com/kyma-project/runtime-watcher/skr`` is not published (its tags are the
repository's release numbers, not module tags; the Go module proxy answers 403), so a clean
clone cannot build it from Go modules. The stand-in answers as the real handler does
(``allowed: true`` always, status Success, the request's uid, the AdmissionReview's
apiVersion/kind) and records every call (manager from the path, kind, operation, object);
the real one also posts an event to the KCP before answering, which this leaves out (its
time is the watcher's own, not Tether's). The registration is built exactly as
lifecycle-manager builds it, except ``clientConfig`` is a URL (local planes have no Service
network), as ``testing.webhookstack`` does for Tether's.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import pathlib
import ssl
import threading
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from tether.base import certs

REMOTE_NAMESPACE = "kyma-system"
VWC_NAME = "skr-webhook"
OPERATOR_GROUP = "operator.kyma-project.io"
WATCHED_BY = {"operator.kyma-project.io/watched-by": "kyma"}
TIMEOUT_SECONDS = 15

# what lifecycle-manager puts in an SKR for its watcher: (kind, namespace, name)
KLM_SKR_OBJECTS = (
    ("ValidatingWebhookConfiguration", "", VWC_NAME),
    ("Secret", REMOTE_NAMESPACE, "skr-webhook-tls"),
    ("Service", REMOTE_NAMESPACE, "skr-webhook"),
    ("Service", REMOTE_NAMESPACE, "skr-webhook-metrics"),
    ("Deployment", REMOTE_NAMESPACE, "skr-webhook"),
    ("PriorityClass", "", "skr-webhook-priority"),
    ("NetworkPolicy", REMOTE_NAMESPACE, "kyma-project.io--seed-to-watcher"),
    ("NetworkPolicy", REMOTE_NAMESPACE, "kyma-project.io--watcher-to-apiserver"),
    ("NetworkPolicy", REMOTE_NAMESPACE, "kyma-project.io--metrics-to-watcher"),
    ("NetworkPolicy", REMOTE_NAMESPACE, "kyma-project.io--watcher-to-dns"),
)


@dataclasses.dataclass(frozen=True)
class Watcher:
    """The fields of a Watcher CR (operator.kyma-project.io/v1beta2) the registration uses."""

    namespace: str
    name: str
    manager: str
    labels_to_watch: dict[str, str]
    group: str
    version: str
    resource: str
    field: str = "spec"


# lifecycle-manager's own Watcher (config/watcher/kyma_watcher.yaml, deployed in kcp-system)
KLM_WATCHER = Watcher(
    "kcp-system", "watcher", "lifecycle-manager", WATCHED_BY, OPERATOR_GROUP, "*", "kymas"
)


def webhook_name(w: Watcher) -> str:
    return f"{w.namespace}.{w.name}.{OPERATOR_GROUP}"


def vwc_body(ca_pem: bytes, watchers: list[Watcher], base_url: str) -> dict[str, Any]:
    """``BuildValidatingWebhookConfigFromWatchers`` with ``base_url`` for the Service."""
    hooks = []
    for w in watchers:
        resources = [f"{w.resource}/status"] if w.field == "status" else [w.resource]
        hooks.append(
            {
                "name": webhook_name(w),
                "objectSelector": {"matchLabels": dict(w.labels_to_watch)},
                "admissionReviewVersions": ["v1"],
                "clientConfig": {
                    "caBundle": base64.b64encode(ca_pem).decode(),
                    "url": f"{base_url}/validate/{w.manager}",
                },
                "rules": [
                    {
                        "apiGroups": [w.group],
                        "apiVersions": [w.version],
                        "resources": resources,
                        "operations": ["CREATE", "UPDATE", "DELETE"],
                    }
                ],
                "sideEffects": "NoneOnDryRun",
                "timeoutSeconds": TIMEOUT_SECONDS,
                "failurePolicy": "Ignore",
            }
        )
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingWebhookConfiguration",
        "metadata": {
            "name": VWC_NAME,
            "labels": {f"{OPERATOR_GROUP}/managed-by": "lifecycle-manager"},
        },
        "webhooks": hooks,
    }


@dataclasses.dataclass(frozen=True)
class Call:
    manager: str
    kind: str
    operation: str
    namespace: str
    name: str


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        path = urllib.parse.urlsplit(self.path).path  # the apiserver adds ?timeout=15s
        if not path.startswith("/validate/") or path == "/validate/":
            self.send_error(404)  # the real handler answers nothing for an empty module name
            return
        review = json.loads(body)
        req = review["request"]
        obj = req.get("object") or req.get("oldObject") or {}
        meta = obj.get("metadata", {})
        self.server.record(
            Call(
                path.removeprefix("/validate/"),
                req["kind"]["kind"],
                req["operation"],
                meta.get("namespace", ""),
                meta.get("name", ""),
            )
        )
        out = json.dumps(
            {
                "apiVersion": review.get("apiVersion"),
                "kind": review.get("kind"),
                "response": {
                    "uid": req["uid"],
                    "allowed": True,
                    "status": {"status": "Success", "message": "request succeeded"},
                },
            }
        )
        data = out.encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base's name
        return


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.calls: list[Call] = []
        self.lock = threading.Lock()

    def record(self, call: Call) -> None:
        with self.lock:
            self.calls.append(call)


class WatcherPeer:
    """The stand-in server on 127.0.0.1 with a serving certificate of its own CA (as
    lifecycle-manager's ``skr-webhook-tls``: not Tether's)."""

    def __init__(self, workdir: pathlib.Path) -> None:
        self.ca = certs.CertificateAuthority.create("klm-watcher-ca")
        pair = self.ca.issue(
            "skr-webhook.kyma-system.svc",
            dns_names=["localhost"],
            ip_addresses=["127.0.0.1"],
            server=True,
        )
        cert, key = workdir / "skr-webhook-tls.crt", workdir / "skr-webhook-tls.key"
        pair.write(cert, key)
        self._server = _Server()
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(str(cert), str(key))
        self._server.socket = ctx.wrap_socket(self._server.socket, server_side=True)
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="watcher-peer", daemon=True
        )

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self._server.server_address[1]}"

    def start(self) -> WatcherPeer:
        self._thread.start()
        return self

    def calls(self) -> list[Call]:
        with self._server.lock:
            return list(self._server.calls)

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(10)


def main(argv: list[str]) -> int:
    """``python -m testing.watcherpeer WORKDIR``: serve in this process (a benchmark's peer
    of its own), write the CA to WORKDIR/klm-watcher-ca.crt, print the port, stop when stdin
    closes; then print the number of calls."""
    import sys

    workdir = pathlib.Path(argv[0])
    peer = WatcherPeer(workdir).start()
    (workdir / "klm-watcher-ca.crt").write_bytes(peer.ca.cert_pem)
    print(peer.url.rsplit(":", 1)[1], flush=True)
    sys.stdin.read()
    print(len(peer.calls()), flush=True)
    peer.stop()
    return 0


if __name__ == "__main__":
    import sys

    sys.exit(main(sys.argv[1:]))
