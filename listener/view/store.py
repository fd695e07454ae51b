"""What the view holds (plain data, bounded): the Kyma CRs by runtime ID, the heartbeat
Leases' epoch, identity, renewTime and resourceVersion, the state summaries as served
(compact JSON bytes: the answer forwards them), and every record under a Watch as its
digest item, by runtime and Watch (``record_entry``: the per-Watch summaries and digests
are folded from them, ``listener.edge.watchstate``).

One ``Kind`` per watched resource: ``replace`` (a listing) and ``apply`` (a watch event)
keep it; over ``max_objects`` objects or ``max_bytes`` bytes (the kept fields' JSON size)
it stops answering (``full``: workers read the KCP directly) until a relist fits again.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from listener.storage import records
from tether.base import numbers
from tether.kube import apitypes, kyma
from tether.wire import changes

ANN_IDENTITY = "tether.kyma-project.io/runtime-identity"  # as listener.fleet.heartbeat


def kyma_entry(obj: Mapping[str, Any]) -> tuple[str, dict[str, Any]] | None:
    """(runtime ID, the KymaView fields) of a Kyma CR; None without a runtime-ID label."""
    v = kyma.view(obj)
    if not v.runtime_id:
        return None
    d = v._asdict()
    d["modules"] = sorted(v.modules)
    return v.runtime_id, d


def lease_entry(obj: Mapping[str, Any]) -> tuple[str, dict[str, Any]] | None:
    """(runtime ID, epoch/identity/resourceVersion/renewTime) of a heartbeat Lease."""
    meta = obj.get("metadata") or {}
    rid = (meta.get("labels") or {}).get(apitypes.RUNTIME_ID_LABEL)
    if not isinstance(rid, str) or not rid:
        return None
    ann = meta.get("annotations") or {}
    identity = ann.get(ANN_IDENTITY)
    renew = (obj.get("spec") or {}).get("renewTime")
    return rid, {
        "epoch": changes.epoch_of(ann.get(apitypes.EPOCH_ANNOTATION)),
        "identity": identity if isinstance(identity, str) else "",
        "rv": str(meta.get("resourceVersion") or ""),
        "renew": renew if isinstance(renew, str) else "",
    }


def summary_entry(obj: Mapping[str, Any]) -> tuple[str, bytes] | None:
    """(runtime ID, the summary's spec, status and resourceVersion as compact JSON)."""
    rid = (obj.get("spec") or {}).get("runtimeId")
    if not isinstance(rid, str) or not rid:
        return None
    meta = obj.get("metadata") or {}
    kept = {
        "metadata": {"name": meta.get("name"), "resourceVersion": meta.get("resourceVersion")},
        "spec": {"runtimeId": rid},
        "status": obj.get("status"),
    }
    return rid, json.dumps(kept, separators=(",", ":")).encode()


def record_entry(obj: Mapping[str, Any]) -> tuple[str, list[Any]] | None:
    """("RUNTIME/WATCH", [storage namespace, namespace, name, uid, resourceVersion,
    observedAt, deleted, epoch]) of a stored record's metadata; None for a record of no
    Watch (a legacy record: docs/listener.md) and for an unbacked tombstone (no record of the
    runtime's: ``records.digest_item``)."""
    meta = obj.get("metadata") or {}
    rid = (meta.get("labels") or {}).get(apitypes.RUNTIME_ID_LABEL)
    watch = records.watch_of(meta)
    item = records.digest_item(meta)
    if not isinstance(rid, str) or not rid or not watch or item is None:
        return None
    return f"{rid}/{watch}", [
        str(meta.get("namespace") or ""),
        item["namespace"],
        item["name"],
        item["uid"],
        item["resourceVersion"],
        item["observedAt"],
        item["deleted"],
        item.get("epoch", 0),
    ]


def _name(obj: Mapping[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("name") or "")


def namespaced(obj: Mapping[str, Any]) -> str:
    """The key of an object of a namespaced kind watched across namespaces."""
    meta = obj.get("metadata") or {}
    return f"{meta.get('namespace') or ''}/{meta.get('name') or ''}"


def _size(value: object) -> int:
    if isinstance(value, bytes):
        return len(value) + 64
    return len(json.dumps(value, separators=(",", ":"))) + 64


def _hold(
    by_name: dict[str, tuple[str, Any, int]],
    by_rid: dict[str, dict[str, Any]],
    name: str,
    rid: str,
    value: Any,
) -> int:
    """Keep ``value`` under ``name`` and its runtime ID; the bytes it counts."""
    size = _size(value) + len(name)
    by_name[name] = (rid, value, size)
    by_rid.setdefault(rid, {})[name] = value
    return size


class Kind:
    """One resource's objects by name, indexed by runtime ID; thread-safe."""

    def __init__(
        self,
        name: str,
        entry: Callable[[Mapping[str, Any]], tuple[str, Any] | None],
        max_objects: int,
        max_bytes: int,
        key: Callable[[Mapping[str, Any]], str] | None = None,
    ) -> None:
        self.name, self._entry, self.key = name, entry, key or _name
        self._max_objects, self._max_bytes = max_objects, max_bytes
        self._lock = threading.Lock()
        self._by_name: dict[str, tuple[str, Any, int]] = {}  # name -> (runtime ID, value, size)
        self._by_rid: dict[str, dict[str, Any]] = {}  # runtime ID -> name -> value
        self._bytes = 0
        self.synced = False  # listed and watching, within the bounds
        self.full = False  # over the bounds: not answered

    def _drop(self, name: str) -> None:
        old = self._by_name.pop(name, None)
        if old is None:
            return
        rid, _, size = old
        self._bytes -= size
        named = self._by_rid.get(rid)
        if named is not None:
            named.pop(name, None)
            if not named:
                del self._by_rid[rid]

    def _put(self, name: str, obj: Mapping[str, Any]) -> None:
        self._drop(name)
        got = self._entry(obj)
        if got is None:
            return
        self._bytes += _hold(self._by_name, self._by_rid, name, *got)
        if len(self._by_name) > self._max_objects or self._bytes > self._max_bytes:
            self.full = True

    def replace(self, items: Iterable[Mapping[str, Any]]) -> None:
        """A new listing (every object); ``full`` is decided again."""
        listing = Listing(self)
        listing.add(items)
        listing.done()

    def apply(self, event_type: str, obj: Mapping[str, Any]) -> None:
        """One watch event (ADDED, MODIFIED, DELETED; others ignored)."""
        name = self.key(obj)
        with self._lock:
            if self.full:
                return
            if event_type == "DELETED":
                self._drop(name)
            elif event_type in ("ADDED", "MODIFIED"):
                self._put(name, obj)
            if self.full:
                self._by_name.clear()
                self._by_rid.clear()
                self._bytes = 0

    def of(self, runtime_id: str) -> list[Any] | None:
        """The runtime's values (by name order); None when not answering (not synced, full)."""
        with self._lock:
            if not self.synced or self.full:
                return None
            named = self._by_rid.get(runtime_id) or {}
            return [named[n] for n in sorted(named)]

    def sizes(self) -> tuple[int, int]:
        with self._lock:
            return len(self._by_name), self._bytes

    def values(self) -> list[Any] | None:
        with self._lock:
            if not self.synced or self.full:
                return None
            return [v for _, v, _ in self._by_name.values()]

    def remember(self, obj: Mapping[str, Any]) -> None:
        """An object this process just wrote (before its watch event arrives), unless a
        later version is held already (another writer's, from the watch)."""
        meta = obj.get("metadata") or {}
        new = numbers.ascii_int(str(meta.get("resourceVersion") or ""), 32) or 0
        with self._lock:
            held = self._by_name.get(str(meta.get("name") or ""))
        old = held[1].get("rv") if held is not None and isinstance(held[1], dict) else None
        if isinstance(old, str) and (numbers.ascii_int(old, 32) or 0) >= new:
            return
        self.apply("MODIFIED", obj)


class Listing:
    """A new listing of a ``Kind``, built page by page: each page's objects become entries
    as the page arrives (the page's parsed objects are garbage once it is read, so the peak
    is one page, not the whole listing: 5,000 state summaries parsed at once took ~300 MiB),
    outside the kind's lock (answers go on from the previous listing meanwhile), then
    swapped in at once (``done``). Over the kind's bounds it stops holding objects and the
    kind is ``full``."""

    def __init__(self, kind: Kind) -> None:
        self._kind = kind
        self._by_name: dict[str, tuple[str, Any, int]] = {}
        self._by_rid: dict[str, dict[str, Any]] = {}
        self._bytes = 0
        self._full = False

    def add(self, items: Iterable[Mapping[str, Any]]) -> None:
        k = self._kind
        for obj in items:
            if self._full:
                return
            name = k.key(obj)
            got = k._entry(obj)
            if got is None or name in self._by_name:
                continue
            self._bytes += _hold(self._by_name, self._by_rid, name, *got)
            if len(self._by_name) > k._max_objects or self._bytes > k._max_bytes:
                self._full = True  # stop holding more than the bound
                self._by_name, self._by_rid, self._bytes = {}, {}, 0

    def done(self) -> None:
        k = self._kind
        with k._lock:
            k._by_name, k._by_rid, k._bytes, k.full = (
                self._by_name,
                self._by_rid,
                self._bytes,
                self._full,
            )
