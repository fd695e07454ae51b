"""testing/relay.py, the byte relay of the harness's proxies (the Service proxy, the
partition, the 503 proxy): real loopback sockets, no control plane."""

from __future__ import annotations

import socket
import threading

from testing import relay, serviceproxy


def _backend(handle: object) -> tuple[socket.socket, threading.Thread]:
    srv = relay.listen("127.0.0.1", 0, 8)

    def run() -> None:
        conn, _ = srv.accept()
        with conn:
            handle(conn)  # type: ignore[operator]

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return srv, t


def _tcp_pair() -> tuple[socket.socket, socket.socket]:
    """Two connected loopback TCP sockets (socketpair is AF_UNIX only)."""
    with relay.listen("127.0.0.1", 0, 1) as srv:
        c = socket.create_connection(srv.getsockname(), timeout=30)
        s, _ = srv.accept()
    return c, s


def _read_all(s: socket.socket) -> bytes:
    out = b""
    while chunk := s.recv(65536):
        out += chunk
    return out


def test_a_half_close_is_passed_on_and_the_other_direction_goes_on() -> None:
    """The client ends its stream; the server reads to that end, then answers in two
    writes and closes: the client gets every byte of both."""
    got: list[bytes] = []

    def handle(conn: socket.socket) -> None:
        got.append(_read_all(conn))
        conn.sendall(b"head;")
        conn.sendall(b"x" * 200_000)

    srv, t = _backend(handle)
    proxy = serviceproxy.Proxy("test", "127.0.0.1", 0)
    try:
        proxy.backends = [srv.getsockname()]
        with socket.create_connection(proxy.sock.getsockname(), timeout=30) as c:
            c.sendall(b"y" * 100_000)
            c.shutdown(socket.SHUT_WR)
            answer = _read_all(c)
        t.join(30)
        assert got == [b"y" * 100_000]
        assert answer == b"head;" + b"x" * 200_000
    finally:
        proxy.close()
        srv.close()


def test_both_sockets_are_set_nodelay_and_chunks_pass_whole() -> None:
    """TCP_NODELAY on the accepted and the dialled socket (issue 26 item 7: without it a
    response written in two pieces waits ~40 ms for a delayed ACK)."""
    a1, a2 = _tcp_pair()
    b1, b2 = _tcp_pair()
    seen: list[tuple[int, int]] = []

    def passing() -> bool:
        seen.append(
            (
                a2.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY),
                b1.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY),
            )
        )
        return True

    t = threading.Thread(target=relay.relay, args=(a2, b1, passing), daemon=True)
    t.start()
    try:
        a1.settimeout(30)
        b2.settimeout(30)
        a1.sendall(b"ping")
        assert b2.recv(100) == b"ping"
        b2.sendall(b"pong")
        assert a1.recv(100) == b"pong"
        a1.shutdown(socket.SHUT_WR)
        assert b2.recv(100) == b""  # the end passed on
        b2.shutdown(socket.SHUT_WR)
        assert a1.recv(100) == b""
        t.join(30)
        assert not t.is_alive()
        assert seen and all(x and y for x, y in seen)
    finally:
        for s in (a1, a2, b1, b2):
            s.close()


def test_a_closed_path_drops_chunks_and_does_not_pass_the_end() -> None:
    """``passing()`` false (a partition's hole): nothing is forwarded, no end passed on."""
    a1, a2 = _tcp_pair()
    b1, b2 = _tcp_pair()
    t = threading.Thread(target=relay.relay, args=(a2, b1, lambda: False), daemon=True)
    t.start()
    try:
        a1.sendall(b"lost")
        a1.shutdown(socket.SHUT_WR)
        b2.settimeout(0.5)
        try:
            data = b2.recv(100)
        except TimeoutError:
            data = None
        assert data is None  # neither the bytes nor the end arrived
        b2.shutdown(socket.SHUT_WR)  # the other direction ends too: the relay returns
        t.join(30)
        assert not t.is_alive()
    finally:
        for s in (a1, a2, b1, b2):
            s.close()
