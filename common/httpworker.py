"""A gunicorn gthread worker that bounds what one client can hold: time, threads, connections.

gunicorn's own gthread worker hands each accepted connection to a thread, which then does
the TLS handshake and reads the request head with blocking calls: a client that sends half
a ClientHello, or half a request head, holds a thread as long as it likes (200 such
connections froze the listener; 32 half-sent heads blocked all threads). This worker keeps
every connection in its main loop, non-blocking, until the connection has a complete
request head, and gives threads out fairly:

    accept ── over max_connections? close the oldest connection that has no verified
    │          certificate yet (still handshaking, or anonymous), else close the new one
    ├─ TLS handshake    non-blocking, ``handshake_seconds`` from accept
    ├─ request head     non-blocking, ``head_seconds``, at most ``max_head_bytes``; a body
    │                   of known length up to ``prebuffer_bytes`` is read here too
    ├─ queue per peer   peer = the client certificate's CN, else the address; a peer already
    │                   holding ``max_connections_per_peer`` connections is closed here
    ├─ thread           round-robin over peers, at most ``max_busy_per_peer`` threads each
    │                   (a peer over it waits in its queue, holding no thread)
    │   body            each read bounded by ``idle_seconds``, all reads by ``body_seconds``
    │                   (``DeadlineExceeded``, a ``TimeoutError``); each write by idle_seconds
    └─ keep-alive       back in the main loop (``keepalive`` seconds idle), then the head again

Unauthenticated connections therefore never hold a thread while they stall: a thread only
ever gets a connection whose request head is complete, and the application refuses them
before reading a body. Refusals are reported to ``on_refused(reason, peer)`` (subclasses
count and audit them); the reasons are the fixed set ``REASONS``.

The first bind address is the data port (TLS when gunicorn is configured with a
certificate); further bind addresses are served in plain HTTP (operations port: health,
readiness, metrics, never the data API).
"""

from __future__ import annotations

import collections
import dataclasses
import errno
import heapq
import itertools
import re
import selectors
import socket
import ssl
import sys
import time
from functools import partial
from typing import Any

from gunicorn import http, util
from gunicorn import sock as gsock
from gunicorn.workers import gthread

REASONS = ("connection_cap", "peer_connection_cap", "handshake_timeout", "head_timeout",
           "head_too_large", "tls_refused")
HANDSHAKE, HEAD, READY, BUSY, KEEPALIVE, LINGER, CLOSED = range(7)
_HEAD_END = b"\r\n\r\n"
_CONTENT_LENGTH = re.compile(rb"\r\ncontent-length[ \t]*:[ \t]*([0-9]{1,12})[ \t]*\r\n",
                             re.IGNORECASE)


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


