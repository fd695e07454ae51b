"""Leader election on a ``coordination.k8s.io/v1`` Lease, as client-go does it.

Schedulers (poller, compass) run only in the Lease holder. The decision what to do with a
Lease is pure (``decide``); ``LeaderElector`` does the I/O in one daemon thread:

    elector = LeaderElector(kube, LeaseSettings(namespace="tether-system", name="poller"),
                            on_started=scheduler.resume, on_stopped=scheduler.pause)
    elector.start()            # returns at once
    ...
    elector.stop()             # releases the Lease so another replica takes over fast

Writes use the Lease's resourceVersion (optimistic concurrency): of two candidates that
see an expired Lease, one update wins and the other gets 409 and keeps waiting.

What the holder publishes for the admin pages (the last run, compass's breaker) goes on the
Lease as annotations (``annotate``): they ride on the elector's next write of the Lease (its
renewal, every ``retry_period``, or the release), so publishing costs no request of its own,
never writes a Lease this process does not hold and never races the elector's own writes.
"""

from __future__ import annotations

import dataclasses
import datetime
import logging
import os
import socket
import threading
from collections.abc import Callable, Mapping
from typing import Any, Literal, NamedTuple

from tether import changes, gateway

log = logging.getLogger(__name__)

Action = Literal["acquire", "renew", "wait"]


@dataclasses.dataclass(frozen=True)
class LeaseSettings:
    namespace: str
    name: str
    identity: str = dataclasses.field(
        default_factory=lambda: f"{socket.gethostname()}_{os.getpid()}"
    )
    lease_duration: float = 15.0
    renew_deadline: float = 10.0
    retry_period: float = 2.0


class LeaseView(NamedTuple):
    """What ``decide`` needs of a Lease (plain data)."""

    holder: str | None
    renew_time: datetime.datetime | None
    duration_seconds: int | None


def decide(lease: LeaseView | None, identity: str, now: datetime.datetime) -> Action:
    """Acquire a missing, released or expired Lease; renew our own; else wait."""
    if lease is None or not lease.holder:
        return "acquire"
    if lease.holder == identity:
        return "renew"
    if lease.renew_time is None or lease.duration_seconds is None:
        return "acquire"
    expires = lease.renew_time + datetime.timedelta(seconds=lease.duration_seconds)
    return "acquire" if now >= expires else "wait"


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


