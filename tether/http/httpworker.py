"""A gunicorn gthread worker that bounds what one client can hold: time, threads, connections.

gunicorn's gthread worker does the TLS handshake and reads the request head in a thread, with
blocking calls, so a client sending half of either holds a thread as long as it likes. This
worker keeps every connection in its main loop, non-blocking, until the request is complete,
and gives threads out fairly (connection details in ``tether.http.httpconn``; what the
connections hold, per peer and in all, and their deadlines in ``tether.http.connledger``):

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
count and audit them); the reasons are the fixed set ``tether.http.httpconn.REASONS``.

The first bind address is the data port (TLS when gunicorn is configured with a
certificate); further bind addresses are served in plain HTTP (operations port: health,
readiness, metrics, never the data API).
"""

from __future__ import annotations

import collections
import dataclasses
import errno
import selectors
import ssl
import sys
import time
from functools import partial
from typing import Any

from gunicorn import http, util
from gunicorn.workers import gthread

from tether.http import connledger, fairqueue, httpconn
from tether.http.httpconn import BUSY, CLOSED, HANDSHAKE, HEAD, KEEPALIVE, LINGER, READY


class BoundedWorker(gthread.ThreadWorker):  # type: ignore[misc]
    limits: httpconn.Limits = httpconn.Limits()

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.worker_connections = sys.maxsize  # accept always: refusals are ours, and cheap
        self._waiting: collections.OrderedDict[httpconn.Conn, None] = collections.OrderedDict()
        self._ledger: connledger.Ledger[httpconn.Conn] = connledger.Ledger(self.limits)
        self._fair: fairqueue.FairQueue[httpconn.Conn] = fairqueue.FairQueue(
            self.limits.max_busy_per_peer
        )
        self._tls_index = 0 if self.cfg.is_ssl else -1

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
            self.on_refused("connection_cap", httpconn.peer_address(addr))
            util.close(client)
            return
        self.nr_conns += 1
        client.setblocking(False)
        try:
            if self.sockets.index(listener) == self._tls_index:
                conn = httpconn.tls_conn(self.cfg, client, addr, listener.getsockname())
                phase, seconds = HANDSHAKE, self.limits.handshake_seconds
            else:
                conn = httpconn.Conn(
                    self.cfg, httpconn.BoundedSocket.adopt(client), addr, listener.getsockname()
                )
                phase, seconds = HEAD, self.limits.head_seconds
        except (OSError, ValueError):
            self.nr_conns -= 1
            util.close(client)
            return
        self._waiting[conn] = None
        self._await(conn, phase, seconds)

    def _evict_one(self) -> bool:
        """Close the oldest connection without a verified identity to make room."""
        for conn in self._waiting:
            if conn.anonymous:
                self.on_refused("connection_cap", httpconn.peer_address(conn.client))
                self._drop(conn)
                return True
        return False

    def _watch(self, conn: httpconn.Conn, events: int) -> None:
        try:
            self.poller.register(conn.sock, events, partial(self._on_event, conn))
        except KeyError:
            self.poller.modify(conn.sock, events, partial(self._on_event, conn))

    def _on_event(self, conn: httpconn.Conn, _fileobj: Any) -> None:
        if conn.phase == HANDSHAKE:
            self._handshake(conn)
        elif conn.phase == KEEPALIVE:
            conn.phase, conn.deadline = HEAD, time.monotonic() + self.limits.head_seconds
            self._ledger.expire_at(conn.deadline, conn)
            self._read_head(conn)
        elif conn.phase == HEAD:
            self._read_head(conn)
        elif conn.phase == LINGER:
            self._linger(conn)

    def _handshake(self, conn: httpconn.Conn) -> None:
        step = httpconn.handshake(conn)
        if isinstance(step, int):  # wants to read or write again
            self._watch(conn, step)
            return
        if step is not None:  # failed; an SSLError is a refusal, unless the peer just left
            if isinstance(step, ssl.SSLError):
                self.on_refused("tls_refused", httpconn.peer_address(conn.client), step)
            self._drop(conn)
            return
        cn = httpconn.certificate_cn(conn.sock)
        if not self._admit(
            conn, f"cn:{cn}" if cn is not None else f"ip:{httpconn.peer_address(conn.client)}"
        ):
            return
        if cn is not None:
            conn.anonymous = False
            self._waiting.pop(conn, None)
        self._await(conn, HEAD, self.limits.head_seconds)
        self._read_head(conn)  # the request may already sit in the TLS buffer

    def _await(self, conn: httpconn.Conn, phase: int, seconds: float) -> None:
        """Wait in the main loop for the peer to send, at most ``seconds``."""
        conn.phase, conn.deadline = phase, time.monotonic() + seconds
        self._watch(conn, selectors.EVENT_READ)
        self._ledger.expire_at(conn.deadline, conn)

    def _admit(self, conn: httpconn.Conn, key: str) -> bool:
        """Count the connection to its peer, or close it when the peer is at its cap."""
        if not self._ledger.admit(key):
            self.on_refused("peer_connection_cap", httpconn.peer_address(conn.client))
            self._drop(conn)
            return False
        conn.key = key
        return True

    def _read_head(self, conn: httpconn.Conn) -> None:
        # plain HTTP: the peer is its address
        if conn.key is None and not self._admit(conn, f"ip:{httpconn.peer_address(conn.client)}"):
            return
        while not self._complete(conn):
            got = httpconn.receive(conn)
            if not got:  # None: wait for more; False: gone
                if got is False:
                    self._drop(conn)
                return
            if (
                len(conn.buf) > self.limits.max_head_bytes
                and httpconn.head_length(conn.buf) is None
            ):
                self.on_refused("head_too_large", httpconn.peer_address(conn.client))
                self._answer_and_drop(conn, 431, "Request Header Fields Too Large")
                return
        if self._answered_early(conn):
            return
        self._unwatch(conn)
        self._release_prebuffer(conn)
        if conn.parser is None:
            conn.parser = http.get_parser(self.cfg, conn.sock, conn.client)
        conn.parser.unreader.unread(bytes(conn.buf))
        conn.buf = bytearray()
        conn.want = None
        conn.phase = READY
        assert conn.key is not None  # admitted (_admit) before its head was read
        self._fair.put(conn.key, conn)
        self._dispatch()

    def early_answer(self, conn: httpconn.Conn) -> tuple[bytes, bytes] | None:
        """A subclass's answer (status line and headers, body) to a complete request head
        in ``conn.buf``, given in the main loop without a thread: a cheap refusal."""
        return None

    def _answered_early(self, conn: httpconn.Conn) -> bool:
        answer = self.early_answer(conn)
        if answer is None:
            return False
        keep = self.alive and httpconn.whole_request(conn)
        if not httpconn.send_now(conn, httpconn.answer_bytes(*answer, keep_alive=keep)):
            self._drop(conn)
        elif not keep:  # the rest of the body is discarded while lingering
            self._drop(conn, graceful=True)
        else:
            self._release_prebuffer(conn)
            assert conn.want is not None
            conn.buf, conn.want = conn.buf[conn.want :], None
            self._await(
                conn,
                HEAD if conn.buf else KEEPALIVE,
                self.limits.head_seconds if conn.buf else self.cfg.keepalive,
            )
            if conn.buf:  # pipelined: the next request is already here
                self._read_head(conn)
        return True

    def _complete(self, conn: httpconn.Conn) -> bool:
        """Whether the buffer holds what the request needs before a thread takes it: the
        head, and a small body of known length too (``prebuffer_bytes``, within the worker's
        ``prebuffer_budget``), so a client that stalls in a small body holds no thread."""
        if conn.want is None:
            head = httpconn.head_length(conn.buf)
            if head is None:
                return False
            conn.want = head
            length = httpconn.content_length(conn.buf, head)
            if self._ledger.reserve(length):
                conn.want += length
                conn.prebuffer = length
        return len(conn.buf) >= conn.want

    def _release_prebuffer(self, conn: httpconn.Conn) -> None:
        self._ledger.release(conn.prebuffer)
        conn.prebuffer = 0

    def _unwatch(self, conn: httpconn.Conn) -> None:
        try:
            self.poller.unregister(conn.sock)
        except (KeyError, ValueError, OSError):
            pass

    def _answer_and_drop(self, conn: httpconn.Conn, status: int, text: str) -> None:
        try:
            conn.sock.send(
                f"HTTP/1.1 {status} {text}\r\nConnection: close\r\n"
                "Content-Length: 0\r\n\r\n".encode()
            )
        except (OSError, ValueError):
            pass
        self._drop(conn)

    # -- threads -------------------------------------------------------------------------

    def _dispatch(self) -> None:
        """Hand ready connections to free threads, round-robin over peers; a peer at its
        thread cap keeps its connections queued (holding no thread)."""
        for _, conn in self._fair.take(self.cfg.threads):
            self._waiting.pop(conn, None)
            conn.phase = BUSY
            conn.sock.idle = self.limits.idle_seconds
            conn.sock.deadline = time.monotonic() + self.limits.body_seconds
            fut = self.tpool.submit(self.handle, conn)
            fut.add_done_callback(lambda f, c=conn: self.method_queue.defer(self._finished, c, f))

    def handle_request(self, req: Any, conn: Any) -> bool:
        try:
            result: bool = super().handle_request(req, conn)
            return result
        except TimeoutError:  # a body or a write stalled past its bound: close quietly
            return False

    def _finished(self, conn: httpconn.Conn, fut: Any) -> None:
        self._fair.done(conn.key)
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
                self._await(conn, HEAD, self.limits.head_seconds)
                self._read_head(conn)
            else:
                keepalive = self.cfg.keepalive if self.alive else gthread.STOP_KEEPALIVE_LINGER
                self._await(conn, KEEPALIVE, keepalive)
        else:
            self._drop(conn, graceful=True)
        self._dispatch()

    # -- closing -------------------------------------------------------------------------

    def _drop(self, conn: httpconn.Conn, graceful: bool = False) -> None:
        if conn.phase == CLOSED:
            return
        if conn.phase != BUSY:
            self._unwatch(conn)
        if conn.phase == READY and conn.key is not None:
            self._fair.remove(conn.key, conn)
        self._waiting.pop(conn, None)
        self._release_prebuffer(conn)
        if conn.key is not None:
            self._ledger.leave(conn.key)
            conn.key = None
        if graceful and self._start_linger(conn):
            return
        conn.phase = CLOSED
        self.nr_conns -= 1
        util.close(conn.sock)

    def _start_linger(self, conn: httpconn.Conn) -> bool:
        """Half-close and read what the peer still sends, in the main loop, without
        blocking it (RFC 9112 9.6: a full close with unread data would reset the
        connection and cut the last answer)."""
        if not httpconn.half_close(conn):
            return False
        self._await(conn, LINGER, self.limits.idle_seconds)
        return True

    def _linger(self, conn: httpconn.Conn) -> None:
        if httpconn.drain(conn, self.limits.linger_bytes):
            self._close_lingering(conn)

    def _close_lingering(self, conn: httpconn.Conn) -> None:
        self._unwatch(conn)
        conn.phase = CLOSED
        self.nr_conns -= 1
        util.close(conn.sock)

    def _expire(self) -> None:
        for deadline, conn in self._ledger.due(time.monotonic()):
            if conn.deadline != deadline or conn.phase not in (HANDSHAKE, HEAD, KEEPALIVE, LINGER):
                continue  # a stale timer: the connection moved on
            if conn.phase == LINGER:
                self._close_lingering(conn)
                continue
            if conn.phase == HANDSHAKE:
                self.on_refused("handshake_timeout", httpconn.peer_address(conn.client))
            elif conn.phase == HEAD:
                self.on_refused("head_timeout", httpconn.peer_address(conn.client))
            self._drop(conn)

    def run(self) -> None:
        self.poller.register(
            self.method_queue.fileno(), selectors.EVENT_READ, self.method_queue.run_callbacks
        )
        self.set_accept_enabled(True)
        while self.alive:
            self.notify()
            self.wait_for_and_dispatch_events(timeout=self._ledger.wait(time.monotonic()))
            if not self.is_parent_alive():
                break
            self._expire()
        self.set_accept_enabled(False)
        for conn in self._ledger.timed():
            if conn.phase in (HANDSHAKE, HEAD, KEEPALIVE):
                self._drop(conn)
            elif conn.phase == LINGER:
                self._close_lingering(conn)
        graceful = time.monotonic() + self.cfg.graceful_timeout
        while (self._fair.busy or self._fair) and time.monotonic() < graceful:
            self.notify()
            self.wait_for_and_dispatch_events(timeout=0.5)
            self._expire()
        self.tpool.shutdown(wait=False)
        self.poller.close()
        self.method_queue.close()
        for s in self.sockets:
            s.close()


def worker_class(base: type[BoundedWorker], limits: httpconn.Limits) -> type[BoundedWorker]:
    """``base`` with ``limits`` (for gunicorn's ``worker_class`` setting)."""
    return type(base.__name__, (base,), {"limits": limits, "__module__": base.__module__})


def closing(wsgi_app: Any) -> Any:
    """``wsgi_app`` whose ``Connection: close`` answers really close the connection.

    gunicorn drops a ``Connection`` header an application sets (hop-by-hop) and writes its
    own, ``keep-alive`` unless it decided to close. An answer given before the request's
    body was read (a 413 for a body over the cap) must close, and say so, or the client
    sends its next request on a connection the server is discarding (lingering) and sees it
    break. So the header, when the application sets it, makes gunicorn's response close
    (``force_close`` of the object behind ``start_response``) before the head is written."""

    def app(environ: Any, start_response: Any) -> Any:
        def start(status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> Any:
            if any(k.lower() == "connection" and v.lower() == "close" for k, v in headers):
                close = getattr(getattr(start_response, "__self__", None), "force_close", None)
                if callable(close):
                    close()
            return start_response(status, headers, exc_info)

        return wsgi_app(environ, start)

    return app
