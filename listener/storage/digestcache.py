"""Snapshots of runtimes' state digests, so that the pages of one listing share one KCP read.

Without them every ``GET .../state`` page lists all of the runtime's objects in the KCP and
sorts them, so paging through N objects costs O(N²/limit) reads. The first page of a
listing (no continue token) always reads the KCP afresh and keeps the sorted result; the
following pages are cut from that snapshot while it is younger than ``ttl`` (else read
afresh, as before). A listing thus reflects the KCP as of its first page; a record
persisted meanwhile shows up in the next listing (the poller then resends at most a
duplicate). Bounded: at most ``max_runtimes`` snapshots per worker, least recently used
dropped first. Pure apart from the injected loader and clock.
"""

from __future__ import annotations

import bisect
import collections
import threading
import time
from collections.abc import Callable

from tether.wire import changes

DEFAULT_TTL = 60.0
DEFAULT_MAX_RUNTIMES = 64


class _Snapshot:
    __slots__ = ("at", "items", "keys")

    def __init__(self, at: float, items: list[changes.DigestItem]) -> None:
        self.at = at
        self.items = sorted(items, key=lambda i: (i["namespace"], i["name"]))
        self.keys = [(i["namespace"], i["name"]) for i in self.items]


class DigestSnapshots:
    def __init__(
        self,
        ttl: float = DEFAULT_TTL,
        max_runtimes: int = DEFAULT_MAX_RUNTIMES,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.ttl, self.max_runtimes, self._clock = ttl, max_runtimes, clock
        self._lock = threading.Lock()
        self._snaps: collections.OrderedDict[str, _Snapshot] = collections.OrderedDict()
        self.loads = 0

    def page(
        self,
        runtime_id: str,
        after: tuple[str, str] | None,
        limit: int,
        load: Callable[[], list[changes.DigestItem]],
    ) -> tuple[list[changes.DigestItem], tuple[str, str] | None]:
        """One page ordered by (namespace, name) after ``after``, and the position to
        continue from (None at the end); same contract as ``records.page``."""
        snap = None if after is None else self._fresh(runtime_id)
        if snap is None:
            snap = _Snapshot(self._clock(), load())
            self.loads += 1
            with self._lock:
                self._snaps[runtime_id] = snap
                self._snaps.move_to_end(runtime_id)
                while len(self._snaps) > self.max_runtimes:
                    self._snaps.popitem(last=False)
        start = 0 if after is None else bisect.bisect_right(snap.keys, after)
        chunk = snap.items[start : start + limit]
        more = start + limit < len(snap.items)
        return chunk, ((chunk[-1]["namespace"], chunk[-1]["name"]) if more and chunk else None)

    def _fresh(self, runtime_id: str) -> _Snapshot | None:
        with self._lock:
            snap = self._snaps.get(runtime_id)
            if snap is None or self._clock() - snap.at > self.ttl:
                return None
            self._snaps.move_to_end(runtime_id)
            return snap
