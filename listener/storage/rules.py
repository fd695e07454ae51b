"""Retention of stored records (pure decisions; the listener and the janitor apply them).

**Tombstones** (``spec.deleted: true``) are pruned once their ``observedAt`` is older than
the retention plus a skew allowance (``tombstone_due``). Without a tombstone, an old record
of the deleted object could be stored again ("resurrect" it), so the listener refuses, as
``stale``, a record for a key that is not stored when its ``observedAt`` is older than the
retention (``too_old_for_new_key``). Why that is enough: a record that the pruned tombstone
would have beaten was read from the runtime before the deletion, so its ``observedAt`` is
older than the tombstone's, which was older than now - retention - allowance when it was
pruned, hence older than now - retention at any later time. A fresh read of the runtime
(the poller's next run) always carries a recent ``observedAt``, so the runtime's real state
still converges. The allowance (a tenth of the retention, at most 10 minutes) covers clock
differences between the runtime's nodes and a KCP clock stepping back.

**Orphans**: a runtime with records or a heartbeat Lease but no Kyma CR. The first time
the janitor sees it orphaned it writes that time on the runtime's heartbeat Lease
(``ORPHANED_SINCE``, durable: the janitor may restart at any moment); once the grace period
has passed since then, the runtime's records and Lease are deleted; a Kyma CR that comes
back clears the mark (``orphan_actions``).
"""

from __future__ import annotations

import datetime
from collections.abc import Iterable, Mapping
from typing import Any, Literal, NamedTuple

ORPHANED_SINCE = "tether.kyma-project.io/orphaned-since"
MAX_ALLOWANCE = 600.0

OrphanStep = Literal["mark", "unmark", "wait", "delete"]


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


def tombstone_due(meta: Mapping[str, Any], now: datetime.datetime, retention: float,
                  deleted_key: str, observed_key: str) -> Tombstone | None:
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
    name, rv, uid = meta.get("name"), meta.get("resourceVersion"), meta.get("uid")
    if not (isinstance(name, str) and isinstance(rv, str) and isinstance(uid, str)):
        return None
    return Tombstone(name, rv, uid)


class Orphan(NamedTuple):
    runtime_id: str
    step: OrphanStep
    since: datetime.datetime | None  # first seen orphaned (None: not orphaned)


def orphan_actions(runtimes: Iterable[str], marks: Mapping[str, str | None],
                   with_kyma: set[str], now: datetime.datetime,
                   grace: float) -> list[Orphan]:
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
