"""The state summary of a runtime: a hash per bucket of keys (pure, plain data; protocol).

Poller and listener compute the same thing from two sides, the poller from the ConfigMaps
it lists, the listener from the records it stores, and compare per bucket; only the
buckets whose hashes differ are listed and compared key by key (docs/architecture.md,
"Anti-entropy by buckets")::

    bucket(namespace, name) = first 4 bytes of SHA-256(namespace "\\0" name), big-endian, mod BUCKETS
    item(namespace, name, resourceVersion, epoch)
                            = first 8 bytes of SHA-256(namespace "\\0" name "\\0" rv "\\0" epoch)
    bucket hash             = XOR of the items of the bucket's live objects; count = how many

``BUCKETS`` is part of the protocol (the listener says it in every summary; a poller that
does not agree uses the full digest). A tombstone counts as absence: a key deleted in the
runtime and a key whose record is a tombstone hash alike. XOR makes updates commutative
and local: a write of a record changes its bucket by ``item(old) ^ item(new)``, whatever
the order in which several writers' changes are merged. Each hash is a 64-bit integer on
the wire as 16 lower-case hex digits. ``epoch`` (restore-safe ordering) is 0 until records
carry one; it is hashed as its decimal text, so 0 and "0" agree.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, NamedTuple

BUCKETS = 256
UNKNOWN = -1  # a bucket count no listing can have: the bucket must be listed and recomputed
_MASK = (1 << 64) - 1


def bucket_of(namespace: str, name: str) -> int:
    digest = hashlib.sha256(f"{namespace}\x00{name}".encode()).digest()
    return int.from_bytes(digest[:4], "big") % BUCKETS


def item_hash(namespace: str, name: str, resource_version: str, epoch: object = 0) -> int:
    text = f"{namespace}\x00{name}\x00{resource_version}\x00{epoch}"
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "big")


def hex16(value: int) -> str:
    return f"{value & _MASK:016x}"


def parse_hex(text: object) -> int | None:
    """A hash as the wire carries it; None for anything else."""
    if not isinstance(text, str) or len(text) != 16:
        return None
    try:
        return int(text, 16)
    except ValueError:
        return None


class Item(NamedTuple):
    """A live object's place in the summary."""

    bucket: int
    hash: int


def live_item(item: Mapping[str, Any]) -> Item | None:
    """A digest item's (``common.changes.DigestItem``, an ``epoch`` when present) place in
    the summary; None for a tombstone or an item without a usable key."""
    ns, name = item.get("namespace"), item.get("name")
    if not isinstance(ns, str) or not isinstance(name, str) or item.get("deleted") is True:
        return None
    rv = item.get("resourceVersion")
    return Item(bucket_of(ns, name),
                item_hash(ns, name, rv if isinstance(rv, str) else "", item.get("epoch", 0)))


class Buckets:
    """Hashes and counts of all buckets, built one item at a time (memory: 2 x BUCKETS ints)."""

    __slots__ = ("counts", "hashes")

    def __init__(self) -> None:
        self.hashes = [0] * BUCKETS
        self.counts = [0] * BUCKETS

    def add(self, item: Item) -> None:
        self.hashes[item.bucket] ^= item.hash
        self.counts[item.bucket] += 1

    def add_live(self, namespace: str, name: str, resource_version: str, epoch: object = 0) -> int:
        """Add a live object; its bucket."""
        b = bucket_of(namespace, name)
        self.add(Item(b, item_hash(namespace, name, resource_version, epoch)))
        return b

    def wire(self) -> dict[str, Any]:
        return {"bucketCount": BUCKETS, "hashes": [hex16(h) for h in self.hashes],
                "counts": list(self.counts)}


def fold(items: Iterable[Mapping[str, Any]]) -> Buckets:
    """The summary of some digest items (tombstones count as absent)."""
    out = Buckets()
    for it in items:
        live = live_item(it)
        if live is not None:
            out.add(live)
    return out


