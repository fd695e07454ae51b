"""The connection side of ``tether.http.httpworker``: limits, deadline-bounded sockets, the
connection state the worker's main loop keeps, and who the peer is.

``Limits`` holds the bounds of one worker; ``BoundedSocket``/``BoundedSSLSocket`` give each
read ``idle_seconds`` and all reads of a body ``body_seconds`` (``DeadlineExceeded``, a
``TimeoutError``); ``Conn`` is gunicorn's connection plus the phase, deadline and peer key
of the worker; a peer is the client certificate's CN, else the address (``peer_address``,
``certificate_cn``).
"""

from __future__ import annotations

import dataclasses
import re
import selectors
import socket
import ssl
import time
from typing import Any

from gunicorn import sock as gsock
from gunicorn.workers import gthread

REASONS = (
    "connection_cap",
    "peer_connection_cap",
    "handshake_timeout",
    "head_timeout",
    "head_too_large",
    "tls_refused",
)
HANDSHAKE, HEAD, READY, BUSY, KEEPALIVE, LINGER, CLOSED = range(7)
_HEAD_END = b"\r\n\r\n"
_CONTENT_LENGTH = re.compile(
    rb"\r\ncontent-length[ \t]*:[ \t]*([0-9]{1,12})[ \t]*\r\n", re.IGNORECASE
)


@dataclasses.dataclass(frozen=True)
class Limits:
    """What one connection, and one peer, may hold in one worker process."""

    handshake_seconds: float = 5.0
    head_seconds: float = 10.0
    body_seconds: float = 30.0
    idle_seconds: float = 10.0
    max_connections: int = 1000
    max_connections_per_peer: int = 64
    max_busy_per_peer: int = 4
    max_head_bytes: int = 64 * 1024
    # after an answer that closes the connection, what the peer still sends (the rest of a
    # refused body) is read and discarded in the main loop, undecrypted, so that the peer
    # sees the answer instead of a reset: at most this much, within idle_seconds
    linger_bytes: int = 4 * 1024 * 1024
    # a body of known length up to this size is read in the main loop too, before a thread
    # takes the request (0: off), while the worker's prebuffered bytes stay within the budget
    prebuffer_bytes: int = 64 * 1024
    prebuffer_budget: int = 16 * 1024 * 1024


class DeadlineExceeded(TimeoutError):
    """A request's body did not arrive within its deadline."""


class _Bounded:
    """Socket behaviour for request threads: reads obey the request deadline, and
    'blocking' means 'blocking with the idle timeout', never forever."""

    __slots__ = ()
    idle: float | None
    deadline: float | None

    def _arm_read(self) -> None:
        deadline = self.deadline
        if deadline is None:
            return
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise DeadlineExceeded("request body deadline exceeded")
        idle = self.idle
        super().settimeout(remaining if idle is None else min(idle, remaining))  # type: ignore[misc]

    def recv(self, *args: Any) -> bytes:
        self._arm_read()
        data: bytes = super().recv(*args)  # type: ignore[misc]
        return data

    def setblocking(self, flag: bool) -> None:
        if flag and self.idle:
            super().settimeout(self.idle)  # type: ignore[misc]
        else:
            super().setblocking(flag)  # type: ignore[misc]

    def sendall(self, *args: Any) -> None:
        if self.deadline is not None and self.idle:
            super().settimeout(self.idle)  # type: ignore[misc]
        super().sendall(*args)  # type: ignore[misc]


class BoundedSocket(_Bounded, socket.socket):
    __slots__ = ("idle", "deadline")

    @classmethod
    def adopt(cls, sock: socket.socket) -> BoundedSocket:
        new = cls(sock.family, sock.type, sock.proto, fileno=sock.detach())
        new.idle, new.deadline = None, None
        return new


class BoundedSSLSocket(_Bounded, ssl.SSLSocket):
    idle: float | None = None
    deadline: float | None = None


class Conn(gthread.TConn):  # type: ignore[misc]
    """A connection with its phase, its peer and its current deadline."""

    def __init__(self, cfg: Any, sock: Any, client: Any, server: Any) -> None:
        super().__init__(cfg, sock, client, server)
        self.phase = HANDSHAKE
        self.key: str | None = None  # counted peer
        self.anonymous = True
        self.deadline = 0.0
        self.buf = bytearray()
        self.data_ready = True  # gthread.handle must not wait for data: the head is here
        self.lingered = 0
        self.want: int | None = None  # bytes the buffer must hold before a thread takes it
        self.prebuffer = 0  # of them, body bytes counted against the worker's budget


