"""The KCP as the admin pages see it: one listing of the fleet, refreshed in the background.

``load(kcp, s)`` lists (paginated, one page in memory at a time) the Kyma CRs (metadata
only), RuntimeEnrollments, heartbeat Leases, RuntimeDeliveries and CompassManagerMappings of
the KCP namespace, Tether's Deployments and the leader Leases, and builds the rows
(``admin.fleet``) and the parts (``admin.parts``) once. Pages read the last ``Snapshot``:
a page costs no KCP request, whatever the fleet's size (Events of one runtime are the
exception: ``events`` reads them when its page is opened).

``Refresher`` keeps one snapshot per process, renewed every ``refresh`` seconds by a
daemon thread; a failed listing keeps the previous snapshot (its age shows in readiness and
in ``tether_fleet_snapshot_age_seconds``).
"""

from __future__ import annotations

import datetime
import logging
import re
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any, NamedTuple

from admin import fleet, parts, settings
from common import delivery, gateway, kyma, logs

log = logging.getLogger(__name__)

ENROLLMENTS = gateway.Resource("tether.kyma-project.io", "v1alpha1", "runtimeenrollments")
DELIVERIES = gateway.Resource(delivery.GROUP, delivery.VERSION, delivery.PLURAL)
MAPPINGS = gateway.Resource("operator.kyma-project.io", "v1beta1", "compassmanagermappings")
DEPLOYMENTS = gateway.Resource("apps", "v1", "deployments")
EVENTS = gateway.Resource("", "v1", "events")
HEARTBEAT_LABEL = "tether.kyma-project.io/heartbeat"
PAGE = 500
_NAME = re.compile(r"[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?")


class Snapshot(NamedTuple):
    taken: datetime.datetime
    seconds: float                       # how long the listing took
    rows: list[fleet.Row]
    by_id: dict[str, fleet.Row]
    parts: list[parts.Part]
    mappings: list[parts.CompassMapping]
    compass: parts.Compass
    missing: tuple[str, ...]             # kinds that could not be listed (e.g. CRD absent)

    def age(self, now: datetime.datetime) -> float:
        return (now - self.taken).total_seconds()


def _items(kcp: gateway.Kube, res: gateway.Resource, namespace: str, *, timeout: float,
           label_selector: str | None = None, metadata_only: bool = False,
           missing: list[str]) -> Iterator[dict[str, Any]]:
    """Every item; a kind the KCP does not serve (its CRD not installed) lists as empty
    and is named in ``missing``."""
    try:
        yield from kcp.list_items(res, namespace, label_selector=label_selector,
                                  page_size=PAGE, metadata_only=metadata_only, timeout=timeout)
    except gateway.NotFound:
        missing.append(res.plural)


def _slim_delivery(obj: Mapping[str, Any]) -> dict[str, Any]:
    return {"metadata": {"labels": (obj.get("metadata") or {}).get("labels") or {}},
            "status": obj.get("status") or {}}


def load(kcp: gateway.Kube, s: settings.Settings,
         now: Callable[[], datetime.datetime] = lambda: datetime.datetime.now(datetime.UTC)
         ) -> Snapshot:
    """One listing of everything the pages show. Raises ``gateway.GatewayError``."""
    t0 = time.perf_counter()
    ns, to = s.kcp_namespace, s.request_timeout
    missing: list[str] = []
    kymas = list(_items(kcp, kyma.RESOURCE, ns, timeout=to, metadata_only=True, missing=missing))
    enrollments = list(_items(kcp, ENROLLMENTS, ns, timeout=to, missing=missing))
    beats = list(_items(kcp, gateway.LEASES, ns, timeout=to, missing=missing,
                        label_selector=f"{HEARTBEAT_LABEL}=true"))
    deliveries = [_slim_delivery(o) for o in _items(kcp, DELIVERIES, ns, timeout=to,
                                                    missing=missing)]
    raw_mappings = list(_items(kcp, MAPPINGS, ns, timeout=to, missing=missing))
    deployments = list(_items(kcp, DEPLOYMENTS, s.namespace, timeout=to, missing=missing))
    leases = list(_items(kcp, gateway.LEASES, s.namespace, timeout=to, missing=missing,
                         label_selector=f"!{HEARTBEAT_LABEL}"))
    if s.namespace != ns:
        leases += list(_items(kcp, gateway.LEASES, ns, timeout=to, missing=missing,
                              label_selector=f"!{HEARTBEAT_LABEL}"))
    at = now()
    rows = fleet.build(fleet.Objects(kymas, enrollments, beats, deliveries, raw_mappings),
                       s.thresholds, at)
    return Snapshot(
        taken=at, seconds=time.perf_counter() - t0, rows=rows,
        by_id={r.runtime_id: r for r in rows},
        parts=parts.parts_of(deployments, leases),
        mappings=parts.mappings_of(raw_mappings),
        compass=parts.compass_of(leases),
        missing=tuple(sorted(set(missing))))


def events(kcp: gateway.Kube, s: settings.Settings, kyma_name: str,
           limit: int = 20) -> list[parts.Event]:
    """The newest Events about a runtime's Kyma CR, RuntimeEnrollment and mapping (one
    list by involved object name; the KCP's Events expire after an hour by default)."""
    if not _NAME.fullmatch(kyma_name):
        return []
    page = kcp.list(EVENTS, s.kcp_namespace, field_selector=f"involvedObject.name={kyma_name}",
                    limit=200, timeout=s.request_timeout)
    return parts.events_of(page.get("items") or [])[:limit]


class Refresher:
    """One snapshot per process, renewed every ``interval`` seconds by a daemon thread."""

    def __init__(self, take: Callable[[], Snapshot], interval: float) -> None:
        self._take, self._interval = take, interval
        self._lock = threading.Lock()
        self._snapshot: Snapshot | None = None
        self.last_error: str | None = None
        self.failures = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def get(self) -> Snapshot | None:
        with self._lock:
            return self._snapshot

    def refresh(self) -> None:
        try:
            snap = self._take()
        except gateway.GatewayError as e:
            self.failures += 1
            self.last_error = logs.bounded(e, 200)
            log.warning("fleet listing failed (the previous snapshot is kept): %s",
                        self.last_error)
            return
        with self._lock:
            self._snapshot = snap
        self.last_error = None

    def start(self) -> Refresher:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="fleet-refresh", daemon=True)
            self._thread.start()
        return self

    def alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def stop(self) -> None:
        self._stop.set()

    def _run(self) -> None:
        while not self._stop.is_set():
            started = time.monotonic()
            self.refresh()
            self._stop.wait(max(0.5, self._interval - (time.monotonic() - started)))
