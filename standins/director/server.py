"""Serve the stand-in Director over HTTPS on loopback in background threads.

Connections are kept alive (HTTP/1.1, as a real Director behind its ingress keeps them), so a
client pays one TLS handshake per connection, not one per request. werkzeug's development
server closes every connection, hence this small WSGI server of its own (``http.server``,
one thread per connection). What it holds is bounded: a TLS handshake and a request must
arrive within ``idle_seconds`` (default ``IDLE_SECONDS``; a kept-alive connection idle that
long is closed), a request body (``Content-Length`` or chunked) is at most ``MAX_BODY`` bytes
(a larger one is answered 413 and the connection closed), at most
``MAX_CONNECTIONS`` connections are served at once (more are closed at once), and ``stop()``
closes every open connection.
"""

from __future__ import annotations

import contextlib
import io
import json
import pathlib
import socket
import ssl
import sys
import threading
from collections.abc import Callable, Iterable
from http import server as http_server
from typing import Any

from standins.director import app as app_mod
from standins.director import store as store_mod
from tether.base import certs

IDLE_SECONDS = 30.0
MAX_BODY = 1024 * 1024
MAX_CONNECTIONS = 256


class _Server(http_server.ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False
    request_queue_size = 128

    def __init__(
        self,
        addr: tuple[str, int],
        handler: type[_Handler],
        app: Callable[..., Any],
        ctx: ssl.SSLContext,
        idle_seconds: float,
    ) -> None:
        super().__init__(addr, handler)
        self.app, self.ctx, self.idle_seconds = app, ctx, idle_seconds
        self.lock = threading.Lock()
        self.open: set[socket.socket] = set()

    def verify_request(self, request: Any, client_address: Any) -> bool:
        with self.lock:
            return len(self.open) < MAX_CONNECTIONS

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # a broken handshake or a dropped connection: nothing to report

    def close_open(self) -> None:
        with self.lock:
            open_now, self.open = list(self.open), set()
        for sock in open_now:  # kept-alive connections go down too (the Director is down)
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)