def bucket_hash(items: Iterable[Mapping[str, Any]]) -> tuple[int, int]:
    """(hash, count) of one bucket's digest items."""
    h = n = 0
    for it in items:
        live = live_item(it)
        if live is not None:
            h ^= live.hash
            n += 1
    return h, n


class Remote(NamedTuple):
    """A summary as the listener answers it; ``counts`` may hold ``UNKNOWN``."""

    hashes: list[int]
    counts: list[int]


def parse_summary(doc: object) -> Remote | None:
    """The listener's summary answer; None when it is not one of this protocol (another
    bucket count, a malformed list): the caller then uses the full digest."""
    if not isinstance(doc, Mapping) or doc.get("bucketCount") != BUCKETS:
        return None
    raw_h, raw_c = doc.get("hashes"), doc.get("counts")
    if not isinstance(raw_h, list) or not isinstance(raw_c, list):
        return None
    if len(raw_h) != BUCKETS or len(raw_c) != BUCKETS:
        return None
    hashes = [parse_hex(h) for h in raw_h]
    counts = [c if isinstance(c, int) and not isinstance(c, bool) else None for c in raw_c]
    if any(h is None for h in hashes) or any(c is None for c in counts):
        return None
    return Remote([h for h in hashes if h is not None], [c for c in counts if c is not None])


def mismatching(local: Buckets, remote: Remote) -> list[int]:
    """The buckets whose hash or count differ (an ``UNKNOWN`` count always differs)."""
    return [b for b in range(BUCKETS)
            if local.hashes[b] != remote.hashes[b] or local.counts[b] != remote.counts[b]]


# -- changes of the stored summary (the listener) ---------------------------------------------


class Change(NamedTuple):
    """What one write did to its bucket: XOR ``hash`` in, add ``live``; ``revision`` is
    the KCP resourceVersion of the write (None when unknown)."""

    bucket: int
    hash: int
    live: int  # live records added (-1, 0 or 1)
    revision: int | None


def change_of(old: Mapping[str, Any] | None, new: Mapping[str, Any],
              revision: int | None) -> Change | None:
    """The change a write from digest item ``old`` (None: no record) to ``new`` makes;
    None when it changes no bucket (e.g. a tombstone replacing a tombstone)."""
    o = None if old is None else live_item(old)
    n = live_item(new)
    if o is None and n is None:
        return None
    ns, name = new.get("namespace"), new.get("name")
    bucket = n.bucket if n is not None else (o.bucket if o is not None else
                                             bucket_of(str(ns), str(name)))
    h = (0 if o is None else o.hash) ^ (0 if n is None else n.hash)
    count = (n is not None) - (o is not None)
    if h == 0 and count == 0:
        return None
    return Change(bucket, h, count, revision)


class Pending:
    """The changes of one bucket not yet merged: XOR and count summed, and the range of
    KCP revisions of the writes (``uncertain`` when one write's revision was unknown)."""

    __slots__ = ("count", "hash", "max_rev", "min_rev", "uncertain")

    def __init__(self) -> None:
        self.hash = self.count = 0
        self.min_rev: int | None = None
        self.max_rev: int | None = None
        self.uncertain = False

    def add(self, c: Change) -> None:
        self.hash ^= c.hash
        self.count += c.live
        if c.revision is None:
            self.uncertain = True
            return
        self.min_rev = c.revision if self.min_rev is None else min(self.min_rev, c.revision)
        self.max_rev = c.revision if self.max_rev is None else max(self.max_rev, c.revision)

    def combine(self, other: Pending) -> None:
        self.hash ^= other.hash
        self.count += other.count
        self.uncertain |= other.uncertain
        for r in (other.min_rev, other.max_rev):
            if r is not None:
                self.add(Change(0, 0, 0, r))


