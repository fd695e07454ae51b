"""The live records of one Watch, per runtime, in memory, bounded (pure: plain data in,
the runtimes to reconcile out).

``Store.change`` takes one delivered change (the fields of ``tether.consumer.Change``) and
returns the runtime whose values may have changed; ``Store.synced`` ends a (re)list: every
key not delivered since the previous ``synced`` by the list is dropped (the library sends
removals itself; this holds for a resume whose history had expired too) and every runtime
is returned for a reconcile. Bounds: ``max_records`` per runtime (the listener's quota
default), ``max_runtimes`` and ``max_bytes`` of values per Watch. A runtime over a bound is
*refused*: its values in memory would be a part of its records, so nothing is injected for
it (``refused``) until the next relist delivers every record again.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from injector import merge

Key = tuple[str, str]  # namespace, name of the runtime object


def _size(source: merge.Source) -> int:
    return sum(len(k) + len(v) for k, v in source.data.items()) + 64


@dataclasses.dataclass
class Runtime:
    kyma: str = ""
    sources: dict[Key, merge.Source] = dataclasses.field(default_factory=dict)
    bytes: int = 0
    over: bool = False  # a record was refused: the values are incomplete
    revision: int = 0   # the highest revision delivered for it (tombstones and removals too)


class Store:
    def __init__(self, *, max_records: int, max_runtimes: int, max_bytes: int) -> None:
        self.max_records, self.max_runtimes, self.max_bytes = max_records, max_runtimes, max_bytes
        self.runtimes: dict[str, Runtime] = {}
        self.bytes = 0
        self._listed: set[tuple[str, Key]] = set()  # delivered by the current (re)list
        self._listing = False
        # tombstones a (re)list delivered before any live record of their runtime: their
        # revisions, for the runtime's origin (the list's order is the objects' names, hashes)
        self._unkept: dict[str, int] = {}
        self.full = False  # a runtime was refused by ``max_runtimes`` since the last (re)list

    def _drop(self, runtime: str, key: Key) -> None:
        rt = self.runtimes.get(runtime)
        if rt is None:
            return
        old = rt.sources.pop(key, None)
        if old is not None:
            size = _size(old)
            rt.bytes -= size
            self.bytes -= size
        if not rt.sources:
            del self.runtimes[runtime]

    def change(self, runtime: str, key: Key, kyma: str, record: Mapping[str, Any] | None,
               revision: int, *, resync: bool) -> str:
        """Keep (a live record) or drop (gone, a tombstone) one key; returns ``runtime``."""
        if resync:
            if not self._listing:  # a (re)list starts: it delivers every key again
                self._listing, self.full = True, False
                for each in self.runtimes.values():
                    each.over = False
            self._listed.add((runtime, key))
        live = record is not None and not record.get("deleted")
        self._drop(runtime, key)
        if not live or record is None:
            kept = self.runtimes.get(runtime)
            if kept is not None:
                kept.revision = max(kept.revision, revision)
            elif resync:
                self._unkept[runtime] = max(self._unkept.get(runtime, 0), revision)
            return runtime
        source = merge.source_of(record, revision)
        rt = self.runtimes.get(runtime)
        if rt is None:
            if len(self.runtimes) >= self.max_runtimes:
                self.full = True  # not kept: ``refused`` reports it
                return runtime
            rt = self.runtimes[runtime] = Runtime()
        rt.kyma = kyma or rt.kyma
        rt.revision = max(rt.revision, revision, self._unkept.pop(runtime, 0))
        size = _size(source)
        if len(rt.sources) >= self.max_records or self.bytes + size > self.max_bytes:
            rt.over = True
            return runtime
        rt.sources[key] = source
        rt.bytes += size
        self.bytes += size
        return runtime

    def synced(self) -> set[str]:
        """End of a (re)list: drop what it did not deliver; every runtime, to reconcile
        (including those whose last keys were just dropped)."""
        touched = set(self.runtimes)
        for runtime, rt in list(self.runtimes.items()):
            for key in list(rt.sources):
                if (runtime, key) not in self._listed:
                    self._drop(runtime, key)
        self._listed, self._listing, self._unkept = set(), False, {}
        return touched

    def sources(self, runtime: str) -> tuple[merge.Source, ...]:
        rt = self.runtimes.get(runtime)
        return tuple(rt.sources.values()) if rt is not None else ()

    def refused(self, runtime: str) -> bool:
        """Whether the runtime's values are incomplete: a bound refused one of its records
        (until the next relist), or the runtime itself (``max_runtimes``)."""
        rt = self.runtimes.get(runtime)
        return rt.over if rt is not None else self.full

    def revision(self, runtime: str) -> int:
        rt = self.runtimes.get(runtime)
        return rt.revision if rt is not None else 0

    def kyma(self, runtime: str) -> str:
        rt = self.runtimes.get(runtime)
        return rt.kyma if rt is not None else ""
