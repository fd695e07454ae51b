"""A TCP proxy in front of a server whose path can be cut: a network partition that
black-holes traffic without closing anything.

``Partition(backend)`` listens on a free loopback port and copies bytes both ways to
``backend`` (host, port), as a Service's ClusterIP does. ``hole()``: connections are still
accepted, but nothing is forwarded either way, on new connections and on those already
open, and no close is passed on, so every client waits for its own timeout. ``heal()``:
the connections that were held are closed (their streams lost bytes), new ones pass
again. A backend that is down closes the client's connection at once (kube-proxy with no
ready endpoint). TLS passes through untouched: the client verifies the backend itself.
(``testing.blackhole`` is the other shape: a server that never answers, with no backend.)
"""

from __future__ import annotations

import contextlib
import socket
import threading

from testing import controlplane, relay


class Partition:
    def __init__(self, backend: tuple[str, int]) -> None:
        self.backend = backend
        self.port = controlplane.free_port()
        self._lock = threading.Lock()
        self._holed = False
        self._held: set[socket.socket] = set()  # sockets of connections open while holed
        self._open: set[socket.socket] = set()
        self.accepted = 0
        self.held_connections = 0  # connections accepted or frozen while holed
        self._sock = relay.listen("127.0.0.1", self.port, 256)
        relay.serve(self._sock, self._dispatch, f"partition-{self.port}")

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    @property
    def holed(self) -> bool:
        return self._holed

    def hole(self) -> None:
        with self._lock:
            self._holed = True
            self.held_connections += len(self._open - self._held)
            self._held |= self._open

    def heal(self) -> None:
        with self._lock:
            self._holed = False
            held, self._held = list(self._held), set()
        for s in held:
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self._sock.shutdown(socket.SHUT_RDWR)
        self._sock.close()
        self.heal()
        with self._lock:
            rest = list(self._open)
        for s in rest:
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)

    def _dispatch(self, conn: socket.socket) -> relay.Handler:
        self.accepted += 1
        return self._serve

    def _frozen(self, *socks: socket.socket) -> bool:
        with self._lock:
            return any(s in self._held for s in socks)

    def _serve(self, conn: socket.socket) -> None:
        with self._lock:
            self._open.add(conn)
            if self._holed:
                self._held.add(conn)
                self.held_connections += 1
                holed = True
            else:
                holed = False
        if holed:  # accept, read, never answer, never close (until healed)
            with contextlib.suppress(OSError):
                while conn.recv(65536):
                    pass
            self._close(conn)
            return
        upstream = relay.dial(self.backend)
        if upstream is None:
            self._close(conn)
            return
        with self._lock:
            self._open.add(upstream)
            if self._holed:  # holed between accept and connect
                self._held |= {conn, upstream}
        relay.relay(conn, upstream, lambda: not self._frozen(conn, upstream))
        self._close(conn)
        self._close(upstream)

    def _close(self, s: socket.socket) -> None:
        with self._lock:
            self._open.discard(s)
            self._held.discard(s)
        with contextlib.suppress(OSError):
            s.close()