class Stored(NamedTuple):
    """A stored summary: per bucket its hash, count (``UNKNOWN`` possible) and the KCP
    revision of the listing that last set it (0: never listed)."""

    hashes: list[int]
    counts: list[int]
    revisions: list[int]

    @staticmethod
    def empty() -> Stored:
        return Stored([0] * BUCKETS, [0] * BUCKETS, [0] * BUCKETS)

    @staticmethod
    def listed(b: Buckets, revision: int) -> Stored:
        return Stored(list(b.hashes), list(b.counts), [revision] * BUCKETS)


def _int(v: object, default: int) -> int:
    return v if isinstance(v, int) and not isinstance(v, bool) else default


def stored_of(status: object) -> Stored | None:
    """The summary a ``RuntimeStateSummary`` status holds; None when it holds none usable
    (absent, another bucket count, damaged lists): the listener then rebuilds it."""
    if not isinstance(status, Mapping) or status.get("bucketCount") != BUCKETS:
        return None
    raw_h, raw_c, raw_r = status.get("hashes"), status.get("counts"), status.get("revisions")
    if not (isinstance(raw_h, list) and isinstance(raw_c, list) and isinstance(raw_r, list)):
        return None
    if not len(raw_h) == len(raw_c) == len(raw_r) == BUCKETS:
        return None
    hashes = [parse_hex(h) for h in raw_h]
    counts = [_int(c, UNKNOWN) for c in raw_c]
    # a damaged hash makes its bucket unknown (listed and corrected at the next run)
    for i, h in enumerate(hashes):
        if h is None:
            counts[i] = UNKNOWN
    revs = [_int(r, 0) if not isinstance(r, str) else (int(r) if r.isdigit() and r.isascii()
                                                       else 0) for r in raw_r]
    return Stored([0 if h is None else h for h in hashes], counts, revs)


def status_of(s: Stored) -> dict[str, Any]:
    return {"bucketCount": BUCKETS, "hashes": [hex16(h) for h in s.hashes],
            "counts": list(s.counts), "revisions": [str(r) for r in s.revisions]}


def merge(s: Stored, pending: Mapping[int, Pending]) -> Stored:
    """``s`` with pending changes merged. A bucket listed at revision R already holds every
    write at or below R: a pending change whose writes are all at or below R is skipped,
    one whose writes are all above is applied; one that straddles R (or whose revisions are
    unknown) is applied and the bucket marked ``UNKNOWN``, so the next run lists it."""
    hashes, counts, revs = list(s.hashes), list(s.counts), list(s.revisions)
    for b, p in pending.items():
        listed_at = revs[b]
        if not p.uncertain and p.max_rev is not None and p.max_rev <= listed_at:
            continue
        hashes[b] ^= p.hash
        if counts[b] != UNKNOWN:
            counts[b] += p.count
        if p.uncertain or p.min_rev is None or p.min_rev <= listed_at or counts[b] < 0:
            counts[b] = UNKNOWN
    return Stored(hashes, counts, revs)


def corrected(s: Stored, bucket: int, hash_: int, count: int, revision: int) -> Stored | None:
    """``s`` with one bucket set from a listing at ``revision``; None when nothing changes
    (it agrees, or a newer listing set it already)."""
    if s.revisions[bucket] > revision:
        return None
    if (s.hashes[bucket], s.counts[bucket]) == (hash_, count) and s.revisions[bucket] == revision:
        return None
    if (s.hashes[bucket], s.counts[bucket]) == (hash_, count):
        return None  # agrees: no write just to move the revision
    hashes, counts, revs = list(s.hashes), list(s.counts), list(s.revisions)
    hashes[bucket], counts[bucket], revs[bucket] = hash_, count, revision
    return Stored(hashes, counts, revs)


def wire_of(s: Stored) -> dict[str, Any]:
    """The summary answer of ``GET .../state/summary``."""
    return {"bucketCount": BUCKETS, "hashes": [hex16(h) for h in s.hashes],
            "counts": list(s.counts)}


def spread(keys: Sequence[tuple[str, str]]) -> list[int]:
    """How many of ``keys`` fall into each bucket (for tests and sizing)."""
    out = [0] * BUCKETS
    for ns, name in keys:
        out[bucket_of(ns, name)] += 1
    return out