class BoundedWorker(gthread.ThreadWorker):  # type: ignore[misc]
    limits: Limits = Limits()

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.worker_connections = sys.maxsize  # accept always: refusals are ours, and cheap
        self._waiting: collections.OrderedDict[Conn, None] = collections.OrderedDict()
        self._timers: list[tuple[float, int, Conn]] = []
        self._seq = itertools.count()
        self._ready: collections.OrderedDict[str, collections.deque[Conn]] = (
            collections.OrderedDict())
        self._peers: collections.Counter[str] = collections.Counter()
        self._busy_by_peer: collections.Counter[str] = collections.Counter()
        self._busy = 0
        self._prebuffered = 0
        self._tls_index = 0 if self.cfg.is_ssl else -1

    # -- hooks for subclasses ------------------------------------------------------------

    def on_refused(self, reason: str, peer: str, exc: BaseException | None = None) -> None:
        """A connection was closed by a limit (``reason`` in ``REASONS``)."""

    def export_limits(self) -> dict[str, float]:
        lim = self.limits
        return {"threads": self.cfg.threads, **dataclasses.asdict(lim)}

    # -- accept, handshake, head -----------------------------------------------------------

    def accept(self, listener: Any) -> None:
        try:
            client, addr = listener.accept()
        except OSError as e:
            if e.errno not in (errno.EAGAIN, errno.ECONNABORTED, errno.EWOULDBLOCK):
                raise
            return
        if self.nr_conns >= self.limits.max_connections and not self._evict_one():
            self.on_refused("connection_cap", peer_address(addr))
            util.close(client)
            return
        self.nr_conns += 1
        client.setblocking(False)
        now = time.monotonic()
        try:
            if self.sockets.index(listener) == self._tls_index:
                ctx = gsock.ssl_context(self.cfg)
                ctx.sslsocket_class = BoundedSSLSocket
                wrapped: Any = ctx.wrap_socket(client, server_side=True,
                                               do_handshake_on_connect=False,
                                               suppress_ragged_eofs=True)
                conn = Conn(self.cfg, wrapped, addr, listener.getsockname())
                conn.phase, conn.deadline = HANDSHAKE, now + self.limits.handshake_seconds
            else:
                conn = Conn(self.cfg, BoundedSocket.adopt(client), addr, listener.getsockname())
                conn.phase, conn.deadline = HEAD, now + self.limits.head_seconds
        except (OSError, ValueError):
            self.nr_conns -= 1
            util.close(client)
            return
        self._waiting[conn] = None
        self._watch(conn, selectors.EVENT_READ)
        self._timer(conn)

    def _evict_one(self) -> bool:
        """Close the oldest connection without a verified identity to make room."""
        for conn in self._waiting:
            if conn.anonymous:
                self.on_refused("connection_cap", peer_address(conn.client))
                self._drop(conn)
                return True
        return False

    def _watch(self, conn: Conn, events: int) -> None:
        try:
            self.poller.register(conn.sock, events, partial(self._on_event, conn))
        except KeyError:
            self.poller.modify(conn.sock, events, partial(self._on_event, conn))

    def _timer(self, conn: Conn) -> None:
        heapq.heappush(self._timers, (conn.deadline, next(self._seq), conn))

    def _on_event(self, conn: Conn, _fileobj: Any) -> None:
        if conn.phase == HANDSHAKE:
            self._handshake(conn)
        elif conn.phase == KEEPALIVE:
            conn.phase, conn.deadline = HEAD, time.monotonic() + self.limits.head_seconds
            self._timer(conn)
            self._read_head(conn)
        elif conn.phase == HEAD:
            self._read_head(conn)
        elif conn.phase == LINGER:
            self._linger(conn)

    def _handshake(self, conn: Conn) -> None:
        try:
            conn.sock.do_handshake()
        except ssl.SSLWantReadError:
            self._watch(conn, selectors.EVENT_READ)
            return
        except ssl.SSLWantWriteError:
            self._watch(conn, selectors.EVENT_WRITE)
            return
        except ssl.SSLError as e:
            if not isinstance(e, ssl.SSLEOFError | ssl.SSLZeroReturnError):
                self.on_refused("tls_refused", peer_address(conn.client), e)
            self._drop(conn)
            return
        except OSError:
            self._drop(conn)
            return
        cn = certificate_cn(conn.sock)
        key = f"cn:{cn}" if cn is not None else f"ip:{peer_address(conn.client)}"
        if self._peers[key] >= self.limits.max_connections_per_peer:
            self.on_refused("peer_connection_cap", peer_address(conn.client))
            self._drop(conn)
            return
        self._peers[key] += 1
        conn.key = key
        if cn is not None:
            conn.anonymous = False
            self._waiting.pop(conn, None)
        conn.phase, conn.deadline = HEAD, time.monotonic() + self.limits.head_seconds
        self._watch(conn, selectors.EVENT_READ)
        self._timer(conn)
        self._read_head(conn)  # the request may already sit in the TLS buffer

    def _read_head(self, conn: Conn) -> None:
        if conn.key is None:  # plain HTTP: the peer is its address
            key = f"ip:{peer_address(conn.client)}"
            if self._peers[key] >= self.limits.max_connections_per_peer:
                self.on_refused("peer_connection_cap", peer_address(conn.client))
                self._drop(conn)
                return
            self._peers[key] += 1
            conn.key = key
        while not self._complete(conn):
            try:
                data = conn.sock.recv(65536)
            except (ssl.SSLWantReadError, ssl.SSLWantWriteError, BlockingIOError):
                return
            except OSError:  # includes ssl.SSLError: a broken or reset connection
                self._drop(conn)
                return
            if not data:
                self._drop(conn)
                return
            conn.buf += data
            if len(conn.buf) > self.limits.max_head_bytes and _HEAD_END not in conn.buf:
                self.on_refused("head_too_large", peer_address(conn.client))
                self._answer_and_drop(conn, 431, "Request Header Fields Too Large")
                return
        self._unwatch(conn)
        self._release_prebuffer(conn)
        if conn.parser is None:
            conn.parser = http.get_parser(self.cfg, conn.sock, conn.client)
        conn.parser.unreader.unread(bytes(conn.buf))
        conn.buf = bytearray()
        conn.want = None
        conn.phase = READY
        self._ready.setdefault(conn.key, collections.deque()).append(conn)
        self._dispatch()

    def _complete(self, conn: Conn) -> bool:
        """Whether the buffer holds what the request needs before a thread takes it: the
        head, and a small body of known length too (``prebuffer_bytes``, within the worker's
        ``prebuffer_budget``), so a client that stalls in a small body holds no thread."""
        if conn.want is not None:
            return len(conn.buf) >= conn.want
        end = conn.buf.find(_HEAD_END)
        if end < 0:
            return False
        conn.want = end + len(_HEAD_END)
        limit = self.limits.prebuffer_bytes
        if limit:
            m = _CONTENT_LENGTH.search(conn.buf, 0, conn.want)
            length = int(m.group(1)) if m is not None else 0
            if 0 < length <= limit and self._prebuffered + length <= self.limits.prebuffer_budget:
                conn.want += length
                conn.prebuffer = length
                self._prebuffered += length
        return len(conn.buf) >= conn.want

    def _release_prebuffer(self, conn: Conn) -> None:
        self._prebuffered -= conn.prebuffer
        conn.prebuffer = 0

    def _unwatch(self, conn: Conn) -> None:
        try:
            self.poller.unregister(conn.sock)
        except (KeyError, ValueError, OSError):
            pass

    def _answer_and_drop(self, conn: Conn, status: int, text: str) -> None:
        try:
            conn.sock.send(f"HTTP/1.1 {status} {text}\r\nConnection: close\r\n"
                           "Content-Length: 0\r\n\r\n".encode())
        except (OSError, ValueError):
            pass
        self._drop(conn)

    # -- threads -------------------------------------------------------------------------

    def _dispatch(self) -> None:
        """Hand ready connections to free threads, round-robin over peers; a peer at its
        thread cap keeps its connections queued (holding no thread)."""
        cap = self.limits.max_busy_per_peer
        skipped = 0
        while self._busy < self.cfg.threads and self._ready and skipped < len(self._ready):
            key, queue = next(iter(self._ready.items()))
            if self._busy_by_peer[key] >= cap:
                self._ready.move_to_end(key)
                skipped += 1
                continue
            skipped = 0
            conn = queue.popleft()
            if queue:
                self._ready.move_to_end(key)
            else:
                del self._ready[key]
            self._waiting.pop(conn, None)
            self._busy += 1
            self._busy_by_peer[key] += 1
            conn.phase = BUSY
            conn.sock.idle = self.limits.idle_seconds
            conn.sock.deadline = time.monotonic() + self.limits.body_seconds
            fut = self.tpool.submit(self.handle, conn)
            fut.add_done_callback(
                lambda f, c=conn: self.method_queue.defer(self._finished, c, f))

    def handle_request(self, req: Any, conn: Any) -> bool:
        try:
            result: bool = super().handle_request(req, conn)
            return result
        except TimeoutError:  # a body or a write stalled past its bound: close quietly
            return False

    def _finished(self, conn: Conn, fut: Any) -> None:
        self._busy -= 1
        if conn.key is not None:
            self._busy_by_peer[conn.key] -= 1
            if self._busy_by_peer[conn.key] <= 0:
                del self._busy_by_peer[conn.key]
        try:
            keep = bool(fut.result()) if not fut.cancelled() else False
        except Exception:  # noqa: BLE001 - gthread.handle already reported it
            keep = False
        if conn.phase == CLOSED:
            self._dispatch()
            return
        conn.sock.deadline = None
        if keep:
            conn.sock.setblocking(False)
            pending = conn.parser.unreader.take_buffered()
            if conn.anonymous:
                self._waiting[conn] = None
            conn.want = None
            if pending:  # the client pipelined its next request
                conn.buf = bytearray(pending)
                conn.phase, conn.deadline = HEAD, time.monotonic() + self.limits.head_seconds
                self._watch(conn, selectors.EVENT_READ)
                self._timer(conn)
                self._read_head(conn)
            else:
                keepalive = self.cfg.keepalive if self.alive else gthread.STOP_KEEPALIVE_LINGER
                conn.phase, conn.deadline = KEEPALIVE, time.monotonic() + keepalive
                self._watch(conn, selectors.EVENT_READ)
                self._timer(conn)
        else:
            self._drop(conn, graceful=True)
        self._dispatch()

    # -- closing -------------------------------------------------------------------------

    def _drop(self, conn: Conn, graceful: bool = False) -> None:
        if conn.phase == CLOSED:
            return
        if conn.phase != BUSY:
            self._unwatch(conn)
        if conn.phase == READY and conn.key is not None and conn.key in self._ready:
            queue = self._ready[conn.key]
            try:
                queue.remove(conn)
            except ValueError:
                pass
            if not queue:
                del self._ready[conn.key]
        self._waiting.pop(conn, None)
        self._release_prebuffer(conn)
        if conn.key is not None:
            self._peers[conn.key] -= 1
            if self._peers[conn.key] <= 0:
                del self._peers[conn.key]
            conn.key = None
        if graceful and self._start_linger(conn):
            return
        conn.phase = CLOSED
        self.nr_conns -= 1
        util.close(conn.sock)

    def _start_linger(self, conn: Conn) -> bool:
        """Half-close and read what the peer still sends, in the main loop, without
        blocking it (RFC 9112 9.6: a full close with unread data would reset the
        connection and cut the last answer)."""
        try:
            conn.sock.deadline = None
            conn.sock.setblocking(False)
            conn.sock.shutdown(socket.SHUT_WR)
        except (OSError, ValueError):
            return False
        conn.phase, conn.deadline = LINGER, time.monotonic() + self.limits.idle_seconds
        conn.lingered = 0
        conn.buf = bytearray()
        self._watch(conn, selectors.EVENT_READ)
        self._timer(conn)
        return True

    def _linger(self, conn: Conn) -> None:
        while conn.lingered < self.limits.linger_bytes:
            try:
                data = conn.sock.recv(262144)
            except (BlockingIOError, ssl.SSLWantReadError, ssl.SSLWantWriteError):
                return
            except OSError:
                break
            if not data:
                break
            conn.lingered += len(data)
        self._close_lingering(conn)

    def _close_lingering(self, conn: Conn) -> None:
        self._unwatch(conn)
        conn.phase = CLOSED
        self.nr_conns -= 1
        util.close(conn.sock)

    def _expire(self) -> None:
        now = time.monotonic()
        while self._timers and self._timers[0][0] <= now:
            deadline, _, conn = heapq.heappop(self._timers)
            if conn.deadline != deadline or conn.phase not in (HANDSHAKE, HEAD, KEEPALIVE, LINGER):
                continue  # a stale timer: the connection moved on
            if conn.phase == LINGER:
                self._close_lingering(conn)
                continue
            if conn.phase == HANDSHAKE:
                self.on_refused("handshake_timeout", peer_address(conn.client))
            elif conn.phase == HEAD:
                self.on_refused("head_timeout", peer_address(conn.client))
            self._drop(conn)

    def _timeout(self) -> float:
        if not self._timers:
            return 1.0
        return max(0.0, min(1.0, self._timers[0][0] - time.monotonic()))

    # -- the loop ------------------------------------------------------------------------

    def run(self) -> None:
        self.poller.register(self.method_queue.fileno(), selectors.EVENT_READ,
                             self.method_queue.run_callbacks)
        self.set_accept_enabled(True)
        while self.alive:
            self.notify()
            self.wait_for_and_dispatch_events(timeout=self._timeout())
            if not self.is_parent_alive():
                break
            self._expire()
        self.set_accept_enabled(False)
        for _, _, conn in list(self._timers):
            if conn.phase in (HANDSHAKE, HEAD, KEEPALIVE):
                self._drop(conn)
            elif conn.phase == LINGER:
                self._close_lingering(conn)
        graceful = time.monotonic() + self.cfg.graceful_timeout
        while (self._busy or self._ready) and time.monotonic() < graceful:
            self.notify()
            self.wait_for_and_dispatch_events(timeout=0.5)
            self._expire()
        self.tpool.shutdown(wait=False)
        self.poller.close()
        self.method_queue.close()
        for s in self.sockets:
            s.close()


def worker_class(base: type[BoundedWorker], limits: Limits) -> type[BoundedWorker]:
    """``base`` with ``limits`` (for gunicorn's ``worker_class`` setting)."""
    return type(base.__name__, (base,), {"limits": limits, "__module__": base.__module__})

