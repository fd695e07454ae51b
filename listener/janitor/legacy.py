"""Records stored before Watches (legacy records), picked for deletion (pure).

A record written by a listener of the version before Watches has no Watch label
(``tether.watches.WATCH_LABEL``; ``listener.storage.records.watch_of``). Since Watches, every
record is stored under its Watch, a v1 record under the runtime's compat Watch, so such a
record is never written again, and the runtime's poller does not see it (its state listing
is of one Watch's records). The janitor deletes a runtime's legacy records once it holds
records under Watches (the runtime has delivered since the upgrade, so what it holds is
there again under a Watch); until then they stay, so a KCP upgraded before its runtimes
deliver loses nothing (docs/listener.md, "Legacy records"). Each deletion has the object's
resourceVersion and UID as preconditions, like a tombstone's.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from listener.storage import records, rules
from tether import apitypes


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
        name, rv, uid = meta.get("name"), meta.get("resourceVersion"), meta.get("uid")
        if self._count >= self._limit or not (
                isinstance(name, str) and isinstance(rv, str) and isinstance(uid, str)):
            return
        self._held.setdefault(rid, []).append((rules.Tombstone(name, rv, uid), meta))
        self._count += 1

    def due(self) -> list[tuple[rules.Tombstone, Mapping[str, Any]]]:
        """The legacy records of runtimes that hold records under Watches, by runtime."""
        return [held for rid in sorted(self._watched & set(self._held))
                for held in self._held[rid]]
