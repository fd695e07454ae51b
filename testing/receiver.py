"""A small HTTPS + mTLS stand-in for the listener's change API that records what it gets.

Modes (switchable while running): ``ok`` (200 with per-item results ``persisted``),
``error`` (answers ``status`` with a JSON error and optional ``Retry-After``), ``slow``
(sleeps ``delay`` seconds, then answers ok). ``stop()``/``start()`` take it down and bring
it back on the same port. It checks the client certificate's CN against the runtime ID
in the path (403 otherwise), like the real listener.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import pathlib
import socket
import ssl
import threading
import time
from http import server
from typing import Any

from cryptography import x509

from tether.base import certs


class Receiver:
    def __init__(self, workdir: pathlib.Path, client_ca: certs.CertificateAuthority) -> None:
        self.ca = certs.CertificateAuthority.create("receiver-serving-ca")
        self.ca_file = workdir / "receiver-ca.crt"
        self.ca_file.write_bytes(self.ca.cert_pem)
        pair = self.ca.issue(
            "localhost", dns_names=["localhost"], ip_addresses=["127.0.0.1"], server=True
        )
        self._cert, self._key = workdir / "receiver.crt", workdir / "receiver.key"
        pair.write(self._cert, self._key)
        self._client_ca_file = workdir / "receiver-client-ca.crt"
        self._client_ca_file.write_bytes(client_ca.cert_pem)
        self.lock = threading.Lock()
        self.requests: list[dict[str, Any]] = []  # {"path", "cn", "body"}
        self.mode = "ok"
        self.status = 500
        self.retry_after: str | None = None
        self.delay = 0.0
        self.state_items: list[dict[str, Any]] = []
        self.connections = 0
        self.port = 0
        self._httpd: server.ThreadingHTTPServer | None = None
        self._open: set[Any] = set()

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    def records(self) -> list[dict[str, Any]]:
        """Every record received with 200, in arrival order (batches flattened)."""
        out: list[dict[str, Any]] = []
        with self.lock:
            for r in self.requests:
                if r["answered"] != 200:
                    continue
                body = r["body"]
                out.extend(
                    body["items"]
                    if body.get("kind") in ("ConfigMapChangeList", "ObjectChangeList")
                    else [body]
                )
        return out

    def wait_for(self, predicate: Any, timeout: float = 20.0) -> list[dict[str, Any]]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            got = self.records()
            if predicate(got):
                return got
            time.sleep(0.05)
        raise AssertionError(
            f"receiver did not get the expected records in {timeout}s: {self.records()}"
        )

    def start(self) -> Receiver:
        ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        ctx.load_cert_chain(self._cert, self._key)
        ctx.load_verify_locations(self._client_ca_file)
        ctx.verify_mode = ssl.CERT_REQUIRED
        owner = self

        class Handler(server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            wbufsize = 64 * 1024  # one write per response (flushed after each request)
            disable_nagle_algorithm = True

            def log_message(self, *args: Any) -> None:
                pass

            def setup(self) -> None:
                super().setup()
                with owner.lock:
                    owner.connections += 1
                    owner._open.add(self.connection)

            def finish(self) -> None:
                with owner.lock:
                    owner._open.discard(self.connection)
                super().finish()

            def _answer(self, status: int, doc: Any, headers: dict[str, str] | None = None) -> None:
                body = json.dumps(doc).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                for k, v in (headers or {}).items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(body)

            def _cn(self) -> str:
                peer = self.connection.getpeercert()
                for rdn in peer.get("subject", ()):
                    for k, v in rdn:
                        if k == "commonName":
                            return str(v)
                return ""

            def do_GET(self) -> None:  # noqa: N802
                limit = 2
                start = 0
                if "continue=" in self.path:
                    start = int(self.path.split("continue=")[1].split("&")[0])
                page = owner.state_items[start : start + limit]
                nxt = str(start + limit) if start + limit < len(owner.state_items) else ""
                self._answer(200, {"items": page, "continue": nxt})

            def do_POST(self) -> None:  # noqa: N802
                length = int(self.headers.get("Content-Length", "0"))
                raw = self.rfile.read(length)
                runtime = self.path.split("/")[3] if self.path.count("/") >= 4 else ""
                entry: dict[str, Any] = {"path": self.path, "cn": self._cn(), "answered": 0}
                try:
                    entry["body"] = json.loads(raw)
                except ValueError:
                    entry["body"] = {}
                with owner.lock:
                    owner.requests.append(entry)
                    mode, status, retry_after, delay = (
                        owner.mode,
                        owner.status,
                        owner.retry_after,
                        owner.delay,
                    )
                if entry["cn"] != runtime:
                    entry["answered"] = 403
                    self._answer(403, {"error": "runtime mismatch", "details": "CN differs"})
                    return
                if mode == "slow":
                    time.sleep(delay)
                if mode == "error":
                    entry["answered"] = status
                    self._answer(
                        status,
                        {"error": "injected", "details": f"status {status}"},
                        {"Retry-After": retry_after} if retry_after else None,
                    )
                    return
                body = entry["body"]
                items = body.get("items", [body]) if isinstance(body, dict) else []
                entry["answered"] = 200
                self._answer(
                    200,
                    {
                        "results": [
                            {
                                "namespace": i.get("namespace"),
                                "name": i.get("name"),
                                "resourceVersion": i.get("resourceVersion"),
                                "outcome": "persisted",
                            }
                            for i in items
                        ]
                    },
                )

        httpd = server.ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        httpd.daemon_threads = True
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
        with self.lock:
            open_now, self._open = list(self._open), set()
        for sock in open_now:  # kept-alive connections go down too
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)


def main(argv: list[str]) -> int:
    """``python -m testing.receiver WORKDIR CLIENT_CA_PEM``: serve in this process
    (e.g. for a benchmark), print the port, stop when stdin closes; then print the number
    of records received."""
    import sys

    workdir, ca_pem = pathlib.Path(argv[0]), pathlib.Path(argv[1]).read_bytes()
    ca = certs.CertificateAuthority.create("unused")
    r = Receiver(
        workdir, dataclasses.replace(ca, cert=x509.load_pem_x509_certificate(ca_pem))
    ).start()
    print(r.port, flush=True)
    sys.stdin.read()
    print(len(r.records()), flush=True)
    r.stop()
    return 0


if __name__ == "__main__":
    import sys

    sys.exit(main(sys.argv[1:]))


RUNTIME_ID = "rt-4a1f"  # the webhook tests' runtime


@dataclasses.dataclass
class RuntimeCert:
    """A runtime's client certificate and the CA that issued it."""

    ca: certs.CertificateAuthority
    cert_file: pathlib.Path
    key_file: pathlib.Path
