"""When each runtime was last seen: one ``coordination.k8s.io/v1`` Lease per runtime.

Like the kubelet's node heartbeats: the Lease ``tether-rt-<hash>`` in the KCP namespace,
labelled with the runtime ID, ``spec.holderIdentity`` = runtime ID, ``spec.renewTime`` =
when a request of that runtime (a POST of changes or a GET of its state) was last
authenticated. Durable and shared by all replicas. A worker process writes a runtime's Lease at
most once per ``interval`` (remembered in a bounded in-memory map; losing it on restart
only costs one extra write), so the write rate is bounded by runtimes / interval.

``silent_counts`` (pure) turns the renew times into bounded metrics: how many runtimes
have been silent longer than each threshold, no series per runtime.
"""

from __future__ import annotations

import datetime
import hashlib
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence

from common import changes, gateway
from listener import records, retention

LABEL = "tether.kyma-project.io/heartbeat"
MAX_REMEMBERED = 50_000


def lease_name(runtime_id: str) -> str:
    return "tether-rt-" + hashlib.sha256(runtime_id.encode()).hexdigest()[:40]


def silent_counts(
    renew_times: Iterable[datetime.datetime], now: datetime.datetime, thresholds: Sequence[int]
) -> dict[int, int]:
    """For each threshold (seconds), how many runtimes were last seen longer ago."""
    ages = [(now - t).total_seconds() for t in renew_times]
    return {th: sum(1 for a in ages if a > th) for th in thresholds}


class Heartbeats:
    def __init__(
        self, kcp: gateway.Kube, namespace: str, interval: float, timeout: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._kcp, self._namespace, self._clock = kcp, namespace, clock
        self._interval, self._timeout = interval, timeout
        self._lock = threading.Lock()
        self._written: OrderedDict[str, float] = OrderedDict()

    def _due(self, runtime_id: str, now: float) -> bool:
        with self._lock:
            last = self._written.get(runtime_id)
            return last is None or now - last >= self._interval

    def _remember(self, runtime_id: str, now: float) -> None:
        with self._lock:
            self._written[runtime_id] = now
            self._written.move_to_end(runtime_id)
            while len(self._written) > MAX_REMEMBERED:
                self._written.popitem(last=False)

    def seen(self, runtime_id: str) -> bool:
        """Record that the runtime was seen now (if due); True when a write was made.
        Raises a ``gateway.GatewayError`` when the KCP API fails."""
        mono = self._clock()
        if not self._due(runtime_id, mono):
            return False
        now = datetime.datetime.now(datetime.UTC)
        name = lease_name(runtime_id)
        spec = {"holderIdentity": runtime_id, "renewTime": changes.format_time(now)}
        try:
            self._kcp.patch(gateway.LEASES, self._namespace, name, {"spec": spec},
                            strategic=True, timeout=self._timeout)
        except gateway.NotFound:
            body = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                    "metadata": {"name": name, "namespace": self._namespace, "labels": {
                        LABEL: "true", records.RUNTIME_LABEL: runtime_id,
                        records.MANAGED_BY_LABEL: records.MANAGED_BY}},
                    "spec": spec}
            try:
                self._kcp.create(gateway.LEASES, self._namespace, body, timeout=self._timeout)
            except gateway.Conflict:  # another replica created it just now: fine
                pass
        self._remember(runtime_id, mono)
        return True

    def renew_times(self) -> list[datetime.datetime]:
        """The last-seen time of every runtime with a heartbeat Lease (paginated list), except
        runtimes whose Kyma CR is gone (the janitor marked their Lease ``orphaned-since``):
        a deprovisioned runtime is not a silent one."""
        out: list[datetime.datetime] = []
        for lease in self._kcp.list_items(gateway.LEASES, self._namespace,
                                          label_selector=f"{LABEL}=true", page_size=500,
                                          timeout=self._timeout):
            if retention.ORPHANED_SINCE in ((lease.get("metadata") or {}).get("annotations")
                                            or {}):
                continue
            t = changes.parse_time((lease.get("spec") or {}).get("renewTime"))
            if t is not None:
                out.append(t)
        return out
