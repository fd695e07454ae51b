"""The view's Unix socket: one JSON request per line, one JSON answer per line.

    {"op": "kyma", "id": "<runtime ID>"}     -> {"synced": true, "views": [KymaView fields]}
    {"op": "lease", "id": ...}               -> {"synced": true,
                                                 "lease": {epoch, identity, rv, renew} | null}
    {"op": "summary", "id": ...}             -> {"synced": true, "summary": object | null}
    {"op": "records", "id": ..., "watch": W, "ns": N}
                                             -> {"synced": true, "items": [[namespace, name,
                                                 uid, resourceVersion, observedAt, deleted,
                                                 epoch], ...]}: the runtime's records of
                                                 Watch W stored in namespace N (its storage)
    {"op": "seen", "id": ...}                -> {"synced": true,
                                                 "outcome": "written" | "queued" | "fresh"
                                                            | "dropped"}
    {"op": "ping"}                           -> {"synced": {kind: bool}}

``synced`` false: the view cannot answer that (not listed yet, a watch down, over its
bounds); the worker then reads the KCP itself. Bounded: a request line of at most
``MAX_REQUEST`` bytes (else the connection is closed), at most ``MAX_CONNECTIONS`` open
connections (the workers' threads keep one each), the runtime ID a valid label value.
The socket is the pod's own (a file mode 0600 in a private folder); nothing secret passes.
"""

from __future__ import annotations

import json
import os
import socket
import socketserver
import threading
from collections.abc import Callable
from typing import Any

from listener.view import beats, store
from tether.kube import kyma

MAX_REQUEST = 1024
MAX_CONNECTIONS = 512
SEEN_WAIT = 0.3  # seconds a "seen" waits for its write (below the workers' timeout)


class Views:
    """The kinds the view holds and the heartbeat writer: the answers (no I/O)."""

    def __init__(
        self,
        kymas: store.Kind,
        leases: store.Kind,
        summaries: store.Kind,
        writer: beats.Beats,
        seen_wait: float = SEEN_WAIT,
        records: store.Kind | None = None,
    ) -> None:
        self.kymas, self.leases, self.summaries, self.writer = kymas, leases, summaries, writer
        self.records = records
        self.seen_wait = seen_wait
        # relists ("restart/<kind>/<reason>") and heartbeat writes ("write/<outcome>") so far
        self.counts: Callable[[], dict[str, int]] = dict

    def answer(self, line: bytes) -> bytes:
        try:
            req = json.loads(line)
        except ValueError:
            return b'{"error":"not JSON"}'
        if not isinstance(req, dict):
            return b'{"error":"not an object"}'
        op, rid = req.get("op"), req.get("id")
        if op == "ping":
            kinds = tuple(
                k for k in (self.kymas, self.leases, self.summaries, self.records) if k is not None
            )
            return _dump(
                {
                    "synced": {k.name: k.synced and not k.full for k in kinds},
                    "objects": {k.name: k.sizes()[0] for k in kinds},
                    "bytes": {k.name: k.sizes()[1] for k in kinds},
                    "counts": self.counts(),
                }
            )
        if not isinstance(rid, str) or not kyma.valid_runtime_id(rid):
            return b'{"error":"id: a runtime ID"}'
        if op == "kyma":
            got = self.kymas.of(rid)
            return _dump({"synced": got is not None, "views": got or []})
        if op == "lease":
            got = self.leases.of(rid)
            return _dump({"synced": got is not None, "lease": got[0] if got else None})
        if op == "summary":
            found: list[bytes] | None = self.summaries.of(rid)
            if found is None:
                return b'{"synced":false}'
            return b'{"synced":true,"summary":' + (found[0] if found else b"null") + b"}"
        if op == "records":
            return self._records(rid, req.get("watch"), req.get("ns"))
        if op == "seen":
            outcome = self.writer.seen(rid, self.seen_wait)
            return _dump({"synced": outcome is not None, "outcome": outcome})
        return b'{"error":"op: kyma, lease, summary, records, seen or ping"}'

    def _records(self, rid: str, watch: object, ns: object) -> bytes:
        if not isinstance(watch, str) or not kyma.valid_runtime_id(watch) or not watch:
            return b'{"error":"watch: a Watch name"}'
        if not isinstance(ns, str) or not kyma.valid_runtime_id(ns) or not ns:
            return b'{"error":"ns: a namespace"}'
        got = None if self.records is None else self.records.of(f"{rid}/{watch}")
        if got is None:
            return b'{"synced":false}'
        # only where the Watch stores: an object elsewhere is no record (records.placed)
        return _dump({"synced": True, "items": [v[1:] for v in got if v[0] == ns]})


def _dump(doc: dict[str, Any]) -> bytes:
    return json.dumps(doc, separators=(",", ":")).encode()


class _Handler(socketserver.StreamRequestHandler):
    server: Server

    def handle(self) -> None:
        srv = self.server
        with srv.count_lock:
            if srv.open >= MAX_CONNECTIONS:
                return
            srv.open += 1
        try:
            while True:
                line = self.rfile.readline(MAX_REQUEST + 1)
                if not line or len(line) > MAX_REQUEST or not line.endswith(b"\n"):
                    return
                self.wfile.write(srv.views.answer(line) + b"\n")
                self.wfile.flush()
        except OSError:
            return
        finally:
            with srv.count_lock:
                srv.open -= 1


class Server(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True
    block_on_close = False

    def __init__(self, path: str, views: Views) -> None:
        self.views = views
        self.count_lock = threading.Lock()
        self.open = 0
        if os.path.exists(path):
            os.unlink(path)  # a previous view's (it died): this one takes over
        old = os.umask(0o177)
        try:
            super().__init__(path, _Handler)
        finally:
            os.umask(old)

    def server_bind(self) -> None:
        self.socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        super().server_bind()
