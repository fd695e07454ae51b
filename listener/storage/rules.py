"""The storage rule's decisions, pure (plain data in, plain data out; no I/O): which records
the listener writes, which it refuses, which the janitor prunes. ``listener.storage.store``
and ``listener.storage.quota`` apply them to the KCP, ``listener.janitor.sweep`` too.

**Ordering** (``verdict``): a record is written only if it is newer than the stored object
(``tether.wire.changes.compare``: equal resourceVersion is a ``duplicate``, an older one
``stale``), and a record for a key that is not stored is ``stale`` when it is too old for the
tombstone retention (below). ``may_create_unread``: whether a record may be created without
reading first (it would be accepted for a new key; the API's create proves the key new).

**Quota** (``admit``): a new key is admitted when one more record and its bytes fit, an
update of a stored key when its new size fits (an update that does not grow always fits).
Sizes are the objects' JSON (``size_of``), kept on each object as its size annotation
(``annotate``, ``stored_size``); ``usage_of`` sums a runtime's objects, ``delta`` is how a
write changes the usage.

**Unbacked tombstones** (``unbacked``, ``quota_size``, ``evictions``): a tombstone for a key
that is not stored (or stored only as such a tombstone) says that something the runtime never
had stored is gone. The runtime's API server may say so (an object created and deleted before
its record arrived), but so may anyone who reaches the webhook with a forged DELETE. It is
stored, so that the ordering rule still holds for its key (a late live record older than
the deletion is ``stale``), but marked (``UNBACKED_LABEL``) and kept apart: it
counts against neither the records nor the bytes quota, it is in no state digest or
summary, and a runtime keeps at most ``unbacked_cap`` of them, the oldest (by
``observedAt``) evicted first. A live record newer than it replaces it and counts as a new
record. What an eviction gives up: the ordering rule for that one key. A late record of the
key read before the deletion and arriving after the eviction is stored as if the object
still existed, until the poller's next run reads the runtime, finds the object gone and
sends a tombstone, which replaces it (a stored key's tombstone: an ordinary one). Under a
flood of forged DELETEs only the evicted keys are exposed, and only to records already in
flight when they were deleted; a newer stored record is never overwritten by an older one.

**Retention of tombstones** (``spec.deleted: true``): pruned once their ``observedAt`` is
older than the retention plus a skew allowance (``tombstone_due``). Without a tombstone, an
old record of the deleted object could be stored again ("resurrect" it), so the listener
refuses, as ``stale``, a record for a key that is not stored when its ``observedAt`` is older
than the retention (``too_old_for_new_key``). Why that is enough: a record that the pruned
tombstone would have beaten was read from the runtime before the deletion, so its
``observedAt`` is older than the tombstone's, which was older than now - retention -
allowance when it was pruned, hence older than now - retention at any later time. A fresh
read of the runtime (the poller's next run) always carries a recent ``observedAt``, so the
runtime's real state still converges. The allowance (a tenth of the retention, at most 10
minutes) covers clock differences between the runtime's nodes and a KCP clock stepping back.

**Orphans**: a runtime with records or a heartbeat Lease but no Kyma CR. The first time
the janitor sees it orphaned it writes that time on the runtime's heartbeat Lease
(``ORPHANED_SINCE``, durable: the janitor may restart at any moment); once the grace period
has passed since then, the runtime's records and Lease are deleted; a Kyma CR that comes
back clears the mark (``orphan_actions``).
"""

from __future__ import annotations

import datetime
import json
from collections.abc import Iterable, Mapping
from typing import Any, Literal, NamedTuple

from tether.base import numbers
from tether.wire import changes

ORPHANED_SINCE = "tether.kyma-project.io/orphaned-since"
MAX_ALLOWANCE = 600.0

OrphanStep = Literal["mark", "unmark", "wait", "delete"]


# -- ordering ----------------------------------------------------------------------------


def verdict(
    stored: changes.Version | None,
    incoming: changes.Version,
    now: datetime.datetime,
    retention: float,
) -> changes.Verdict:
    """Whether ``incoming`` is written over the stored object's version (None: the key is
    not stored): ``newer`` is written; ``duplicate`` and ``stale`` are not (a record for a
    key that is not stored is ``stale`` when it is too old for the retention)."""
    if stored is None and too_old_for_new_key(incoming.observed_at, now, retention):
        return "stale"  # maybe older than a pruned tombstone
    return changes.compare(stored, incoming)


