"""kube-proxy for one Service port on this machine: the pod runner binds it on the
Service's ClusterIP (the local planes allocate ClusterIPs on loopback)."""

from __future__ import annotations

import contextlib
import functools
import socket

from testing import relay


class Proxy:
    """kube-proxy for one Service port: accepts on the ClusterIP, connects to a ready
    endpoint (round robin), copies both ways (testing/relay.py: ``TCP_NODELAY``, chunks
    whole, half-closes passed on); no ready endpoint closes the connection."""

    def __init__(self, service: str, ip: str, port: int) -> None:
        self.service, self.ip, self.port = service, ip, port
        self.backends: list[tuple[str, int]] = []
        self._next = 0
        self.sock = relay.listen(ip, port, 128)
        relay.serve(self.sock, self._dispatch, f"proxy-{service}-{port}")

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)
        self.sock.close()

    def _dispatch(self, conn: socket.socket) -> relay.Handler | None:
        backends = list(self.backends)
        if not backends:
            conn.close()
            return None
        self._next = (self._next + 1) % len(backends)
        return functools.partial(self._serve, backend=backends[self._next])

    @staticmethod
    def _serve(conn: socket.socket, backend: tuple[str, int]) -> None:
        upstream = relay.dial(backend)
        if upstream is None:
            conn.close()
            return
        relay.relay(conn, upstream)
        conn.close()
        upstream.close()
