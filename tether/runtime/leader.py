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

Time, as client-go does it: a follower never compares the Lease's ``renewTime`` (another
machine's wall clock, written for humans and the admin pages) with its own clock. It
records when, on its own monotonic clock, it last saw the Lease record change (holder,
renewTime or resourceVersion: ``observe``) and takes the Lease only once the record has
not changed for ``leaseDurationSeconds`` of its own time (``decide``). Clocks skewed by
minutes change nothing; only the rates of the clocks matter.

Fencing: ``fresh()`` is true while this process leads and less than ``renew_deadline``
(< the Lease duration) has passed, on its monotonic clock, since its last successful
renewal *started*. A follower cannot have taken over before then (it saw that renewal
after it started, then waits a whole Lease duration). Side effects that must not happen
twice check ``fresh()`` right before acting (compass's Director writes, the start of an
elected part's runs); a process paused (SIGSTOP, GC) past its Lease finds itself not
fresh the moment it resumes, since its monotonic clock advanced during the pause.

What the holder publishes for the admin pages (the last run, compass's breaker) goes on the
Lease as annotations (``annotate``): they ride on the elector's next write of the Lease (its
renewal, every ``retry_period``, or the release), so publishing costs no request of its own,
never writes a Lease this process does not hold and never races the elector's own writes.
"""

from __future__ import annotations

import dataclasses
import datetime
import logging
import math
import os
import socket
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any, Literal, NamedTuple

from tether.base import times
from tether.kube import gateway

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
    """What ``decide`` needs of a Lease (plain data). ``renew_time`` is the string as
    written: compared only for a change, never with a clock."""

    holder: str | None
    renew_time: str | None
    duration_seconds: int | None
    resource_version: str | None = None


class Observed(NamedTuple):
    """The Lease record as last seen, and since when (this process's monotonic seconds)."""

    record: tuple[str | None, str | None, str | None]
    since: float


def observe(prev: Observed | None, lease: LeaseView | None, now: float) -> Observed | None:
    """``prev`` if the record is unchanged, else the new record seen ``now``."""
    if lease is None:
        return None
    record = (lease.holder, lease.renew_time, lease.resource_version)
    if prev is not None and prev.record == record:
        return prev
    return Observed(record, now)


def decide(
    lease: LeaseView | None,
    identity: str,
    seen: Observed | None,
    now: float,
    default_duration: float,
) -> Action:
    """Acquire a missing or released Lease, or one whose record has not changed for its
    duration (``default_duration`` if it names none) since ``seen.since``; renew our own;
    else wait. ``now`` and ``seen.since``: this process's monotonic clock."""
    if lease is None or not lease.holder:
        return "acquire"
    if lease.holder == identity:
        return "renew"
    if seen is None:
        return "wait"
    duration = lease.duration_seconds if lease.duration_seconds else default_duration
    return "acquire" if now - seen.since >= duration else "wait"


def lease_seconds(lease_duration: float) -> int:
    """``leaseDurationSeconds`` as written: rounded up, so that followers wait at least as
    long as this process's leadership is fresh."""
    return max(1, math.ceil(lease_duration))


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
        clock: Callable[[], datetime.datetime] = _now,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        """``clock``: the wall clock written as ``renewTime``/``acquireTime`` (for humans;
        injected by the skew tests); ``monotonic``: the clock every decision uses."""
        self._kube = kube
        self._clock = clock
        self._mono = monotonic
        self._seen: Observed | None = None
        self.settings = settings
        self._on_started = on_started
        self._on_stopped = on_stopped
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._leading = False
        self._renewed_at: float = 0.0  # monotonic start of the last successful write
        self._notes_lock = threading.Lock()
        self._pending: dict[str, str] = {}  # to write with the next write of the Lease
        self._kept: dict[str, str] = {}  # written again at every acquisition

    @property
    def is_leader(self) -> bool:
        return self._leading

    def fresh(self) -> bool:
        """Leading, and the last successful renewal started less than ``renew_deadline``
        (capped at the Lease duration) ago: no other replica can have taken over yet.
        Check it right before a side effect that must not be done twice."""
        s = self.settings
        window = min(s.renew_deadline, s.lease_duration)
        return self._leading and self._mono() - self._renewed_at < window

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
        s = self.settings
        while not self._stop.is_set():
            ok = False
            started = self._mono()
            try:
                ok = self._try_acquire_or_renew()
            except gateway.GatewayError as e:
                log.warning("lease %s/%s: API error %s", s.namespace, s.name, e)
            except Exception as e:  # noqa: BLE001 - keep electing whatever the API does
                log.warning("lease %s/%s: %s", s.namespace, s.name, type(e).__name__)
            if ok:
                self._renewed_at = started
                if not self._leading:
                    self._set_leading(True)
            elif self._leading and not self.fresh():
                log.warning(
                    "lease %s/%s: not renewed within %.0fs, stepping down",
                    s.namespace,
                    s.name,
                    s.renew_deadline,
                )
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
        now = self._clock()
        lease = self._kube.get_or_none(gateway.LEASES, s.namespace, s.name)
        if lease is None:
            self._seen = None
            notes = self._notes(acquiring=True)
            meta: dict[str, Any] = {"name": s.name, "namespace": s.namespace}
            self._with_notes(meta, notes)
            body = {
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "metadata": meta,
                "spec": self._spec(now, acquire_time=times.format_time(now), transitions=0),
            }
            try:
                self._kube.create(gateway.LEASES, s.namespace, body)
            except gateway.Conflict:
                return False
            self._written(notes)
            return True
        spec = lease.get("spec") or {}
        duration = spec.get("leaseDurationSeconds")
        renew = spec.get("renewTime")
        view = LeaseView(
            spec.get("holderIdentity"),
            renew if isinstance(renew, str) else None,
            duration if isinstance(duration, int) else None,
            (lease.get("metadata") or {}).get("resourceVersion"),
        )
        mono = self._mono()
        self._seen = observe(self._seen, view, mono)
        action = decide(view, s.identity, self._seen, mono, s.lease_duration)
        if action == "wait":
            return False
        transitions = spec.get("leaseTransitions") or 0
        notes = self._notes(acquiring=action == "acquire" or not self._leading)
        self._with_notes(lease.setdefault("metadata", {}), notes)
        if action == "acquire":
            lease["spec"] = self._spec(
                now, acquire_time=times.format_time(now), transitions=transitions + 1
            )
        else:
            lease["spec"] = self._spec(
                now, acquire_time=spec.get("acquireTime"), transitions=transitions
            )
        try:  # with the read resourceVersion: of two writers, one gets 409
            self._kube.replace(gateway.LEASES, s.namespace, s.name, lease)
        except gateway.Conflict:  # someone else wrote first
            return False
        self._written(notes)
        return True

    def _spec(
        self, now: datetime.datetime, *, acquire_time: str | None, transitions: int
    ) -> dict[str, Any]:
        spec: dict[str, Any] = {
            "holderIdentity": self.settings.identity,
            "leaseDurationSeconds": lease_seconds(self.settings.lease_duration),
            "renewTime": times.format_time(now),
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
            log.info(
                "lease %s/%s: release failed (%s); it will expire",
                s.namespace,
                s.name,
                type(e).__name__,
            )