def may_create_unread(incoming: changes.Version, now: datetime.datetime, retention: float) -> bool:
    """Whether a record for a key this worker does not know may be created without a read
    first: it would be accepted if the key were new (else the stored object decides)."""
    return verdict(None, incoming, now, retention) == "newer"


# -- quota -------------------------------------------------------------------------------

SIZE_ANNOTATION = "tether.kyma-project.io/size"

Limit = Literal["records", "bytes"]


class Limits(NamedTuple):
    records: int
    bytes: int


class Used(NamedTuple):
    records: int
    bytes: int


class Refusal(NamedTuple):
    """Why a write does not fit (plain data for the HTTP answer and the audit event)."""

    limit: Limit
    used: Used
    limits: Limits
    size: int  # bytes of the object that did not fit

    def message(self) -> str:
        if self.limit == "records":
            return (
                f"exceeded quota: the runtime stores {self.used.records} records, "
                f"the limit is {self.limits.records}; new ConfigMaps are not stored until "
                "records are deleted or pruned (updates of stored ones still are)"
            )
        return (
            f"exceeded quota: the runtime stores {self.used.bytes} bytes, the limit is "
            f"{self.limits.bytes}; this record ({self.size} bytes) does not fit"
        )


def size_of(obj: Mapping[str, Any]) -> int:
    """Bytes an object takes as JSON (about what etcd keeps of a custom resource, without
    managedFields and resourceVersion); the size annotation itself is left out."""
    meta = dict(obj.get("metadata") or {})
    meta.pop("managedFields", None)
    meta.pop("resourceVersion", None)
    meta["annotations"] = {
        k: v for k, v in (meta.get("annotations") or {}).items() if k != SIZE_ANNOTATION
    }
    return len(
        json.dumps({**obj, "metadata": meta}, separators=(",", ":"), ensure_ascii=False).encode()
    )


def annotate(obj: dict[str, Any]) -> int:
    """Set the size annotation on an object about to be written; its size."""
    size = size_of(obj)
    meta = obj.setdefault("metadata", {})
    meta["annotations"] = {**(meta.get("annotations") or {}), SIZE_ANNOTATION: str(size)}
    return size


def stored_size(meta: Mapping[str, Any]) -> int:
    """The size annotation of a stored object's metadata; 0 when absent or unreadable."""
    value = numbers.ascii_int((meta.get("annotations") or {}).get(SIZE_ANNOTATION), 12)
    return 0 if value is None else value


def usage_of(metas: Iterable[Mapping[str, Any]]) -> Used:
    """Records and bytes of a runtime from its objects' metadata (unbacked tombstones are
    not counted)."""
    n = total = 0
    for meta in metas:
        if is_unbacked(meta):
            continue
        n += 1
        total += stored_size(meta)
    return Used(n, total)


def admit(used: Used, limits: Limits, old_size: int | None, new_size: int) -> Refusal | None:
    """Whether a write fits: ``old_size`` None for a new key, else the stored object's size."""
    if old_size is None and used.records + 1 > limits.records:
        return Refusal("records", used, limits, new_size)
    grow = new_size - (old_size or 0)
    if grow > 0 and used.bytes + grow > limits.bytes:
        return Refusal("bytes", used, limits, new_size)
    return None


UNBACKED_LABEL = "tether.kyma-project.io/unbacked"


def is_unbacked(meta: Mapping[str, Any] | None) -> bool:
    """Whether a stored object's metadata is an unbacked tombstone's."""
    labels = None if meta is None else meta.get("labels")
    return isinstance(labels, dict) and labels.get(UNBACKED_LABEL) == "true"


def unbacked(stored: Mapping[str, Any] | None, deleted: bool) -> bool:
    """Whether a write of a record (``deleted``: a tombstone) over ``stored`` (the stored
    object's metadata; None: the key is not stored) is an unbacked tombstone."""
    return deleted and (stored is None or is_unbacked(stored))


def quota_size(stored: Mapping[str, Any] | None) -> int | None:
    """The stored object's size as the quota sees it: None (a new key) when there is none
    or it is an unbacked tombstone (which the quota does not count)."""
    if stored is None or is_unbacked(stored):
        return None
    return stored_size(stored)


def evictions(
    metas: Iterable[Mapping[str, Any]],
    cap: int,
    observed_key: str,
) -> list[Tombstone]:
    """The unbacked tombstones of one runtime to delete so that ``cap`` remain: the oldest by
    ``observedAt`` (annotation ``observed_key``) first (one that cannot be read counts as the
    oldest), then by name."""
    found = []
    for meta in metas:
        t = tombstone_of(meta)
        if t is None:
            continue
        ts = parse_time((meta.get("annotations") or {}).get(observed_key))
        found.append((ts or datetime.datetime.min.replace(tzinfo=datetime.UTC), t.name, t))
    found.sort(key=lambda f: (f[0], f[1]))
    return [t for _, _, t in found[: max(0, len(found) - cap)]]


