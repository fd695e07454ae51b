"""Leader election on a ``coordination.k8s.io/v1`` Lease, as client-go does it.

Schedulers (poller, compass) run only in the Lease holder. The decision what to do with a
Lease is pure (``decide``); ``LeaderElector`` does the I/O in one daemon thread:

    elector = LeaderElector(api, LeaseSettings(namespace="tether-system", name="poller"),
                            on_started=scheduler.resume, on_stopped=scheduler.pause)
    elector.start()            # returns at once
    ...
    elector.stop()             # releases the Lease so another replica takes over fast

Writes use the Lease's resourceVersion (optimistic concurrency): of two candidates that
see an expired Lease, one update wins and the other gets 409 and keeps waiting.
"""

from __future__ import annotations

import dataclasses
import datetime
import logging
import os
import socket
import threading
from collections.abc import Callable
from typing import Any, Literal, NamedTuple

from kubernetes import client
from kubernetes.client.exceptions import ApiException

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
        api: client.ApiClient,
        settings: LeaseSettings,
        *,
        on_started: Callable[[], None],
        on_stopped: Callable[[], None],
    ) -> None:
        self._api = client.CoordinationV1Api(api)
        self.settings = settings
        self._on_started = on_started
        self._on_stopped = on_stopped
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._leading = False
        self._last_renew: float = 0.0

    @property
    def is_leader(self) -> bool:
        return self._leading

    def alive(self) -> bool:
        """The election thread is running (for liveness probes)."""
        return self._thread is not None and self._thread.is_alive()

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="leader-election", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self.settings.retry_period * 3)
        if self._leading:
            self._set_leading(False)
            self._release()

    # -- loop ------------------------------------------------------------------------------

    def _run(self) -> None:
        import time

        s = self.settings
        while not self._stop.is_set():
            ok = False
            try:
                ok = self._try_acquire_or_renew()
            except ApiException as e:
                log.warning("lease %s/%s: API error %s", s.namespace, s.name, e.status)
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
        self._leading = leading
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
        try:
            lease: Any = self._api.read_namespaced_lease(s.name, s.namespace)
        except ApiException as e:
            if e.status != 404:
                raise
            lease = None
        if lease is None:
            body = client.V1Lease(
                metadata=client.V1ObjectMeta(name=s.name, namespace=s.namespace),
                spec=self._spec(now, acquire_time=now, transitions=0),
            )
            try:
                self._api.create_namespaced_lease(s.namespace, body)
            except ApiException as e:
                if e.status == 409:
                    return False
                raise
            return True
        spec = lease.spec or client.V1LeaseSpec()
        view = LeaseView(spec.holder_identity, spec.renew_time, spec.lease_duration_seconds)
        action = decide(view, s.identity, now)
        if action == "wait":
            return False
        transitions = spec.lease_transitions or 0
        if action == "acquire":
            lease.spec = self._spec(now, acquire_time=now, transitions=transitions + 1)
        else:
            lease.spec = self._spec(now, acquire_time=spec.acquire_time, transitions=transitions)
        try:
            self._api.replace_namespaced_lease(s.name, s.namespace, lease)
        except ApiException as e:
            if e.status == 409:  # someone else wrote first
                return False
            raise
        return True

    def _spec(
        self, now: datetime.datetime, *, acquire_time: datetime.datetime | None, transitions: int
    ) -> client.V1LeaseSpec:
        return client.V1LeaseSpec(
            holder_identity=self.settings.identity,
            lease_duration_seconds=max(1, int(self.settings.lease_duration)),
            acquire_time=acquire_time,
            renew_time=now,
            lease_transitions=transitions,
        )

    def _release(self) -> None:
        s = self.settings
        try:
            lease: Any = self._api.read_namespaced_lease(s.name, s.namespace)
            if lease.spec is None or lease.spec.holder_identity != s.identity:
                return
            lease.spec.holder_identity = None
            lease.spec.lease_duration_seconds = 1
            self._api.replace_namespaced_lease(s.name, s.namespace, lease)
        except Exception as e:  # noqa: BLE001 - best effort; the Lease expires anyway
            log.info("lease %s/%s: release failed (%s); it will expire", s.namespace, s.name,
                     type(e).__name__)