def peer_address(addr: Any) -> str:
    return str(addr[0]) if isinstance(addr, tuple) and addr else str(addr or "unix")


def certificate_cn(sock: Any) -> str | None:
    """The common name of a verified client certificate, else None."""
    if not isinstance(sock, ssl.SSLSocket):
        return None
    try:
        cert = sock.getpeercert()
    except (ValueError, OSError):
        return None
    subject: Any = (cert or {}).get("subject", ())
    for rdn in subject:
        for name, value in rdn:
            if name == "commonName":
                return str(value)
    return None


def head_length(buf: bytes | bytearray) -> int | None:
    """The length of the request head in ``buf`` (up to the blank line), None if incomplete."""
    end = buf.find(_HEAD_END)
    return None if end < 0 else end + len(_HEAD_END)


def content_length(buf: bytes | bytearray, head: int) -> int:
    """The Content-Length of the head ``buf[:head]`` (0 when absent)."""
    m = _CONTENT_LENGTH.search(buf, 0, head)
    return int(m.group(1)) if m is not None else 0


_CHUNKED = re.compile(rb"\r\ntransfer-encoding[ \t]*:", re.IGNORECASE)


def whole_request(conn: Conn) -> bool:
    """Whether the buffer holds the complete request: its head and all of its body (none,
    or a prebuffered one of known length), so it can be answered without reading more."""
    head = head_length(conn.buf)
    if head is None or _CHUNKED.search(conn.buf, 0, head):
        return False
    return content_length(conn.buf, head) == 0 or conn.prebuffer > 0


def answer_bytes(head: bytes, body: bytes, keep_alive: bool) -> bytes:
    """An HTTP/1.1 answer: ``head`` is the status line and headers (each ending in CRLF)."""
    return (
        head
        + b"Content-Length: %d\r\n" % len(body)
        + (b"" if keep_alive else b"Connection: close\r\n")
        + b"\r\n"
        + body
    )


def send_now(conn: Conn, data: bytes) -> bool:
    """Send a small answer from the main loop without blocking; False if it did not fit."""
    try:
        return bool(conn.sock.send(data) == len(data))
    except (OSError, ValueError):  # includes ssl.SSLWantWriteError
        return False


def receive(conn: Conn) -> bool | None:
    """Read what the peer sent into ``conn.buf`` without blocking: True when data came, None
    when the socket would block, False when the connection is gone (end of stream, reset,
    a TLS error)."""
    try:
        data = conn.sock.recv(65536)
    except (ssl.SSLWantReadError, ssl.SSLWantWriteError, BlockingIOError):
        return None
    except OSError:  # includes ssl.SSLError: a broken or reset connection
        return False
    conn.buf += data
    return bool(data)


def half_close(conn: Conn) -> bool:
    """Shut the writing side down, for lingering; False when the socket is gone."""
    try:
        conn.sock.deadline = None
        conn.sock.setblocking(False)
        conn.sock.shutdown(socket.SHUT_WR)
    except (OSError, ValueError):
        return False
    conn.lingered = 0
    conn.buf = bytearray()
    return True


def drain(conn: Conn, limit: int) -> bool:
    """Read and drop what a lingering peer still sends; True when it is done (end of
    stream, an error, or ``limit`` bytes read), False when the socket would block."""
    while conn.lingered < limit:
        try:
            data = conn.sock.recv(262144)
        except (BlockingIOError, ssl.SSLWantReadError, ssl.SSLWantWriteError):
            return False
        except OSError:
            return True
        if not data:
            return True
        conn.lingered += len(data)
    return True


def tls_conn(cfg: Any, client: socket.socket, addr: Any, server: Any) -> Conn:
    """A connection whose TLS handshake is still to be done (``handshake``), non-blocking."""
    ctx = gsock.ssl_context(cfg)
    ctx.sslsocket_class = BoundedSSLSocket
    wrapped: Any = ctx.wrap_socket(
        client, server_side=True, do_handshake_on_connect=False, suppress_ragged_eofs=True
    )
    return Conn(cfg, wrapped, addr, server)


def handshake(conn: Conn) -> int | OSError | None:
    """One step of the TLS handshake: None when done; the selector event to wait for
    (read or write); else why it failed: an ``ssl.SSLError`` (a refused handshake) or
    another ``OSError`` (the peer left: EOF, reset)."""
    try:
        conn.sock.do_handshake()
    except ssl.SSLWantReadError:
        return selectors.EVENT_READ
    except ssl.SSLWantWriteError:
        return selectors.EVENT_WRITE
    except (ssl.SSLEOFError, ssl.SSLZeroReturnError) as e:
        return OSError(str(e))
    except OSError as e:
        return e
    return None
