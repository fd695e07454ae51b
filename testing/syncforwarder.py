"""A synchronous-forwarding admission webhook, the way Kyma's runtime-watcher forwards: a
comparison configuration for the end-to-end benchmark (bench/e2e.py), never part of Tether.

Inside the admission call the handler POSTs a change record built from the request's object
to the listener and answers ``allowed`` only after the last attempt; there is no queue, no
coalescing and no rate limit, and one process (one replica) serves every call.

Reading of the anchor ("forwards inside the admission call, synchronously, 3 attempts with
2 s and 4 s backoff, retries only on 5xx, 15 s webhook timeout, one replica, no queue"),
checked against runtime-watcher's handler (pester client, ``MaxRetries = 3``,
``ExponentialBackoff``: 2^i s, an ``http.Client`` with a 3-minute timeout built anew for
every admission call):

* up to 3 attempts; 2 s after the first, 4 s after the second, none after the third;
* an HTTP answer is retried only if it is a 5xx (a 4xx, 429 included, is final);
  a transport failure (refused, reset, timeout) is retried too, as pester does:
  ``retry_errors=False`` gives the narrower reading (only 5xx at all);
* each attempt waits up to 180 s for its answer (the client's 3-minute timeout): the
  apiserver's own webhook timeout (``timeoutSeconds: 15``, registered by the benchmark with
  ``failurePolicy: Ignore``) is what ends a call to a listener that never answers;
* a new TLS connection per admission call (the original builds a new transport per call),
  kept across that call's attempts; the TLS context is built once (cheaper than the
  original, which also reloads the certificate files per call);
* every call is forwarded: a ConfigMap has no spec, so runtime-watcher registers every
  UPDATE as a change; the apiserver's request is answered ``allowed`` whatever happened.

The record carries what the admission request holds: the object's data before the write is
persisted, so no resourceVersion of the write exists yet; it is sent as
``admission-<request uid>`` (not an integer, so the listener orders such records by
``observedAt``). Objects whose name starts with ``probe-`` are answered at once without
forwarding (the benchmark's registration probes).

    python -m testing.syncforwarder WORKDIR TARGET_URL TARGET_CA CLIENT_CERT CLIENT_KEY RUNTIME_ID

prints its port and the serving CA's file, serves until stdin closes, then prints its
counters as one JSON line. ``GET /stats`` answers the same counters while it runs.
"""

from __future__ import annotations

import dataclasses
import datetime
import http.client
import json
import pathlib
import ssl
import sys
import threading
import time
import urllib.parse
from collections.abc import Callable
from http import server
from typing import Any

from tether.base import certs

BACKOFF_SECONDS = (2.0, 4.0)  # after attempt 1 and 2
HTTP_TIMEOUT_SECONDS = 180.0  # runtime-watcher's HTTPTimeout (3 minutes)
PROBE_PREFIX = "probe-"


@dataclasses.dataclass(frozen=True)
class Policy:
    attempts: int = 3
    backoff: tuple[float, ...] = BACKOFF_SECONDS
    retry_errors: bool = True
    timeout: float = HTTP_TIMEOUT_SECONDS


def record_of(request: dict[str, Any], runtime_id: str, now: str) -> dict[str, Any] | None:
    """The change record the handler sends for one AdmissionRequest (None: nothing to send)."""
    op = request.get("operation")
    obj = request.get("oldObject") if op == "DELETE" else request.get("object")
    if op not in ("CREATE", "UPDATE", "DELETE") or not isinstance(obj, dict):
        return None
    meta = obj.get("metadata") or {}
    name = meta.get("name") or request.get("name") or ""
    if not name or name.startswith(PROBE_PREFIX):
        return None
    rec: dict[str, Any] = {
        "apiVersion": "tether.kyma-project.io/v1",
        "kind": "ConfigMapChange",
        "runtimeId": runtime_id,
        "namespace": request.get("namespace") or meta.get("namespace"),
        "name": name,
        "uid": meta.get("uid") or "",
        "resourceVersion": f"admission-{request.get('uid', '')}"[:64],
        "observedAt": now,
        "deleted": op == "DELETE",
        "source": "webhook",
    }
    if op != "DELETE":
        rec.update(
            labels=meta.get("labels") or {},
            annotations=meta.get("annotations") or {},
            data=obj.get("data") or {},
            binaryData=obj.get("binaryData") or {},
        )
    return rec


def retry_after(status: int | None, policy: Policy) -> bool:
    """Whether an attempt's result is retried: a 5xx answer, or (``status`` None) a
    transport failure if the policy retries those."""
    if status is None:
        return policy.retry_errors
    return status >= 500


Post = Callable[
    [http.client.HTTPSConnection | None], tuple[int | None, str, http.client.HTTPSConnection | None]
]


