"""The way to a runtime's API server: every cost bounded before it is paid.

A runtime's API server is tenant input as much as its kubeconfig: it may trickle one byte
every few seconds, answer hundreds of MiB, redirect to an internal address or hang after the
headers. A socket timeout bounds one read, not a call, so the bounds here are:

* **a wall-clock deadline per call** (connect, TLS handshake, headers and body together):
  ``deadline(seconds)`` sets it for the calling thread; every connect and every read of the
  connection's TLS socket (``_DeadlineSocket``) gets only the time left, and a read after the
  deadline fails at once;
* **a response size cap**, checked against ``Content-Length`` before reading and while
  reading (``read_bounded``: the body is read in chunks, never buffered past the cap);
  compressed answers are not accepted (``Accept-Encoding: identity``), so the cap counts
  what is held;
* **connections per runtime**: one pool of at most ``Limits.max_connections``; a caller
  waits for a free one only until its deadline;
* **addresses**: the server's name is resolved here and every address checked against the
  denied networks (``addresses``) before a connection opens (a name that resolves to an
  internal address at connect time, DNS rebinding included, is refused the same way);
* **no redirects** (``Kube`` answers a 3xx with ``errors.Redirected``).

The TLS context holds the kubeconfig's CA (else the system's trust store) and its client
certificate; nothing is read from a path the kubeconfig names.
"""

from __future__ import annotations

import contextlib
import os
import socket
import ssl
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from typing import Any, NamedTuple

import urllib3
from urllib3.connection import HTTPSConnection
from urllib3.connectionpool import HTTPSConnectionPool
from urllib3.exceptions import NewConnectionError

from tether.kube.gateway import addresses, errors, kubeconfig

CHUNK = 64 * 1024


class Limits(NamedTuple):
    """The bounds of every call into one runtime's API server."""

    max_bytes: int = 16 * 1024 * 1024  # an answer larger than this is refused
    max_connections: int = 2  # open to one runtime at once
    denied: Sequence[addresses.Network] = addresses.DEFAULT_DENIED


# -- the calling thread's deadline -----------------------------------------------------------

_local = threading.local()


@contextlib.contextmanager
def deadline(seconds: float) -> Iterator[float]:
    """Every connect and read of this thread's runtime calls ends by ``seconds`` from now;
    yields the deadline (``time.monotonic()``)."""
    previous = getattr(_local, "deadline", None)
    _local.deadline = time.monotonic() + seconds
    try:
        yield _local.deadline
    finally:
        _local.deadline = previous


def remaining() -> float | None:
    """Seconds left of this thread's deadline (``None``: none set); ``socket.timeout``
    when it has passed."""
    end: float | None = getattr(_local, "deadline", None)
    if end is None:
        return None
    left = end - time.monotonic()
    if left <= 0:
        raise TimeoutError("deadline exceeded")
    return left


class _DeadlineSocket(ssl.SSLSocket):
    """A TLS socket whose every read and write waits at most the thread's time left."""

    def _bound(self) -> None:
        left = remaining()
        if left is not None:
            self.settimeout(left)

    def recv_into(self, buffer: Any, nbytes: int | None = None, flags: int = 0) -> int:
        self._bound()
        return super().recv_into(buffer, nbytes, flags)

    def recv(self, buflen: int = 1024, flags: int = 0) -> bytes:
        self._bound()
        return super().recv(buflen, flags)

    def sendall(self, data: Any, flags: int = 0) -> None:
        self._bound()
        super().sendall(data, flags)

    def send(self, data: Any, flags: int = 0) -> int:
        self._bound()
        return super().send(data, flags)


class _Connection(HTTPSConnection):
    """Resolves the host itself and connects only to an address outside the denied
    networks, within the thread's deadline."""

    denied: Sequence[addresses.Network] = addresses.DEFAULT_DENIED

    def _new_conn(self) -> socket.socket:
        try:
            left = remaining()
        except TimeoutError:
            raise NewConnectionError(self, "deadline exceeded before connecting") from None
        timeout = left if left is not None else self.timeout
        try:
            infos = socket.getaddrinfo(self._dns_host, self.port, type=socket.SOCK_STREAM)
        except OSError as e:
            raise NewConnectionError(
                self, f"cannot resolve the host ({type(e).__name__})"
            ) from None
        if not infos:
            raise NewConnectionError(self, "the host resolves to no address")
        for *_, addr in infos:
            if addresses.denied(str(addr[0]).split("%", 1)[0], self.denied):
                raise errors.AddressRefusedError(
                    self,
                    f"the server resolves to {addr[0]}, in a denied "
                    "network (TETHER_RUNTIME_DENIED_NETWORKS)",
                )
        family, kind, proto, _, addr = infos[0]
        sock = socket.socket(family, kind, proto)
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            sock.settimeout(timeout if isinstance(timeout, int | float) else None)
            sock.connect(addr)
        except OSError as e:
            sock.close()
            raise NewConnectionError(self, f"cannot connect ({type(e).__name__})") from None
        return sock