class LeaderElector:
    def __init__(
        self,
        kube: gateway.Kube,
        settings: LeaseSettings,
        *,
        on_started: Callable[[], None],
        on_stopped: Callable[[], None],
    ) -> None:
        self._kube = kube
        self.settings = settings
        self._on_started = on_started
        self._on_stopped = on_stopped
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._leading = False
        self._last_renew: float = 0.0
        self._notes_lock = threading.Lock()
        self._pending: dict[str, str] = {}  # to write with the next write of the Lease
        self._kept: dict[str, str] = {}     # written again at every acquisition

    @property
    def is_leader(self) -> bool:
        return self._leading

    def alive(self) -> bool:
        """The election thread is running (for liveness probes)."""
        return self._thread is not None and self._thread.is_alive()

    def annotate(self, values: Mapping[str, str], *, keep: bool = False) -> None:
        """Publish ``values`` as annotations of the Lease with its next write (at most one
        ``retry_period`` later). Values given while not leading are dropped, and so are
        those not yet written when this process steps down: only the holder writes, and a
        later holder's values are never overwritten with older ones. ``keep``: the value
        describes this process's current state (compass's breaker): written again at every
        acquisition of the Lease."""
        with self._notes_lock:
            if keep:
                self._kept.update(values)
            if self._leading:
                self._pending.update(values)

    def _notes(self, acquiring: bool) -> dict[str, str]:
        with self._notes_lock:
            return {**self._kept, **self._pending} if acquiring else dict(self._pending)

    def _written(self, notes: Mapping[str, str]) -> None:
        with self._notes_lock:
            for k, v in notes.items():
                if self._pending.get(k) == v:
                    del self._pending[k]

    @staticmethod
    def _with_notes(meta: dict[str, Any], notes: Mapping[str, str]) -> None:
        if notes:
            meta["annotations"] = {**(meta.get("annotations") or {}), **notes}

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="leader-election", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self.settings.retry_period * 3)
        if self._leading:
            notes = self._notes(acquiring=False)
            self._set_leading(False)
            self._release(notes)

    # -- loop ------------------------------------------------------------------------------

    def _run(self) -> None:
        import time

        s = self.settings
        while not self._stop.is_set():
            ok = False
            try:
                ok = self._try_acquire_or_renew()
            except gateway.GatewayError as e:
                log.warning("lease %s/%s: API error %s", s.namespace, s.name, e)
            except Exception as e:  # noqa: BLE001 - keep electing whatever the API does
                log.warning("lease %s/%s: %s", s.namespace, s.name, type(e).__name__)
            now = time.monotonic()
            if ok:
                self._last_renew = now
                if not self._leading:
                    self._set_leading(True)
            elif self._leading and now - self._last_renew > s.renew_deadline:
                log.warning("lease %s/%s: could not renew within %.0fs, stepping down",
                            s.namespace, s.name, s.renew_deadline)
                self._set_leading(False)
            self._stop.wait(s.retry_period)

    def _set_leading(self, leading: bool) -> None:
        with self._notes_lock:
            self._leading = leading
            if not leading:
                self._pending.clear()
        s = self.settings
        if leading:
            log.info("lease %s/%s acquired by %s", s.namespace, s.name, s.identity)
            self._on_started()
        else:
            log.info("lease %s/%s lost by %s", s.namespace, s.name, s.identity)
            self._on_stopped()

    def _try_acquire_or_renew(self) -> bool:
        s = self.settings
        now = _now()
        lease = self._kube.get_or_none(gateway.LEASES, s.namespace, s.name)
        if lease is None:
            notes = self._notes(acquiring=True)
            meta: dict[str, Any] = {"name": s.name, "namespace": s.namespace}
            self._with_notes(meta, notes)
            body = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": meta,
                    "spec": self._spec(now, acquire_time=changes.format_time(now),
                                       transitions=0)}
            try:
                self._kube.create(gateway.LEASES, s.namespace, body)
            except gateway.Conflict:
                return False
            self._written(notes)
            return True
        spec = lease.get("spec") or {}
        duration = spec.get("leaseDurationSeconds")
        view = LeaseView(spec.get("holderIdentity"), changes.parse_time(spec.get("renewTime")),
                         duration if isinstance(duration, int) else None)
        action = decide(view, s.identity, now)
        if action == "wait":
            return False
        transitions = spec.get("leaseTransitions") or 0
        notes = self._notes(acquiring=action == "acquire" or not self._leading)
        self._with_notes(lease.setdefault("metadata", {}), notes)
        if action == "acquire":
            lease["spec"] = self._spec(now, acquire_time=changes.format_time(now),
                                       transitions=transitions + 1)
        else:
            lease["spec"] = self._spec(now, acquire_time=spec.get("acquireTime"),
                                       transitions=transitions)
        try:  # with the read resourceVersion: of two writers, one gets 409
            self._kube.replace(gateway.LEASES, s.namespace, s.name, lease)
        except gateway.Conflict:  # someone else wrote first
            return False
        self._written(notes)
        return True

    def _spec(self, now: datetime.datetime, *, acquire_time: str | None,
              transitions: int) -> dict[str, Any]:
        spec: dict[str, Any] = {
            "holderIdentity": self.settings.identity,
            "leaseDurationSeconds": max(1, int(self.settings.lease_duration)),
            "renewTime": changes.format_time(now),
            "leaseTransitions": transitions,
        }
        if acquire_time:
            spec["acquireTime"] = acquire_time
        return spec

    def _release(self, notes: Mapping[str, str]) -> None:
        """Hand the Lease over, with what was still to publish (the last run's result)."""
        s = self.settings
        try:
            lease = self._kube.get(gateway.LEASES, s.namespace, s.name)
            spec = lease.get("spec")
            if not spec or spec.get("holderIdentity") != s.identity:
                return
            spec.pop("holderIdentity", None)
            spec["leaseDurationSeconds"] = 1
            self._with_notes(lease.setdefault("metadata", {}), notes)
            self._kube.replace(gateway.LEASES, s.namespace, s.name, lease)
        except Exception as e:  # noqa: BLE001 - best effort; the Lease expires anyway
            log.info("lease %s/%s: release failed (%s); it will expire", s.namespace, s.name,
                     type(e).__name__)