class _Handler(http_server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    wbufsize = 64 * 1024  # one write per answer (flushed after each request)
    disable_nagle_algorithm = True
    server: _Server

    def setup(self) -> None:
        self.request.settimeout(self.server.idle_seconds)  # kept by the TLS socket
        tls = self.server.ctx.wrap_socket(self.request, server_side=True)  # handshake here
        self.request = tls
        with self.server.lock:
            self.server.open.add(tls)
        super().setup()

    def finish(self) -> None:
        with contextlib.suppress(OSError):
            super().finish()
        with self.server.lock:
            self.server.open.discard(self.connection)
        with contextlib.suppress(OSError):
            self.connection.close()

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
        pass

    def _refuse(self, status: int, error: str) -> None:
        body = json.dumps({"error": error}).encode()
        self.close_connection = True
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(body)

    def _drain(self, length: int) -> None:
        left = min(length, 16 * MAX_BODY)
        with contextlib.suppress(OSError):
            while left > 0:
                chunk = self.rfile.read(min(left, 64 * 1024))
                if not chunk:
                    return
                left -= len(chunk)

    def _chunked(self) -> bytes | None:
        """A chunked body, at most ``MAX_BODY`` bytes (None: refused, answered)."""
        parts: list[bytes] = []
        size = 0
        while True:
            line = self.rfile.readline(130).split(b";", 1)[0].strip()
            try:
                n = int(line, 16)
            except ValueError:
                self._refuse(400, "invalid chunked body")
                return None
            if n == 0:
                while self.rfile.readline(8 * 1024).strip():  # trailers, up to the blank line
                    pass
                if size > MAX_BODY:  # read to its end: the client reads the answer
                    self._refuse(413, f"request body larger than {MAX_BODY} bytes")
                    return None
                return b"".join(parts)
            size += n
            if n < 0 or size > 16 * MAX_BODY:
                self._refuse(413, f"request body larger than {MAX_BODY} bytes")
                return None
            if size > MAX_BODY:
                self._drain(n)
                parts = []
            else:
                parts.append(self.rfile.read(n))
            self.rfile.readline(3)

    def _body(self) -> bytes | None:
        """The request's body (None: refused, answered)."""
        if "chunked" in (self.headers.get("Transfer-Encoding") or "").lower():
            return self._chunked()
        raw = (self.headers.get("Content-Length") or "0").strip()
        if not raw.isdigit():
            self._refuse(400, "invalid Content-Length")
            return None
        if int(raw) > MAX_BODY:
            self._drain(int(raw))  # so that the client reads the answer, not a reset
            self._refuse(413, f"request body larger than {MAX_BODY} bytes")
            return None
        return self.rfile.read(int(raw))

    def _serve(self) -> None:
        body = self._body()
        if body is None:
            return
        status, headers, chunks = self._call(body)
        payload = b"".join(chunks)
        self.send_response(int(status.split(None, 1)[0]))
        for k, v in headers:
            if k.lower() not in ("content-length", "connection", "transfer-encoding"):
                self.send_header(k, v)
        self.send_header("Content-Length", str(len(payload)))
        if self.close_connection:
            self.send_header("Connection", "close")
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(payload)

    def _call(self, body: bytes) -> tuple[str, list[tuple[str, str]], Iterable[bytes]]:
        path, _, query = self.path.partition("?")
        environ: dict[str, Any] = {
            "REQUEST_METHOD": self.command,
            "SCRIPT_NAME": "",
            "PATH_INFO": path,
            "QUERY_STRING": query,
            "SERVER_NAME": self.server.server_address[0],
            "SERVER_PORT": str(self.server.server_address[1]),
            "SERVER_PROTOCOL": self.request_version,
            "REMOTE_ADDR": self.client_address[0],
            "CONTENT_LENGTH": str(len(body)),
            "CONTENT_TYPE": self.headers.get("Content-Type", ""),
            "wsgi.version": (1, 0),
            "wsgi.url_scheme": "https",
            "wsgi.input": io.BytesIO(body),
            "wsgi.errors": sys.stderr,
            "wsgi.multithread": True,
            "wsgi.multiprocess": False,
            "wsgi.run_once": False,
        }
        for k, v in self.headers.items():
            key = "HTTP_" + k.upper().replace("-", "_")
            if key not in ("HTTP_CONTENT_TYPE", "HTTP_CONTENT_LENGTH", "HTTP_TRANSFER_ENCODING"):
                environ[key] = f"{environ[key]},{v}" if key in environ else v
        answer: list[Any] = []

        def start_response(
            status: str, headers: list[tuple[str, str]], exc_info: Any = None
        ) -> Any:
            answer[:] = [status, headers]
            return lambda data: None  # the app returns its body (Flask does)

        result = self.server.app(environ, start_response)
        try:
            chunks = list(result)
        finally:
            if hasattr(result, "close"):
                result.close()
        return answer[0], answer[1], chunks

    do_GET = do_POST = do_PUT = do_DELETE = do_HEAD = _serve  # noqa: N815


class DirectorServer:
    """``DirectorServer(store, cert_file, key_file).start()``; ``.url`` is the base URL.

    ``stop()`` closes the socket and every kept-alive connection (the Director is down:
    connections are refused); ``start()`` again serves on the same port."""

    def __init__(
        self,
        store: store_mod.Store,
        cert_file: str | pathlib.Path,
        key_file: str | pathlib.Path,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        idle_seconds: float = IDLE_SECONDS,
    ) -> None:
        self.store = store
        self.idle_seconds = idle_seconds
        self.host = host
        self.port = port
        self._cert, self._key = str(cert_file), str(key_file)
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        return f"https://{self.host}:{self.port}"

    @property
    def connections(self) -> int:
        """Connections open now (kept alive or serving)."""
        if self._server is None:
            return 0
        with self._server.lock:
            return len(self._server.open)

    def start(self) -> DirectorServer:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.minimum_version = ssl.TLSVersion.TLSv1_2
        ctx.load_cert_chain(self._cert, self._key)
        self._server = _Server(
            (self.host, self.port), _Handler, app_mod.create_app(self.store), ctx, self.idle_seconds
        )
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            name="director",
            kwargs={"poll_interval": 0.1},
            daemon=True,
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server.close_open()
            self._server = None
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None


def self_signed(dest: pathlib.Path) -> tuple[pathlib.Path, pathlib.Path, pathlib.Path]:
    """A CA and a serving certificate for 127.0.0.1/localhost: (ca, cert, key) files."""
    dest.mkdir(parents=True, exist_ok=True)
    ca = certs.CertificateAuthority.create("director-standin-ca")
    pair = ca.issue("director", dns_names=["localhost"], ip_addresses=["127.0.0.1"], server=True)
    ca_file, cert_file, key_file = dest / "ca.crt", dest / "tls.crt", dest / "tls.key"
    ca_file.write_bytes(ca.cert_pem)
    pair.write(cert_file, key_file)
    return ca_file, cert_file, key_file