def forward(
    post: Post, policy: Policy, sleep: Callable[[float], None] = time.sleep
) -> tuple[str, int]:
    """Run the attempts; returns (outcome of the last attempt, attempts made)."""
    conn: http.client.HTTPSConnection | None = None
    outcome = "none"
    attempt = 0
    try:
        for attempt in range(1, policy.attempts + 1):
            status, outcome, conn = post(conn)
            if not retry_after(status, policy) or attempt == policy.attempts:
                break
            sleep(policy.backoff[min(attempt, len(policy.backoff)) - 1])
    finally:
        if conn is not None:
            conn.close()
    return outcome, attempt


class SyncForwarder:
    def __init__(
        self,
        workdir: pathlib.Path,
        target: str,
        target_ca: pathlib.Path,
        client_cert: pathlib.Path,
        client_key: pathlib.Path,
        runtime_id: str,
        policy: Policy | None = None,
    ) -> None:
        self.ca = certs.CertificateAuthority.create("syncforwarder-serving-ca")
        pair = self.ca.issue("syncforwarder", ip_addresses=["127.0.0.1"], server=True)
        self.cert, self.key = workdir / "syncforwarder.crt", workdir / "syncforwarder.key"
        pair.write(self.cert, self.key)
        self.ca_file = workdir / "syncforwarder-ca.crt"
        self.ca_file.write_bytes(self.ca.cert_pem)
        url = urllib.parse.urlsplit(target)
        self.host, self.target_port = url.hostname or "127.0.0.1", url.port or 443
        self.path = f"/v1/runtimes/{runtime_id}/changes"
        self.runtime_id = runtime_id
        self.policy = policy or Policy()
        self.client_ctx = ssl.create_default_context(cafile=str(target_ca))
        self.client_ctx.load_cert_chain(str(client_cert), str(client_key))
        self.lock = threading.Lock()
        self.stats: dict[str, Any] = {"calls": 0, "forwarded": 0, "attempts": 0, "outcomes": {}}
        self.port = 0
        self._httpd: server.ThreadingHTTPServer | None = None

    def _post(self, body: bytes) -> Post:
        def post(
            conn: http.client.HTTPSConnection | None,
        ) -> tuple[int | None, str, http.client.HTTPSConnection | None]:
            if conn is None:
                conn = http.client.HTTPSConnection(
                    self.host,
                    self.target_port,
                    context=self.client_ctx,
                    timeout=self.policy.timeout,
                )
            with self.lock:
                self.stats["attempts"] += 1
            try:
                conn.request("POST", self.path, body, {"Content-Type": "application/json"})
                resp = conn.getresponse()
                resp.read()
                return resp.status, f"http-{resp.status}", conn
            except TimeoutError:
                conn.close()
                return None, "timeout", None
            except (OSError, http.client.HTTPException) as e:
                conn.close()
                return None, "tls" if isinstance(e, ssl.SSLError) else "connection", None

        return post

    def handle(self, review: dict[str, Any]) -> dict[str, Any]:
        request = review.get("request") or {}
        now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        rec = record_of(request, self.runtime_id, now)
        with self.lock:
            self.stats["calls"] += 1
        message = "not forwarded"
        if rec is not None:
            outcome, _ = forward(self._post(json.dumps(rec).encode()), self.policy)
            with self.lock:
                self.stats["forwarded"] += 1
                self.stats["outcomes"][outcome] = self.stats["outcomes"].get(outcome, 0) + 1
            message = f"kcp request: {outcome}"
        return {
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "response": {
                "uid": request.get("uid", ""),
                "allowed": True,
                "status": {"message": message},
            },
        }

    def start(self) -> SyncForwarder:
        owner = self

        class Handler(server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def _answer(self, doc: Any) -> None:
                body = json.dumps(doc).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self) -> None:  # noqa: N802
                with owner.lock:
                    self._answer(json.loads(json.dumps(owner.stats)))

            def do_POST(self) -> None:  # noqa: N802
                review = json.loads(self.rfile.read(int(self.headers.get("Content-Length", "0"))))
                self._answer(owner.handle(review))

        ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        ctx.load_cert_chain(self.cert, self.key)
        httpd = server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        httpd.daemon_threads = True
        httpd.request_queue_size = 128
        httpd.socket = ctx.wrap_socket(httpd.socket, server_side=True)
        self.port = httpd.server_address[1]
        self._httpd = httpd
        threading.Thread(
            target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        ).start()
        return self

    def stop(self) -> None:
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None


def main(argv: list[str]) -> int:
    workdir, target, target_ca, cert, key, runtime_id = argv[:6]
    retry_errors = "--no-retry-errors" not in argv[6:]
    fwd = SyncForwarder(
        pathlib.Path(workdir),
        target,
        pathlib.Path(target_ca),
        pathlib.Path(cert),
        pathlib.Path(key),
        runtime_id,
        Policy(retry_errors=retry_errors),
    ).start()
    print(fwd.port, fwd.ca_file, flush=True)
    sys.stdin.read()
    with fwd.lock:
        print(json.dumps(fwd.stats), flush=True)
    fwd.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
