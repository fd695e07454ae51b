"""A hostile runtime API server: real TLS on 127.0.0.1, one behaviour of the ones a tenant's
API server can show the management plane (issue 22, tests/foundation/test_runtime_bounds.py,
tests/enroller, tests/compass):

    trickle        the status line and headers, then one byte of body every ``interval``
    trickle_head   the status line and headers themselves, one byte every ``interval``
    huge           200 with a body of ``size`` bytes (``Content-Length`` announced or, with
                   ``chunked``, not: the cap must hold while reading)
    redirect       302 to ``location`` (e.g. the KCP's own API server)
    hang           the headers of a 200 with a Content-Length, then nothing
    not_found      404 with a Status body for every request (an empty or foreign cluster)
    ok             200 ``{}`` (a server that answers, for the well-behaved path)

``Hostile.kubeconfig(token=...)`` is a kubeconfig for it (its CA, a static token or a client
certificate); ``requests`` lists (method, path, authorization header) of what reached it and
``sent`` counts body bytes written, so a test shows what was (not) read or sent.
"""

from __future__ import annotations

import base64
import http.server
import socket
import ssl
import tempfile
import threading
import time
from typing import Any

import yaml

from tether.base import certs

STATUS_404 = (
    b'{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"NotFound",'
    b'"code":404,"message":"not found"}'
)


class Hostile:
    def __init__(
        self,
        mode: str,
        *,
        interval: float = 1.0,
        size: int = 200 * 1024 * 1024,
        chunked: bool = False,
        location: str = "",
    ) -> None:
        self.mode, self.interval, self.size, self.chunked = mode, interval, size, chunked
        self.location = location
        self.ca = certs.CertificateAuthority.create("hostile-runtime-ca")
        self.serving = self.ca.issue(
            "hostile-runtime", ip_addresses=["127.0.0.1"], dns_names=["localhost"], server=True
        )
        self.requests: list[tuple[str, str, str]] = []
        self.sent = 0
        self.connections = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._server: http.server.ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self.port = 0

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    def kubeconfig(
        self,
        *,
        token: str | None = "hostile-test-token",
        server: str | None = None,
        client: certs.KeyPair | None = None,
    ) -> bytes:
        user: dict[str, Any] = {}
        if token:
            user["token"] = token
        if client is not None:
            user["client-certificate-data"] = base64.b64encode(client.cert_pem).decode()
            user["client-key-data"] = base64.b64encode(client.key_pem).decode()
        return yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "current-context": "hostile",
                "clusters": [
                    {
                        "name": "hostile",
                        "cluster": {
                            "server": server or self.url,
                            "certificate-authority-data": base64.b64encode(
                                self.ca.cert_pem
                            ).decode(),
                        },
                    }
                ],
                "users": [{"name": "hostile", "user": user}],
                "contexts": [
                    {"name": "hostile", "context": {"cluster": "hostile", "user": "hostile"}}
                ],
            }
        ).encode()

    # -- serving -------------------------------------------------------------------------------

    def __enter__(self) -> Hostile:
        owner = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
                pass

            def _any(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                if length:
                    self.rfile.read(min(length, 1 << 20))
                with owner._lock:
                    owner.requests.append(
                        (self.command, self.path, self.headers.get("Authorization") or "")
                    )
                try:
                    owner._answer(self)
                except (BrokenPipeError, ConnectionResetError, ssl.SSLError, OSError):
                    self.close_connection = True

            do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _any  # noqa: N815

        class Server(http.server.ThreadingHTTPServer):
            daemon_threads = True
            allow_reuse_address = True

            def get_request(self) -> tuple[socket.socket, Any]:
                sock, addr = super().get_request()
                with owner._lock:
                    owner.connections += 1
                return sock, addr

        server = Server(("127.0.0.1", 0), Handler)
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        with tempfile.TemporaryDirectory() as tmp:
            cert, key = f"{tmp}/tls.crt", f"{tmp}/tls.key"
            with open(cert, "wb") as f:
                f.write(self.serving.cert_pem)
            with open(key, "wb") as f:
                f.write(self.serving.key_pem)
            ctx.load_cert_chain(cert, key)
        server.socket = ctx.wrap_socket(server.socket, server_side=True)
        self._server = server
        self.port = server.server_address[1]
        self._thread = threading.Thread(
            target=server.serve_forever,
            kwargs={"poll_interval": 0.1},
            name="hostile-apiserver",
            daemon=True,
        )
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()

    def _write(self, h: http.server.BaseHTTPRequestHandler, data: bytes, body: bool = True) -> None:
        h.wfile.write(data)
        h.wfile.flush()
        if body:
            with self._lock:
                self.sent += len(data)

    def _trickle(self, h: http.server.BaseHTTPRequestHandler, data: bytes, body: bool) -> None:
        for i in range(len(data)):
            if self._stop.wait(self.interval):
                return
            self._write(h, data[i : i + 1], body)

    def _answer(self, h: http.server.BaseHTTPRequestHandler) -> None:
        mode = self.mode
        if mode == "ok":
            self._write(
                h,
                b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}",
            )
        elif mode == "not_found":
            self._write(
                h,
                b"HTTP/1.1 404 Not Found\r\nContent-Type: application/json\r\n"
                + f"Content-Length: {len(STATUS_404)}\r\n\r\n".encode()
                + STATUS_404,
            )
        elif mode == "redirect":
            self._write(
                h,
                f"HTTP/1.1 302 Found\r\nLocation: {self.location}\r\n"
                "Content-Length: 0\r\n\r\n".encode(),
            )
        elif mode == "trickle":
            body = b'{"kind":"Secret","apiVersion":"v1","metadata":{"name":"x"}}' * 1000
            self._write(
                h,
                b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                + f"Content-Length: {len(body)}\r\n\r\n".encode(),
                body=False,
            )
            self._trickle(h, body, True)
        elif mode == "trickle_head":
            head = (
                b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                + b"X-Padding: "
                + b"a" * 4000
                + b"\r\nContent-Length: 2\r\n\r\n{}"
            )
            self._trickle(h, head, False)
        elif mode == "hang":
            self._write(
                h,
                b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                b"Content-Length: 1000\r\n\r\n",
                body=False,
            )
            self._stop.wait(3600)
        elif mode == "huge":
            head = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
            head += (
                b"Transfer-Encoding: chunked\r\n\r\n"
                if self.chunked
                else f"Content-Length: {self.size}\r\n\r\n".encode()
            )
            self._write(h, head, body=False)
            block = b"[" + b"0," * (512 * 1024) + b"0]"
            left = self.size
            while left > 0 and not self._stop.is_set():
                piece = block[: min(len(block), left)]
                self._write(
                    h, (f"{len(piece):x}\r\n".encode() + piece + b"\r\n") if self.chunked else piece
                )
                left -= len(piece)
            if self.chunked:
                self._write(h, b"0\r\n\r\n")
        else:
            raise ValueError(f"unknown mode {mode}")


serving = Hostile  # with hostile.serving("trickle", interval=0.3) as h: ...


def wait_for(predicate: Any, timeout: float = 10.0) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if predicate():
            return True
        time.sleep(0.05)
    return bool(predicate())