def delta(old_size: int | None, new_size: int) -> Used:
    """How a write changes the usage."""
    return Used(1 if old_size is None else 0, new_size - (old_size or 0))


def add(a: Used, b: Used, sign: int = 1) -> Used:
    return Used(a.records + sign * b.records, a.bytes + sign * b.bytes)


# -- retention ---------------------------------------------------------------------------


def parse_time(text: object) -> datetime.datetime | None:
    """An RFC 3339 UTC time as Tether and Kubernetes write them; None when it is not one."""
    if not isinstance(text, str) or not 20 <= len(text) <= 40 or not text.isascii():
        return None
    raw = text.strip()
    if raw != text or not raw.endswith("Z"):
        return None
    head = raw[:-1]
    if "." in head:
        head, frac = head.split(".", 1)
        if not frac.isdigit():
            return None
        head = f"{head}.{frac[:6].ljust(6, '0')}"
    try:
        ts = datetime.datetime.fromisoformat(head + "+00:00")
    except ValueError:
        return None
    return ts


def allowance(retention: float) -> float:
    """Seconds a tombstone is kept beyond the retention (clock skew)."""
    return min(retention / 10, MAX_ALLOWANCE)


def too_old_for_new_key(observed_at: str, now: datetime.datetime, retention: float) -> bool:
    """Whether a record for a key that is not stored must be refused as ``stale``: its
    ``observedAt`` is older than ``now - retention`` (or cannot be read: refusing is safe,
    accepting could resurrect a pruned object)."""
    ts = parse_time(observed_at)
    if ts is None:
        return True
    return ts < now - datetime.timedelta(seconds=retention)


class Tombstone(NamedTuple):
    """What the janitor needs to delete one tombstone (only if unchanged since listed)."""

    name: str
    resource_version: str
    uid: str
    namespace: str = ""  # "": the janitor's namespace


def tombstone_of(meta: Mapping[str, Any]) -> Tombstone | None:
    """The deletion of a stored object (its name, resourceVersion, UID, namespace)."""
    name, rv, uid = meta.get("name"), meta.get("resourceVersion"), meta.get("uid")
    if not (isinstance(name, str) and isinstance(rv, str) and isinstance(uid, str)):
        return None
    return Tombstone(name, rv, uid, str(meta.get("namespace") or ""))


def tombstone_due(
    meta: Mapping[str, Any],
    now: datetime.datetime,
    retention: float,
    deleted_key: str,
    observed_key: str,
) -> Tombstone | None:
    """The object to delete when ``meta`` (a stored object's metadata) is a tombstone older
    than the retention plus the allowance; else None (also when a field cannot be read)."""
    ann = meta.get("annotations") or {}
    if ann.get(deleted_key) != "true":
        return None
    ts = parse_time(ann.get(observed_key))
    if ts is None:
        return None
    if ts >= now - datetime.timedelta(seconds=retention + allowance(retention)):
        return None
    return tombstone_of(meta)


class Orphan(NamedTuple):
    runtime_id: str
    step: OrphanStep
    since: datetime.datetime | None  # first seen orphaned (None: not orphaned)


def orphan_actions(
    runtimes: Iterable[str],
    marks: Mapping[str, str | None],
    with_kyma: set[str],
    now: datetime.datetime,
    grace: float,
) -> list[Orphan]:
    """What to do for each runtime that has records or a heartbeat Lease (``runtimes``).

    ``marks``: runtime ID -> the ``ORPHANED_SINCE`` annotation of its heartbeat Lease (None
    or absent when unmarked or without a Lease); ``with_kyma``: runtime IDs that have a Kyma
    CR. A mark that cannot be read is written again (the grace starts over: safe)."""
    out: list[Orphan] = []
    for rid in sorted(set(runtimes)):
        raw = marks.get(rid)
        since = parse_time(raw) if raw is not None else None
        if rid in with_kyma:
            if raw is not None:
                out.append(Orphan(rid, "unmark", None))
            continue
        if since is None:
            out.append(Orphan(rid, "mark", now))
        elif (now - since).total_seconds() >= grace:
            out.append(Orphan(rid, "delete", since))
        else:
            out.append(Orphan(rid, "wait", since))
    return out
