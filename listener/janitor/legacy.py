"""Records stored before Watches (legacy records), picked for deletion (pure).

A record written by a listener of the version before Watches has no Watch label
(``tether.wire.watches.WATCH_LABEL``; ``listener.storage.records.watch_of``). Since Watches, every
record is stored under its Watch, a v1 record under the runtime's compat Watch, so such a
record is never written again, and the runtime's poller does not see it (its state listing
is of one Watch's records). The janitor deletes a runtime's legacy records once it holds
records under Watches (the runtime has delivered since the upgrade, so what it holds is
there again under a Watch); until then they stay, so a KCP upgraded before its runtimes
deliver loses nothing (docs/listener.md, "Legacy records"). Each deletion has the object's
resourceVersion and UID as preconditions, like a tombstone's.

Records of a Watch that was deleted (``of_gone_watch``) go after the retention rule: once
their ``observedAt`` is older than the tombstone retention, like tombstones. A Watch that
exists but no longer applies to the runtime keeps its records (they may apply again); the
orphan rule removes a gone runtime's records whatever their Watch.
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping
from typing import Any

from listener.storage import records, rules
from tether.kube import apitypes


class Legacy:
    """Fed every record's metadata of one listing (``add``); ``due`` then names the legacy
    records to delete (at most ``limit`` per run, the rest at the next run)."""

    def __init__(self, limit: int) -> None:
        self._limit = limit
        self._held: dict[str, list[tuple[rules.Tombstone, Mapping[str, Any]]]] = {}
        self._watched: set[str] = set()
        self._count = 0

    def add(self, meta: Mapping[str, Any]) -> None:
        rid = (meta.get("labels") or {}).get(apitypes.RUNTIME_ID_LABEL)
        if not isinstance(rid, str):
            return
        if records.watch_of(meta) is not None:
            self._watched.add(rid)
            return
        t = rules.tombstone_of(meta)
        if self._count >= self._limit or t is None:
            return
        self._held.setdefault(rid, []).append((t, meta))
        self._count += 1

    def due(self) -> list[tuple[rules.Tombstone, Mapping[str, Any]]]:
        """The legacy records of runtimes that hold records under Watches, by runtime."""
        return [held for rid in sorted(self._watched & set(self._held)) for held in self._held[rid]]


def of_gone_watch(
    meta: Mapping[str, Any],
    existing: frozenset[str] | None,
    now: datetime.datetime,
    retention: float,
) -> rules.Tombstone | None:
    """The record to delete when ``meta`` is of a Watch that no longer exists (``existing``:
    the names of the Watches in the namespace; None when unknown: nothing is deleted) and
    its ``observedAt`` is older than the tombstone retention plus the allowance: a deleted
    Watch's records go after the retention rule, as if each were a tombstone."""
    watch = records.watch_of(meta)
    if existing is None or watch is None or watch in existing:
        return None
    ann = meta.get("annotations") or {}
    ts = rules.parse_time(ann.get(records.ANN_OBSERVED))
    if ts is None or ts >= now - datetime.timedelta(seconds=retention + rules.allowance(retention)):
        return None
    return rules.tombstone_of(meta)
