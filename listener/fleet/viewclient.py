"""The workers' side of the pod's view: ask over its Unix socket, or say "not answered".

Each worker thread keeps one connection (``threading.local``), opened on first use and
dropped on any failure (reopened at the next call, at most once every ``RETRY_SECONDS`` after
a failed connect, so a dead view costs no wait). Every call is bounded by ``timeout``. A call
the view does not answer (not running, not synced, over its bounds, too slow) returns None
and is counted in ``tether_listener_view_fallbacks_total{what,reason}``: the caller then
reads the KCP itself, as without a view. Correctness never depends on the view.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector as PromCollector

from tether.kube import apitypes, kyma

RETRY_SECONDS = 1.0
MAX_ANSWER = 8 * 1024 * 1024


NS = "tether_listener_view"  # the prefix of the view's metrics (``Collector``)


class ViewClient:
    def __init__(
        self,
        path: str,
        timeout: float,
        on_fallback: Callable[[str, str], None] = lambda what, reason: None,
    ) -> None:
        self.path, self._timeout, self._on_fallback = path, timeout, on_fallback
        self._local = threading.local()
        self._down_until = 0.0

    def _conn(self) -> tuple[socket.socket, Any] | None:
        conn: tuple[socket.socket, Any] | None = getattr(self._local, "conn", None)
        if conn is not None:
            return conn
        if time.monotonic() < self._down_until:
            return None
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(self._timeout)
        try:
            s.connect(self.path)
        except OSError:
            s.close()
            self._down_until = time.monotonic() + RETRY_SECONDS
            return None
        conn = (s, s.makefile("rb"))
        self._local.conn = conn
        return conn

    def close(self) -> None:
        """Close the calling thread's connection (the others close with their threads)."""
        self._drop()

    def _drop(self) -> None:
        conn = getattr(self._local, "conn", None)
        self._local.conn = None
        if conn is not None:
            conn[1].close()
            conn[0].close()

    def ask(self, op: str, runtime_id: str, **more: str) -> dict[str, Any] | None:
        """The view's synced answer, or None (counted: the caller reads the KCP)."""
        conn = self._conn()
        if conn is None:
            self._on_fallback(op, "unreachable")
            return None
        try:
            req = {"op": op, "id": runtime_id, **more}
            conn[0].sendall(json.dumps(req).encode() + b"\n")
            line = conn[1].readline(MAX_ANSWER)
            doc = json.loads(line) if line.endswith(b"\n") else None
        except (OSError, ValueError):
            doc = None
        if not isinstance(doc, dict):
            self._drop()
            self._on_fallback(op, "unreachable")
            return None
        if op == "ping":
            return doc
        if doc.get("synced") is not True:
            self._on_fallback(op, "unsynced")
            return None
        return doc

    def kymas(self, runtime_id: str) -> list[kyma.KymaView] | None:
        doc = self.ask("kyma", runtime_id)
        if doc is None:
            return None
        out = []
        for d in doc.get("views") or []:
            d = dict(d)
            d["modules"] = frozenset(d.get("modules") or ())
            out.append(kyma.KymaView(**d))
        return out

    def records(self, runtime_id: str, watch: str, namespace: str) -> list[list[Any]] | None:
        """The runtime's records of ``watch`` stored in ``namespace`` as the view holds them
        (``listener.view.serve``: [namespace, name, uid, resourceVersion, observedAt,
        deleted, epoch] each); None when the view does not answer."""
        doc = self.ask("records", runtime_id, watch=watch, ns=namespace)
        items = None if doc is None else doc.get("items")
        return items if isinstance(items, list) else None


class Collector(PromCollector):
    """The view's state at scrape time (its ``ping``): ``tether_listener_view_synced{resource}``
    (0 for each while it does not answer), ``tether_listener_view_objects{resource}``,
    ``tether_listener_view_bytes{resource}``, and its counts since it started:
    ``tether_listener_view_watch_restarts_total{resource,reason}``,
    ``tether_listener_view_heartbeat_writes_total{outcome}``
    (not a counter of the workers: every worker of the pod exposes the same view, take
    ``max`` per pod)."""

    KINDS = (apitypes.KYMAS.plural, apitypes.LEASES.plural, "summaries", "records")

    def __init__(self, view: ViewClient) -> None:
        self._view = view

    def collect(self) -> Iterator[Metric]:
        doc = self._view.ask("ping", "") or {}
        synced = GaugeMetricFamily(
            f"{NS}_synced",
            "1 while the pod's view of a resource is listed and watched within its bounds",
            labels=["resource"],
        )
        objects = GaugeMetricFamily(
            f"{NS}_objects", "Objects the pod's view holds", labels=["resource"]
        )
        size = GaugeMetricFamily(
            f"{NS}_bytes", "Bytes (kept fields' JSON) the pod's view holds", labels=["resource"]
        )
        for k in self.KINDS:
            synced.add_metric([k], 1.0 if (doc.get("synced") or {}).get(k) else 0.0)
            objects.add_metric([k], float((doc.get("objects") or {}).get(k) or 0))
            size.add_metric([k], float((doc.get("bytes") or {}).get(k) or 0))
        restarts = CounterMetricFamily(
            f"{NS}_watch_restarts",
            "Relists of the pod's view by resource and reason (gone: 410; error)",
            labels=["resource", "reason"],
        )
        writes = CounterMetricFamily(
            f"{NS}_heartbeat_writes",
            "Heartbeat Lease writes of the pod's view by outcome",
            labels=["outcome"],
        )
        for key, n in sorted((doc.get("counts") or {}).items()):
            parts = str(key).split("/")
            if parts[0] == "restart" and len(parts) == 3:
                restarts.add_metric(parts[1:], float(n))
            elif parts[0] == "write" and len(parts) == 2:
                writes.add_metric(parts[1:], float(n))
        yield from (synced, objects, size, restarts, writes)
