"""kube-proxy for one Service port on this machine: the pod runner binds it on the
Service's ClusterIP (the local planes allocate ClusterIPs on loopback)."""

from __future__ import annotations

import contextlib
import socket
import threading


class Proxy:
    """kube-proxy for one Service port: accepts on the ClusterIP, connects to a ready
    endpoint (round robin), copies both ways; no ready endpoint closes the connection."""

    def __init__(self, service: str, ip: str, port: int) -> None:
        self.service, self.ip, self.port = service, ip, port
        self.backends: list[tuple[str, int]] = []
        self._next = 0
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind((ip, port))
        self.sock.listen(128)
        threading.Thread(target=self._accept, daemon=True, name=f"proxy-{service}-{port}").start()

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)
        self.sock.close()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            backends = list(self.backends)
            if not backends:
                conn.close()
                continue
            self._next = (self._next + 1) % len(backends)
            threading.Thread(target=self._serve, args=(conn, backends[self._next]), daemon=True).start()

    @staticmethod
    def _serve(conn: socket.socket, backend: tuple[str, int]) -> None:
        try:
            upstream = socket.create_connection(backend, timeout=5)
        except OSError:
            conn.close()
            return
        upstream.settimeout(None)

        def pump(src: socket.socket, dst: socket.socket) -> None:
            try:
                while data := src.recv(65536):
                    dst.sendall(data)
            except OSError:
                pass
            with contextlib.suppress(OSError):
                dst.shutdown(socket.SHUT_WR)

        t = threading.Thread(target=pump, args=(upstream, conn), daemon=True)
        t.start()
        pump(conn, upstream)
        t.join()
        conn.close()
        upstream.close()
