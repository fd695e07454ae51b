"""What this worker last saw of each stored object, to skip the read before a write.

The stored version of an object only ever grows (the ordering rule), so a remembered
version is a lower bound of the stored one. When an incoming record is newer than the
remembered version, the listener writes at once with the remembered
``metadata.resourceVersion``: the API accepts the write only if the object is unchanged
since then, which proves the record newer than what is stored; on 409 (someone else wrote)
or 404 (the object was deleted) the entry is dropped and the normal read-compare-write
path runs. Duplicates and stale records always take the normal path, so an answer never
rests on the cache alone. A key missing here is taken for a new one: the store creates it
without a read (``listener.storage.store``), and that create fails with 409 if the key is stored
after all. Bounded (least recently used dropped); losing an entry costs the next update of
that object a refused create and a read.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Mapping
from typing import Any, NamedTuple

from tether.wire import changes


class Entry(NamedTuple):
    version: changes.Version
    metadata: dict[str, Any]


class WriteCache:
    def __init__(self, max_entries: int) -> None:
        self.max_entries = max_entries
        self._lock = threading.Lock()
        self._entries: OrderedDict[str, Entry] = OrderedDict()

    def get(self, name: str) -> Entry | None:
        with self._lock:
            return self._entries.get(name)

    def remember(self, obj: Mapping[str, Any]) -> None:
        """Keep an object as the API returned it (only its metadata and version)."""
        if self.max_entries <= 0:
            return
        meta = dict(obj.get("metadata") or {})
        meta.pop("managedFields", None)
        name = str(meta.get("name", ""))
        if not name or not meta.get("resourceVersion"):
            return
        entry = Entry(changes.version_of(obj.get("spec") or {}), meta)
        with self._lock:
            self._entries[name] = entry
            self._entries.move_to_end(name)
            while len(self._entries) > self.max_entries:
                self._entries.popitem(last=False)

    def drop(self, name: str) -> None:
        with self._lock:
            self._entries.pop(name, None)
