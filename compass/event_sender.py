"""Events sent off the reconcile path: ``Background.emit`` queues the Event's create for a
few sender threads, so that a runtime's reconcile does not wait on the KCP for its
``Registered``/``TokenDelivered`` Events (two of its seven KCP requests). ``drain`` waits
until every queued Event was sent (the job calls it at the end of each run, so a run's
Events are in the KCP when the run returns). Bounded: with ``limit`` Events pending, the
caller sends its own (backpressure instead of an unbounded queue). A failed create is
logged as by ``events.Recorder`` (an Event is best effort)."""

from __future__ import annotations

import concurrent.futures
import threading

from tether.kube import events, gateway


class Background(events.Recorder):
    def __init__(
        self,
        kube: gateway.Kube,
        component: str,
        instance: str,
        *,
        threads: int = 4,
        limit: int = 1000,
    ) -> None:
        super().__init__(kube, component, instance)
        self._pool = concurrent.futures.ThreadPoolExecutor(
            threads, thread_name_prefix="compass-events"
        )
        self._limit = limit
        self._lock = threading.Lock()
        self._pending: set[concurrent.futures.Future[None]] = set()

    def emit(self, ref: events.Ref, reason: str, message: str, *, warning: bool = False) -> None:
        with self._lock:
            full = len(self._pending) >= self._limit
            if not full:
                fut = self._pool.submit(super().emit, ref, reason, message, warning=warning)
                self._pending.add(fut)
        if full:
            super().emit(ref, reason, message, warning=warning)
            return
        fut.add_done_callback(self._done)

    def _done(self, fut: concurrent.futures.Future[None]) -> None:
        with self._lock:
            self._pending.discard(fut)

    def pending(self) -> int:
        with self._lock:
            return len(self._pending)

    def drain(self) -> None:
        """Wait until every Event queued so far was sent (or failed: logged)."""
        with self._lock:
            waiting = list(self._pending)
        concurrent.futures.wait(waiting)

    def close(self) -> None:
        self._pool.shutdown(wait=True)
