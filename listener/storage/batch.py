"""Persisting the records of one request concurrently, with a bound per worker.

A batch's records are grouped by key (``records.object_name``: the one KCP object they
write); a key's records run one after another in batch order (so a key updated five times
in one batch ends at its last record, as sequentially), different keys at once. ``Pool``
is one per worker process, shared by its request threads: a request runs its groups on at
most ``concurrency`` lanes, and the worker's lanes are threads of one executor of
``concurrency`` threads, so a worker never holds more than ``concurrency`` extra threads,
however many requests it serves (requests beyond that wait for a free lane). Concurrency 1
runs everything on the request thread, one record after another (no extra thread).

On a failure no new record starts: records already running finish, the rest are not
tried. So when a request fails, any record of it may have been persisted except the
failing one and the later records of its key; the senders re-send the request (503) or
its records one by one (400, 413) and every persisted record comes back ``duplicate``
(the store compares resourceVersions). The failure reported is the one of the earliest
record in batch order (``Done.failed``); ``Done.outcomes`` holds every record that
finished (None: not tried or failed).
"""

from __future__ import annotations

import concurrent.futures
import threading
import time
from collections.abc import Callable, Hashable, Mapping, Sequence
from typing import Any, Generic, NamedTuple, TypeVar

from listener.storage import records

T = TypeVar("T")
R = TypeVar("R")


class Finished(NamedTuple, Generic[R]):
    """A record's outcome and how long it took (seconds)."""

    outcome: R
    seconds: float


class Failed(NamedTuple):
    position: int
    error: BaseException
    seconds: float


class Done(NamedTuple, Generic[R]):
    outcomes: list[Finished[R] | None]  # by batch position (None: not tried, or failed)
    failures: list[Failed]  # by batch position

    @property
    def failed(self) -> Failed | None:
        """The earliest record's failure (the one the answer names)."""
        return self.failures[0] if self.failures else None


def groups(keys: Sequence[Hashable]) -> list[list[int]]:
    """Positions grouped by key, each group in batch order, groups by first position."""
    by_key: dict[Hashable, list[int]] = {}
    for i, k in enumerate(keys):
        by_key.setdefault(k, []).append(i)
    return list(by_key.values())


class _Run(Generic[T, R]):
    """One request's groups, taken by its lanes."""

    def __init__(self, items: Sequence[T], keys: Sequence[Hashable], fn: Callable[[T], R]) -> None:
        self._items, self._fn = items, fn
        self._todo = groups(keys)
        self._todo.reverse()  # pop() takes the earliest group first
        self._lock = threading.Lock()
        self.outcomes: list[Finished[R] | None] = [None] * len(items)
        self.failures: list[Failed] = []

    def _next(self) -> list[int] | None:
        with self._lock:
            if self.failures or not self._todo:
                return None
            return self._todo.pop()

    def lane(self) -> None:
        while (group := self._next()) is not None:
            for i in group:
                t0 = time.perf_counter()
                try:
                    outcome = self._fn(self._items[i])
                except BaseException as e:  # noqa: BLE001 -- handed to the request thread
                    with self._lock:
                        self.failures.append(Failed(i, e, time.perf_counter() - t0))
                    break  # the key's later records wait for the re-send
                self.outcomes[i] = Finished(outcome, time.perf_counter() - t0)
                with self._lock:
                    if self.failures:
                        return

    def done(self) -> Done[R]:
        return Done(self.outcomes, sorted(self.failures, key=lambda f: f.position))


class Pool:
    """At most ``concurrency`` records of a request at once, and as many extra threads per
    worker (the module's docstring)."""

    def __init__(self, concurrency: int) -> None:
        if concurrency < 1:
            raise ValueError("concurrency must be at least 1")
        self.concurrency = concurrency
        self._executor: concurrent.futures.ThreadPoolExecutor | None = None
        self._lock = threading.Lock()

    def _lanes(self) -> concurrent.futures.ThreadPoolExecutor:
        with self._lock:  # created at the first batch: after gunicorn forked the worker
            if self._executor is None:
                self._executor = concurrent.futures.ThreadPoolExecutor(
                    self.concurrency, thread_name_prefix="persist"
                )
            return self._executor

    def run(
        self,
        recs: Sequence[Mapping[str, Any]],
        fn: Callable[[Mapping[str, Any]], R],
        keys: Sequence[Hashable] | None = None,
    ) -> Done[R]:
        """``fn`` of every record, concurrently across keys (``keys[i]``: record i's key;
        default: the KCP object it writes)."""
        if keys is None:
            keys = [records.object_name(records.key_of(r)) for r in recs]
        run = _Run(recs, keys, fn)
        lanes = min(self.concurrency, len(run._todo))  # noqa: SLF001
        if lanes <= 1:
            run.lane()
        else:
            pool = self._lanes()
            futures = [pool.submit(run.lane) for _ in range(lanes)]
            concurrent.futures.wait(futures)
            for f in futures:
                f.result()  # a lane's own bug (not fn's error, which it keeps): raise it
        return run.done()
