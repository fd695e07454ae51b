"""Each runtime's work on a worker thread, with a wall-clock deadline per runtime that a run
never waits past (``enroller.decide.dispatch`` decides; this module holds the threads).

A thread cannot be stopped in Python: work that outlives its deadline (a straggler) keeps its
thread until it ends by itself (every call into a runtime is bounded by the gateway), the run
reports it as ``overdue`` and goes on, and its key stays *busy*: it is not started again
until it has ended, so the threads held by stragglers are at most one per runtime. All
threads, stragglers included, are at most ``workers``; they are daemon threads, so a straggler
never holds the process's exit. Work another run started and that is still in time is joined,
not started twice (the interval run and the reaction to changed Kyma CRs may overlap).
"""

from __future__ import annotations

import collections
import concurrent.futures
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any, Literal, NamedTuple

from enroller import decide

OutcomeKind = Literal["done", "error", "overdue", "busy", "no_worker"]


class Outcome(NamedTuple):
    key: str
    kind: OutcomeKind
    value: Any = None  # the work's result ("done") or exception ("error")


class _Running(NamedTuple):
    future: concurrent.futures.Future[Any]
    deadline: float  # monotonic


class Dispatcher:
    def __init__(
        self, workers: int, *, name: str = "enroll", clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.workers, self.name, self.clock = workers, name, clock
        self._lock = threading.Lock()
        self._running: dict[str, _Running] = {}

    def busy(self) -> int:
        """Threads running work now (stragglers included)."""
        with self._lock:
            return len(self._running)

    def stragglers(self) -> int:
        """Threads running work past its deadline."""
        now = self.clock()
        with self._lock:
            return sum(1 for r in self._running.values() if r.deadline <= now)

    def _start(self, key: str, fn: Callable[[], Any], deadline: float) -> _Running:
        """Under the lock: a thread for the work, registered as running until it ends."""
        fut: concurrent.futures.Future[Any] = concurrent.futures.Future()
        fut.set_running_or_notify_cancel()
        running = _Running(fut, deadline)

        def body() -> None:
            try:
                value = fn()
            except BaseException as e:  # noqa: BLE001 - handed to the run as an "error" outcome
                self._end(key, running)
                fut.set_exception(e)
                return
            self._end(key, running)
            fut.set_result(value)

        self._running[key] = running
        threading.Thread(target=body, name=f"{self.name}-{key[:40]}", daemon=True).start()
        return running

    def _end(self, key: str, running: _Running) -> None:
        with self._lock:
            if self._running.get(key) is running:
                del self._running[key]

    def run(
        self, work: Iterable[tuple[str, Callable[[], Any]]], *, concurrency: int, deadline: float
    ) -> Iterator[Outcome]:
        """Each (key, work) at most ``concurrency`` at once, each given ``deadline`` seconds
        from its start; one outcome per key, as they come. Returns within about
        len(work) / concurrency x deadline (plus one deadline when every worker is held)."""
        pending = collections.deque(work)
        mine: dict[
            concurrent.futures.Future[Any], tuple[str, float, bool]
        ] = {}  # key, deadline, joined
        waited = False
        while pending or mine:
            while pending:
                key, fn = pending[0]
                now = self.clock()
                with self._lock:
                    other = self._running.get(key)
                    running: decide.Running = (
                        "no" if other is None else "overdue" if other.deadline <= now else "in_time"
                    )
                    action = decide.dispatch(
                        running=running,
                        in_flight=len(mine),
                        concurrency=concurrency,
                        workers_busy=len(self._running),
                        workers=self.workers,
                        waited=waited,
                    )
                    if action == "dispatch":
                        started = self._start(key, fn, now + deadline)
                if action == "wait":
                    break
                pending.popleft()
                if action == "dispatch":
                    mine[started.future] = (key, started.deadline, False)
                    waited = False
                elif action == "join":
                    assert other is not None
                    mine[other.future] = (key, other.deadline, True)
                else:
                    yield Outcome(key, action)
            if not mine:
                if pending:  # every worker is held by earlier work: wait for one, once
                    with self._lock:
                        held = [r.future for r in self._running.values()]
                    concurrent.futures.wait(
                        held, timeout=deadline, return_when=concurrent.futures.FIRST_COMPLETED
                    )
                    waited = True
                continue
            timeout = max(0.0, min(d for _, d, _ in mine.values()) - self.clock())
            done, _ = concurrent.futures.wait(
                list(mine), timeout=timeout, return_when=concurrent.futures.FIRST_COMPLETED
            )
            for f in done:
                key, _, _ = mine.pop(f)
                exc = f.exception()
                yield (
                    Outcome(key, "error", exc)
                    if exc is not None
                    else Outcome(key, "done", f.result())
                )
            now = self.clock()
            for f, (key, d, joined) in list(mine.items()):
                if d <= now and not f.done():
                    del mine[f]
                    # the run that started it reports the straggler; a joiner only says busy
                    yield Outcome(key, "busy" if joined else "overdue")
