"""A kube-apiserver that answers 503 for a while: a TCP proxy in front of it whose
clients (the runtime's parts) use a kubeconfig of their own.

``Unavailable(plane)`` listens on a free loopback port. Passing (the default), it copies
bytes both ways to the apiserver: TLS passes through untouched, the client verifies the
apiserver and presents its certificate itself. ``fail()``: every connection open is
closed, and every new one is answered by the proxy itself, over TLS with a certificate of
its own CA, with ``503 Service Unavailable`` and a ``Status`` body (as an apiserver whose
etcd is unavailable answers), then closed. ``pass_through()`` ends it.

``kubeconfig(dest)`` writes the plane's admin kubeconfig pointed at the proxy and trusting
both the apiserver's CA and the proxy's, so a client's TLS succeeds in both modes and the
fault the client sees is the 5xx.
"""

from __future__ import annotations

import base64
import contextlib
import json
import pathlib
import socket
import ssl
import tempfile
import threading

from testing import controlplane, relay
from tether.base import certs

BODY = json.dumps(
    {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": "etcdserver: request timed out (fault injected)",
        "reason": "ServiceUnavailable",
        "code": 503,
    }
).encode()
RESPONSE = (
    b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"
    b"Content-Length: " + str(len(BODY)).encode() + b"\r\nConnection: close\r\n\r\n" + BODY
)


class Unavailable:
    def __init__(self, plane: controlplane.ControlPlane) -> None:
        self.plane = plane
        self.backend = ("127.0.0.1", int(plane.url.rsplit(":", 1)[1]))
        self.port = controlplane.free_port()
        self.ca = certs.CertificateAuthority.create("tether-fault-unavailable-ca")
        pair = self.ca.issue("kube-apiserver", ip_addresses=["127.0.0.1"], server=True)
        self._tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        with tempfile.TemporaryDirectory() as d:
            cert, key = pathlib.Path(d) / "tls.crt", pathlib.Path(d) / "tls.key"
            pair.write(cert, key)
            self._tls.load_cert_chain(cert, key)
        self._lock = threading.Lock()
        self._failing = False
        self._open: set[socket.socket] = set()
        self.answered_503 = 0  # requests the proxy answered itself
        self.by_agent: dict[str, int] = {}  # of those, by the User-Agent's first word
        self.passed = 0  # connections passed to the apiserver
        self._sock = relay.listen("127.0.0.1", self.port, 256)
        relay.serve(self._sock, self._dispatch, f"unavailable-{self.port}")

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    def kubeconfig(self, dest: pathlib.Path) -> pathlib.Path:
        cfg = json.loads(self.plane.kubeconfig.read_text())
        cluster = cfg["clusters"][0]["cluster"]
        bundle = base64.b64decode(cluster["certificate-authority-data"]) + self.ca.cert_pem
        cluster["server"] = self.url
        cluster["certificate-authority-data"] = base64.b64encode(bundle).decode()
        dest.write_text(json.dumps(cfg))
        dest.chmod(0o600)
        return dest

    def fail(self) -> None:
        with self._lock:
            self._failing = True
            held, self._open = self._open, set()
        for s in held:
            _close(s)

    def pass_through(self) -> None:
        with self._lock:
            self._failing = False

    def close(self) -> None:
        _close(self._sock)
        with self._lock:
            held, self._open = self._open, set()
        for s in held:
            _close(s)

    def _dispatch(self, conn: socket.socket) -> relay.Handler:
        with self._lock:
            failing = self._failing
        return self._answer if failing else self._pass

    def _answer(self, conn: socket.socket) -> None:
        try:
            conn.settimeout(10)
            with self._tls.wrap_socket(conn, server_side=True) as tls:
                head = b""
                while b"\r\n\r\n" not in head and len(head) < 65536:
                    chunk = tls.recv(65536)
                    if not chunk:
                        return
                    head += chunk
                _read_body(tls, head)
                tls.sendall(RESPONSE)
                agent = _agent(head)
                with self._lock:
                    self.answered_503 += 1
                    self.by_agent[agent] = self.by_agent.get(agent, 0) + 1
        except (OSError, ssl.SSLError):
            pass
        finally:
            _close(conn)

    def _pass(self, conn: socket.socket) -> None:
        upstream = relay.dial(self.backend)
        if upstream is None:
            _close(conn)
            return
        with self._lock:
            self.passed += 1
            self._open |= {conn, upstream}
        relay.relay(conn, upstream)
        with self._lock:
            self._open -= {conn, upstream}
        _close(conn)
        _close(upstream)


def _agent(head: bytes) -> str:
    """The product of a request's User-Agent (``tether-webhook/1.2`` -> ``tether-webhook``)."""
    for line in head.split(b"\r\n\r\n", 1)[0].split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"user-agent":
            return value.strip().split(b"/", 1)[0].decode(errors="replace")[:40]
    return ""


def _read_body(tls: ssl.SSLSocket, head: bytes) -> None:
    """Reads a Content-Length body to its end (so the client is not reset mid-send)."""
    top, _, rest = head.partition(b"\r\n\r\n")
    length = 0
    for line in top.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length" and value.strip().isdigit():
            length = int(value.strip())
    while len(rest) < length:
        chunk = tls.recv(65536)
        if not chunk:
            return
        rest += chunk


def _close(s: socket.socket) -> None:
    with contextlib.suppress(OSError):
        s.shutdown(socket.SHUT_RDWR)
    with contextlib.suppress(OSError):
        s.close()
