"""Heartbeat writes of the pod (the view process): at most one Lease write per runtime per
interval across the pod's workers and the listener's replicas.

A worker reports a runtime ``seen``; the write is due when the renewTime the view holds (as
the watch brought it: any replica's write) is ``interval`` old or older, and is then made
here, by a few writer threads, with the Lease's resourceVersion: of two replicas that find
it due at once one wins, the other gets a Conflict and leaves it (the watch brings the
winner's renewTime). A Lease that does not exist yet is created (a Conflict: another replica
created it). The Lease a write returns is kept at once, so the pod's next report of the
runtime finds it fresh before its watch event arrives. A report while a write of the
runtime is queued or in flight adds nothing; the queue is bounded (a report over it is
dropped and counted: the runtime's next one is due all the same).
"""

from __future__ import annotations

import datetime
import logging
import queue
import threading
from collections.abc import Callable

from listener.fleet import heartbeat
from listener.view import store
from tether.base import logs, times
from tether.kube import gateway

log = logging.getLogger(__name__)
MAX_QUEUED = 20_000
WRITERS = 16  # a PATCH at ~65 ms under load: ~250 writes/s per pod


class Beats:
    def __init__(
        self,
        kcp: gateway.Kube,
        namespace: str,
        interval: float,
        timeout: float,
        leases: store.Kind,
        *,
        counted: Callable[[str], None] = lambda outcome: None,
        now: Callable[[], datetime.datetime] = lambda: datetime.datetime.now(datetime.UTC),
    ) -> None:
        self._kcp, self._namespace, self._timeout = kcp, namespace, timeout
        self._interval, self._leases, self._counted, self._now = interval, leases, counted, now
        self._shape = heartbeat.Heartbeats(kcp, namespace, interval, timeout)
        self._queue: queue.Queue[str] = queue.Queue(MAX_QUEUED)
        self._lock = threading.Lock()
        self._pending: dict[str, threading.Event] = {}  # queued or in flight: set when done
        self._writers = WRITERS

    def due(self, renew: str) -> bool:
        if self._interval <= 0:
            return True
        t = times.parse_time(renew) if renew else None
        return t is None or (self._now() - t).total_seconds() >= self._interval

    def seen(self, runtime_id: str, wait: float = 0.0) -> str | None:
        """``written`` (within ``wait`` seconds), ``queued`` (still in flight), ``fresh``
        (not due) or ``dropped``; None while the Leases are not in the view (the worker
        writes itself, as without a view). Waiting keeps a worker's answer after its
        runtime's heartbeat, as a direct write would, while the KCP answers quickly."""
        held = self._leases.of(runtime_id)
        if held is None:
            return None
        if held and not self.due(held[0]["renew"]):
            return "fresh"
        with self._lock:
            done = self._pending.get(runtime_id)
            if done is None:
                try:
                    self._queue.put_nowait(runtime_id)
                except queue.Full:
                    self._counted("dropped")
                    return "dropped"
                done = self._pending[runtime_id] = threading.Event()
        keeping_up = self._queue.qsize() < self._writers
        return "written" if wait > 0 and keeping_up and done.wait(wait) else "queued"

    def write(self, runtime_id: str) -> str:
        """One due write (the writer threads' step); its outcome."""
        held = self._leases.of(runtime_id)
        if held is None:
            return "unsynced"
        if held and not self.due(held[0]["renew"]):
            return "fresh"  # another replica wrote it meanwhile
        name = heartbeat.lease_name(runtime_id)
        try:
            if held:
                spec = self._shape.new_lease(runtime_id, {})["spec"]
                written = self._kcp.patch(
                    gateway.LEASES,
                    self._namespace,
                    name,
                    {"metadata": {"resourceVersion": held[0]["rv"]}, "spec": spec},
                    timeout=self._timeout,
                )
            else:
                written = self._kcp.create(
                    gateway.LEASES,
                    self._namespace,
                    self._shape.new_lease(runtime_id, {}),
                    timeout=self._timeout,
                )
        except (gateway.Conflict, gateway.NotFound):
            return "conflict"  # another writer won (the watch brings its Lease)
        self._leases.remember(written)
        return "written"

    def _work(self) -> None:
        while True:
            runtime_id = self._queue.get()
            try:
                outcome = self.write(runtime_id)
            except gateway.GatewayError as e:
                outcome = "error"
                log.warning(
                    "heartbeat Lease not written (the runtime's next call retries): %s",
                    logs.bounded(e, 300),
                )
            except Exception as e:  # noqa: BLE001 - a writer thread never dies
                outcome = "error"
                log.warning("heartbeat Lease write failed: %s", logs.bounded(e, 300))
            finally:
                with self._lock:
                    done = self._pending.pop(runtime_id, None)
                if done is not None:
                    done.set()
            self._counted(outcome)

    def start(self, writers: int = WRITERS) -> None:
        self._writers = writers
        for i in range(writers):
            threading.Thread(target=self._work, name=f"view-beats-{i}", daemon=True).start()
