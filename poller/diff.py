"""The anti-entropy decision (pure): what the listener's digest lacks or holds stale.

The digest is loaded into a dict ``(namespace, name) -> Entry`` (a few short strings per
key, no data). Each listed ConfigMap is judged against its entry (``judge``) and its key
popped; the entries left once the listing is complete are judged by ``leftover``: a live
entry of an object the runtime no longer shows (deleted, or no longer selected by the
filter) becomes a tombstone whose resourceVersion is the list's collection
resourceVersion (the snapshot's, which is above the object's own).

Both use ``common.changes.compare`` (resourceVersions as integers where both parse, else
``observedAt``), so a record the listener already holds as newer (e.g. one the webhook
sent while the poller was scanning) is never resent.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Literal, NamedTuple

from common import changes, sender

DiffType = Literal["missing", "changed", "deleted"]
Key = tuple[str, str]  # (namespace, name)


class Entry(NamedTuple):
    """What the listener holds for one key (from ``GET .../state``)."""

    resource_version: str
    observed_at: str
    deleted: bool
    uid: str

    def version(self) -> changes.Version:
        return changes.Version(self.resource_version, self.observed_at, self.deleted)


Digest = dict[Key, Entry]


def load(items: Iterable[sender.StateItem]) -> Digest:
    """The digest as a dict; a later item for the same key wins (pages never repeat keys)."""
    out: Digest = {}
    for it in items:
        out[(it["namespace"], it["name"])] = Entry(
            str(it["resourceVersion"]), str(it["observedAt"]), bool(it["deleted"]),
            str(it.get("uid") or ""))
    return out


def judge(entry: Entry | None, resource_version: str, observed_at: str) -> DiffType | None:
    """The difference a live object at ``resource_version`` makes, or None when the
    listener holds it already (duplicate) or holds something newer (stale)."""
    stored = None if entry is None else entry.version()
    verdict = changes.compare(stored, changes.Version(resource_version, observed_at, False))
    if verdict != "newer":
        return None
    if entry is None or entry.deleted:
        return "missing"
    return "changed"


def resend(entry: Entry | None, resource_version: str, observed_at: str) -> bool:
    """In a full resync: send unless the listener holds a newer record (equal ones too)."""
    stored = None if entry is None else entry.version()
    return changes.compare(stored, changes.Version(resource_version, observed_at, False)) != "stale"


def leftover(entry: Entry, list_rv: str, listed_at: str) -> str | None:
    """For an entry whose object a complete listing (a snapshot at ``list_rv``, started at
    ``listed_at``) did not show: the tombstone's resourceVersion (``list_rv``), or None
    when nothing is to be sent: the entry is a tombstone already, or the listener holds a
    record newer than the snapshot (the object appeared after it), so the listing proves
    nothing about it. Never below the object's own resourceVersion."""
    if entry.deleted or not list_rv:
        return None
    verdict = changes.compare(entry.version(), changes.Version(list_rv, listed_at, True))
    return list_rv if verdict == "newer" else None


def key_of(obj: Mapping[str, Any]) -> Key:
    meta = obj.get("metadata") or {}
    return (str(meta.get("namespace") or ""), str(meta.get("name") or ""))


def resource_version_of(obj: Mapping[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("resourceVersion") or "")
