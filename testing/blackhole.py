"""A black-holed listener: a TCP server that accepts every connection, reads and drops what
the client sends, and never answers (no TLS handshake, no HTTP response) until it stops.

What a client meets when a load balancer or a hung process accepts but nothing behind it
works: the connect succeeds, then only the client's own timeouts end the request.
``refused_port`` is the other case, a port with nothing listening (connection refused).
"""

from __future__ import annotations

import contextlib
import selectors
import socket
import threading

from testing import controlplane


class BlackHole:
    def __init__(self) -> None:
        self.accepted = 0
        self.port = 0
        self._sel = selectors.DefaultSelector()
        self._server: socket.socket | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    def start(self) -> BlackHole:
        srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        srv.bind(("127.0.0.1", 0))
        srv.listen(512)
        srv.setblocking(False)
        self.port = srv.getsockname()[1]
        self._server = srv
        self._sel.register(srv, selectors.EVENT_READ)
        self._thread = threading.Thread(target=self._run, name="blackhole", daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.is_set():
            for key, _ in self._sel.select(timeout=0.1):
                sock = key.fileobj
                assert isinstance(sock, socket.socket)
                if sock is self._server:
                    with contextlib.suppress(BlockingIOError):
                        conn, _ = sock.accept()
                        conn.setblocking(False)
                        self._sel.register(conn, selectors.EVENT_READ)
                        self.accepted += 1
                    continue
                try:
                    data = sock.recv(65536)
                except (BlockingIOError, InterruptedError):
                    continue
                except OSError:
                    data = b""
                if not data:  # the client gave up: forget the connection
                    self._sel.unregister(sock)
                    sock.close()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5)
        for key in list(self._sel.get_map().values()):
            with contextlib.suppress(OSError):
                key.fileobj.close()  # type: ignore[union-attr]
        self._sel.close()


def refused_port() -> int:
    """A loopback port with nothing listening (a connect is refused)."""
    port = controlplane.free_port()
    with socket.socket() as s:
        if s.connect_ex(("127.0.0.1", port)) == 0:  # taken meanwhile: try another
            return refused_port()
    return port
