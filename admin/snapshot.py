"""The KCP as the admin pages see it: one listing of the fleet, refreshed in the background.

``load(kcp, s)`` lists (paginated, one page in memory at a time) the Kyma CRs (metadata
only), RuntimeEnrollments, heartbeat Leases, RuntimeDeliveries and CompassMappings of
the KCP namespace, Tether's Deployments and the leader Leases, and builds the rows
(``admin.fleet``) and the parts (``admin.parts``) once. Pages read the last ``Snapshot``:
a page costs no KCP request, whatever the fleet's size. A runtime's page is the exception:
it reads that runtime's RuntimeDelivery (``delivery_of``: the snapshot keeps only the hour's
totals, not the per-minute series and recent records, so 5,000 runtimes fit in little
memory) and its Events (``Events``: one list, cached 10 s per runtime).

``Refresher`` keeps one snapshot per process, renewed every ``refresh`` seconds by a
daemon thread, and never sooner than twice the last listing's duration after it ended (a
slow listing of a large fleet cannot take more than a third of the process's time from the
pages); a failed listing keeps the previous snapshot (its age shows in readiness and in
``tether_fleet_snapshot_age_seconds``).
"""

from __future__ import annotations

import datetime
import logging
import re
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any, NamedTuple

from admin import fleet, parts, settings
from tether.base import logs
from tether.kube import apitypes, gateway
from tether.wire import delivery

log = logging.getLogger(__name__)

PAGE = 500
_NAME = re.compile(r"[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?")


class Snapshot(NamedTuple):
    taken: datetime.datetime
    seconds: float  # how long the listing took
    rows: list[fleet.Row]
    by_id: dict[str, fleet.Row]
    parts: list[parts.Part]
    mappings: list[parts.CompassMapping]
    mapping_by_kyma: dict[str, parts.CompassMapping]
    compass: parts.Compass
    missing: tuple[str, ...]  # kinds that could not be listed (e.g. CRD absent)

    def age(self, now: datetime.datetime) -> float:
        return (now - self.taken).total_seconds()


def _items(
    kcp: gateway.Kube,
    res: gateway.Resource,
    namespace: str,
    *,
    timeout: float,
    label_selector: str | None = None,
    metadata_only: bool = False,
    missing: list[str],
) -> Iterator[dict[str, Any]]:
    """Every item; a kind the KCP does not serve (its CRD not installed) lists as empty
    and is named in ``missing``."""
    try:
        yield from kcp.list_items(
            res,
            namespace,
            label_selector=label_selector,
            page_size=PAGE,
            metadata_only=metadata_only,
            timeout=timeout,
        )
    except gateway.NotFound:
        missing.append(res.plural)


def load(
    kcp: gateway.Kube,
    s: settings.Settings,
    now: Callable[[], datetime.datetime] = lambda: datetime.datetime.now(datetime.UTC),
) -> Snapshot:
    """One listing of everything the pages show, one page of raw objects at a time (each
    object is reduced to what the rows need as it arrives). Raises ``gateway.GatewayError``."""
    t0 = time.perf_counter()
    ns, to = s.kcp_namespace, s.request_timeout
    missing: list[str] = []
    index = fleet.Index(now())
    for o in _items(kcp, apitypes.RUNTIME_ENROLLMENTS, ns, timeout=to, missing=missing):
        index.add_enrollment(o)
    for o in _items(
        kcp,
        gateway.LEASES,
        s.heartbeat_namespace,
        timeout=to,
        missing=missing,
        label_selector=f"{apitypes.HEARTBEAT_LABEL}=true",
    ):
        index.add_heartbeat(o)
    for o in _items(kcp, apitypes.RUNTIME_DELIVERIES, ns, timeout=to, missing=missing):
        index.add_delivery(o, lean=True)
    mappings: list[parts.CompassMapping] = []
    for o in _items(kcp, apitypes.COMPASS_MAPPINGS, ns, timeout=to, missing=missing):
        index.add_mapping(o)
        mappings.append(parts.mapping_of(o))
    rows = fleet.ordered(
        [
            r
            for k in _items(
                kcp, apitypes.KYMAS, ns, timeout=to, metadata_only=True, missing=missing
            )
            if (r := index.row(k, s.thresholds)) is not None
        ]
    )
    deployments = list(_items(kcp, apitypes.DEPLOYMENTS, s.namespace, timeout=to, missing=missing))
    # the leader Leases of compass, the enroller and the janitor (all in Tether's namespace)
    leases = list(
        _items(
            kcp,
            gateway.LEASES,
            s.namespace,
            timeout=to,
            missing=missing,
            label_selector=f"!{apitypes.HEARTBEAT_LABEL}",
        )
    )
    ordered = parts.ordered_mappings(mappings)
    return Snapshot(
        taken=index.now,
        seconds=time.perf_counter() - t0,
        rows=rows,
        by_id={r.runtime_id: r for r in rows},
        parts=parts.parts_of(deployments, leases),
        mappings=ordered,
        mapping_by_kyma={m.kyma: m for m in ordered},
        compass=parts.compass_of(leases),
        missing=tuple(sorted(set(missing))),
    )


def delivery_of(
    kcp: gateway.Kube, s: settings.Settings, row: fleet.Row, now: datetime.datetime
) -> delivery.Summary:
    """A runtime's whole delivery summary (per-minute series, recent records), read when
    its page is opened: the snapshot keeps only the hour's totals."""
    if not row.delivery_object:
        return row.delivery
    obj = kcp.get_or_none(
        apitypes.RUNTIME_DELIVERIES, s.kcp_namespace, row.delivery_object, timeout=s.request_timeout
    )
    return row.delivery if obj is None else delivery.summarize(obj.get("status"), now)


def events(
    kcp: gateway.Kube, s: settings.Settings, kyma_name: str, limit: int = 20
) -> list[parts.Event]:
    """The newest Events about a runtime's Kyma CR, RuntimeEnrollment and mapping (one
    list by involved object name; the KCP's Events expire after an hour by default)."""
    if not _NAME.fullmatch(kyma_name):
        return []
    page = kcp.list(
        apitypes.EVENTS,
        s.kcp_namespace,
        field_selector=f"involvedObject.name={kyma_name}",
        limit=200,
        timeout=s.request_timeout,
    )
    return parts.events_of(page.get("items") or [])[:limit]


class Events:
    """``events`` cached ``seconds`` per Kyma CR (at most ``entries``): a reloaded runtime
    page costs the KCP one list per ten seconds, not one per view."""

    def __init__(
        self,
        kcp: gateway.Kube,
        s: settings.Settings,
        seconds: float = 10.0,
        entries: int = 256,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._kcp, self._s, self._seconds, self._entries, self._clock = (
            kcp,
            s,
            seconds,
            entries,
            clock,
        )
        self._lock = threading.Lock()
        self._cache: dict[str, tuple[float, list[parts.Event]]] = {}

    def get(self, kyma_name: str) -> list[parts.Event]:
        now = self._clock()
        with self._lock:
            hit = self._cache.get(kyma_name)
            if hit is not None and now - hit[0] < self._seconds:
                return hit[1]
        found = events(self._kcp, self._s, kyma_name)
        with self._lock:
            self._cache[kyma_name] = (now, found)
            if len(self._cache) > self._entries:
                del self._cache[min(self._cache, key=lambda k: self._cache[k][0])]
        return found


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
            log.warning("fleet listing failed (the previous snapshot is kept): %s", self.last_error)
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
            took = time.monotonic() - started
            self._stop.wait(max(0.5, self._interval - took, 2 * took))