def _context(conn: kubeconfig.Connection) -> ssl.SSLContext:
    ctx = ssl.create_default_context(
        cadata=conn.ca_pem.decode("ascii", "replace") if conn.ca_pem else None
    )  # None: the system's store
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    if conn.cert_pem is not None and conn.key_pem is not None:
        _load_client_cert(ctx, conn.cert_pem, conn.key_pem)
    ctx.sslsocket_class = _DeadlineSocket
    return ctx


def _load_client_cert(ctx: ssl.SSLContext, cert_pem: bytes, key_pem: bytes) -> None:
    """``ssl`` loads a certificate chain from files only. On Linux the files are anonymous
    memory (``memfd_create``, read through ``/proc/self/fd``, closed at once): nothing of the
    key touches a disk and no directory is made per runtime. Elsewhere: a private directory,
    removed at once. An encrypted key fails (the empty password)."""
    memfd = getattr(os, "memfd_create", None)
    if memfd is not None and os.path.isdir("/proc/self/fd"):
        fds = [memfd("tether-kc-crt", os.MFD_CLOEXEC), memfd("tether-kc-key", os.MFD_CLOEXEC)]
        try:
            for fd, data in zip(fds, (cert_pem, key_pem), strict=True):
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view) :]
            ctx.load_cert_chain(
                f"/proc/self/fd/{fds[0]}", f"/proc/self/fd/{fds[1]}", password=lambda: b""
            )
        finally:
            for fd in fds:
                os.close(fd)
        return
    with tempfile.TemporaryDirectory(prefix="tether-kc-") as tmp:
        cert, key = os.path.join(tmp, "tls.crt"), os.path.join(tmp, "tls.key")
        for path, data in ((cert, cert_pem), (key, key_pem)):
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "wb") as f:
                f.write(data)
        ctx.load_cert_chain(cert, key, password=lambda: b"")


def pool(conn: kubeconfig.Connection, limits: Limits) -> urllib3.PoolManager:
    """A connection pool to the runtime's API server with the limits' bounds
    (``ssl.SSLError``/``ValueError`` when its certificates do not load)."""
    denied = tuple(limits.denied)

    class Connection(_Connection):
        pass

    Connection.denied = denied

    class Pool(HTTPSConnectionPool):
        ConnectionCls = Connection

    kw: dict[str, Any] = {
        "ssl_context": _context(conn),
        "maxsize": limits.max_connections,
        "block": True,
    }
    if conn.tls_server_name:
        kw["server_hostname"] = conn.tls_server_name
    manager = urllib3.PoolManager(num_pools=2, **kw)
    manager.pool_classes_by_scheme = {"https": Pool}
    return manager


def read_bounded(resp: Any, max_bytes: int | None, what: str) -> bytes:
    """The body of ``resp`` (read with ``preload_content=False``), at most ``max_bytes``
    (``errors.TooLarge`` beyond, the connection closed)."""
    if max_bytes is not None:
        length = resp.headers.get("Content-Length")
        if length is not None and length.strip().isdigit() and int(length) > max_bytes:
            raise errors.TooLarge(
                f"{what}: the answer announces {int(length)} bytes, more than "
                f"the {max_bytes} allowed"
            )
        encoding = (resp.headers.get("Content-Encoding") or "identity").strip().lower()
        if encoding != "identity":
            raise errors.TooLarge(f"{what}: a compressed answer ({encoding[:20]}) is refused")
    parts: list[bytes] = []
    size = 0
    while True:
        chunk = resp.read(CHUNK)
        if not chunk:
            break
        size += len(chunk)
        if max_bytes is not None and size > max_bytes:
            raise errors.TooLarge(
                f"{what}: the answer is larger than the {max_bytes} bytes allowed"
            )
        parts.append(chunk)
    return b"".join(parts)


def discard(resp: Any) -> None:
    """Close the answer's connection instead of returning it to the pool (a body not read
    to its end, a broken exchange)."""
    conn = getattr(resp, "connection", None)
    with contextlib.suppress(Exception):
        resp.close()
    if conn is not None:
        with contextlib.suppress(Exception):
            conn.close()
    with contextlib.suppress(Exception):
        resp.release_conn()
