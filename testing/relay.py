"""The byte relay of the harness's TCP proxies (testing/serviceproxy.py, testing/partition.py,
testing/unavailable.py): a listening socket, dialling a backend, and copying both ways.

``relay(a, b)`` copies each chunk as it arrives, whole, in both directions until both have
ended: an end of stream from one side is passed on as a half-close (``shutdown(SHUT_WR)``)
while the other direction goes on. Both sockets get ``TCP_NODELAY``: a proxy forwards a
response in the pieces its server wrote (gunicorn writes the head, then the body), and
with Nagle's algorithm the second piece waits for the client's delayed ACK of the first,
about 40 ms on Linux (issue 26 item 7; bench/service_proxy.py measures it).
"""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Callable

CHUNK = 64 * 1024
Handler = Callable[[socket.socket], None]


def listen(ip: str, port: int, backlog: int) -> socket.socket:
    """A listening TCP socket on ``ip:port`` (``SO_REUSEADDR``)."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((ip, port))
    sock.listen(backlog)
    return sock


def serve(
    sock: socket.socket, dispatch: Callable[[socket.socket], Handler | None], name: str
) -> None:
    """Accepts on ``sock`` in a thread named ``name`` until it is closed. ``dispatch(conn)``,
    in that thread, returns the handler of the connection (run in a thread of its own) or
    None (it has closed ``conn`` itself)."""

    def loop() -> None:
        while True:
            try:
                conn, _ = sock.accept()
            except OSError:
                return
            handler = dispatch(conn)
            if handler is not None:
                threading.Thread(target=handler, args=(conn,), daemon=True).start()

    threading.Thread(target=loop, daemon=True, name=name).start()


def dial(backend: tuple[str, int], timeout: float = 5.0) -> socket.socket | None:
    """A connection to ``backend`` (blocking once connected), or None when it refuses or
    times out."""
    try:
        upstream = socket.create_connection(backend, timeout=timeout)
    except OSError:
        return None
    upstream.settimeout(None)
    return upstream


def nodelay(*socks: socket.socket) -> None:
    for s in socks:
        with contextlib.suppress(OSError):
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


def relay(a: socket.socket, b: socket.socket, passing: Callable[[], bool] = lambda: True) -> None:
    """Copies ``a`` <-> ``b`` until both directions have ended (the caller closes both).
    ``passing()`` false: chunks read are dropped and an end is not passed on (a partition)."""
    nodelay(a, b)
    t = threading.Thread(target=_pump, args=(b, a, passing), daemon=True)
    t.start()
    _pump(a, b, passing)
    t.join()


def _pump(src: socket.socket, dst: socket.socket, passing: Callable[[], bool]) -> None:
    try:
        while data := src.recv(CHUNK):
            if passing():
                dst.sendall(data)
    except OSError:
        pass
    if not passing():
        return  # a close behind a partition is not passed on
    with contextlib.suppress(OSError):
        dst.shutdown(socket.SHUT_WR)
