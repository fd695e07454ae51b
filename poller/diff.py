"""The anti-entropy decision (pure): what the listener's digest lacks or holds stale.

The digest is loaded into a dict ``(namespace, name) -> Entry`` (a few short strings per
key, no data). Each listed ConfigMap is judged against its entry (``judge``) and its key
popped; the entries left once the listing is complete are judged by ``leftover``: a live
entry of an object the runtime no longer shows (deleted, or no longer selected by the
filter) becomes a tombstone whose resourceVersion is the list's collection
resourceVersion (the snapshot's, which is above the object's own).

Both use ``tether.wire.changes.compare`` (epochs first, then resourceVersions as integers where
both parse, else ``observedAt``), so a record the listener already holds as newer (e.g. one
the webhook sent while the poller was scanning) is never resent. The poller's records are
of the epoch the listener answered (``epoch``); after a new epoch started every entry of
an older one is older than anything the poller sends: every listed object is resent and
every live entry it did not list gets a tombstone, so the KCP holds the runtime's state
after that one run. ``high_water`` and ``went_back`` tell that the runtime's history went
back (``tether.wire.changes.went_back``, ``listener.fleet.epochs``).

The digest is foreign input (records stored by older listeners may hold anything): ``load``
never raises. An entry whose resourceVersion or observedAt cannot be interpreted is kept and
compares as older than any real record, so the object is resent (or a tombstone sent) and
the listener replaces it; an entry whose key cannot be a ConfigMap's (not a string, not a
valid namespace or name) is dropped, since nothing the poller could send for it would be
accepted. ``load`` counts both, for the run to report.
"""

from __future__ import annotations

import collections
from collections.abc import Iterable, Mapping
from typing import Any, Literal, NamedTuple

from tether.wire import changes

DiffType = Literal["missing", "changed", "deleted"]
Key = tuple[str, str]  # (namespace, name)


class Entry(NamedTuple):
    """What the listener holds for one key (from ``GET .../state``)."""

    resource_version: str
    observed_at: str
    deleted: bool
    uid: str
    epoch: int = 0

    def version(self) -> changes.Version:
        return changes.Version(self.resource_version, self.observed_at, self.deleted, self.epoch)


Digest = dict[Key, Entry]


def load(
    items: Iterable[object],
    problems: collections.Counter[str] | None = None,
    bad_keys: list[str] | None = None,
) -> Digest:
    """The digest as a dict; a later item for the same key wins (pages never repeat keys).
    Total: ``problems`` counts entries by what could not be interpreted (``key``,
    ``resourceVersion``, ``observedAt``); ``bad_keys`` receives a few of their keys."""
    out: Digest = {}
    for it in items:
        field, key, entry = _entry(it)
        if field is not None:
            if problems is not None:
                problems[field] += 1
            if bad_keys is not None and len(bad_keys) < 5:
                bad_keys.append(key)
        if entry is not None:
            out[entry[0]] = entry[1]
    return out


def _text(item: Mapping[str, Any], name: str) -> str:
    value = item.get(name)
    return value if isinstance(value, str) else ""


def _entry(it: object) -> tuple[str | None, str, tuple[Key, Entry] | None]:
    """(the field that cannot be interpreted or None, the key as text, the entry or None)."""
    if not isinstance(it, Mapping):
        return "key", repr(it)[:80], None
    ns, name = _text(it, "namespace"), _text(it, "name")
    shown = f"{ns!r}/{name!r}"[:160]
    if not (changes.field_ok("namespace", ns) and changes.field_ok("name", name)):
        return "key", shown, None
    entry = Entry(
        _text(it, "resourceVersion"),
        _text(it, "observedAt"),
        it.get("deleted") is True,
        _text(it, "uid"),
        changes.epoch_of(it.get("epoch")),
    )
    return changes.uninterpretable(entry.version()), shown, ((ns, name), entry)


def judge(
    entry: Entry | None, resource_version: str, observed_at: str, epoch: int = 0
) -> DiffType | None:
    """The difference a live object at ``resource_version`` (read in ``epoch``) makes, or
    None when the listener holds it already (duplicate) or holds something newer (stale)."""
    stored = None if entry is None else entry.version()
    verdict = changes.compare(stored, changes.Version(resource_version, observed_at, False, epoch))
    if verdict != "newer":
        return None
    if entry is None or entry.deleted:
        return "missing"
    return "changed"


def resend(entry: Entry | None, resource_version: str, observed_at: str, epoch: int = 0) -> bool:
    """In a full resync: send unless the listener holds a newer record (equal ones too)."""
    stored = None if entry is None else entry.version()
    return (
        changes.compare(stored, changes.Version(resource_version, observed_at, False, epoch))
        != "stale"
    )


def high_water(digest: Digest, epoch: int) -> int | None:
    """The highest resourceVersion (an integer) of the digest's records of ``epoch``."""
    return changes.high_water(((e.resource_version, e.epoch) for e in digest.values()), epoch)


def leftover(entry: Entry, list_rv: str, listed_at: str, epoch: int = 0) -> str | None:
    """For an entry whose object a complete listing (a snapshot at ``list_rv``, started at
    ``listed_at``) did not show: the tombstone's resourceVersion (``list_rv``), or None
    when nothing is to be sent: the entry is a tombstone already, or the listener holds a
    record newer than the snapshot (the object appeared after it), so the listing proves
    nothing about it. Never below the object's own resourceVersion."""
    if entry.deleted or not list_rv:
        return None
    verdict = changes.compare(entry.version(), changes.Version(list_rv, listed_at, True, epoch))
    return list_rv if verdict == "newer" else None


def key_of(obj: Mapping[str, Any]) -> Key:
    meta = obj.get("metadata") or {}
    return (str(meta.get("namespace") or ""), str(meta.get("name") or ""))


def resource_version_of(obj: Mapping[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("resourceVersion") or "")
