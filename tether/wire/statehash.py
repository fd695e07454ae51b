"""The state summary of a runtime: a hash per bucket of keys (pure, plain data; protocol).

Poller and listener compute the same thing from two sides, the poller from the ConfigMaps
it lists, the listener from the records it stores, and compare per bucket; only the
buckets whose hashes differ are listed and compared key by key (docs/architecture.md,
"Anti-entropy by buckets")::

    bucket(namespace, name)
                            = first 4 bytes of SHA-256(namespace "\\0" name), big-endian,
                              mod BUCKETS
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

The listener's stored summary also keeps each bucket's footprint, the objects it stores
(tombstones included) and the sum of their size annotations (``Footprint``, ``Change.records``
and ``Change.bytes``): the storage quota's measure, kept and corrected with the hashes. It is
not on the wire to the poller.
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
    """A digest item's (``tether.wire.changes.DigestItem``, an ``epoch`` when present) place in
    the summary; None for a tombstone or an item without a usable key."""
    ns, name = item.get("namespace"), item.get("name")
    if not isinstance(ns, str) or not isinstance(name, str) or item.get("deleted") is True:
        return None
    rv = item.get("resourceVersion")
    return Item(
        bucket_of(ns, name),
        item_hash(ns, name, rv if isinstance(rv, str) else "", item.get("epoch", 0)),
    )


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
        return {
            "bucketCount": BUCKETS,
            "hashes": [hex16(h) for h in self.hashes],
            "counts": list(self.counts),
        }


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
    return [
        b
        for b in range(BUCKETS)
        if local.hashes[b] != remote.hashes[b] or local.counts[b] != remote.counts[b]
    ]


# -- changes of the stored summary (the listener) ---------------------------------------------


class Change(NamedTuple):
    """What one write did to its bucket: XOR ``hash`` in, add ``live``; ``revision`` is
    the KCP resourceVersion of the write (None when unknown). ``records`` and ``bytes``
    are what it changed in the bucket's footprint (objects stored, tombstones included,
    and the sum of their size annotations: the storage quota's measure)."""

    bucket: int
    hash: int
    live: int  # live records added (-1, 0 or 1)
    revision: int | None
    records: int = 0  # objects added (-1, 0 or 1)
    bytes: int = 0


def change_of(
    old: Mapping[str, Any] | None,
    new: Mapping[str, Any],
    revision: int | None,
    old_size: int = 0,
    new_size: int = 0,
) -> Change | None:
    """The change a write from digest item ``old`` (None: no record) to ``new`` makes
    (``old_size``/``new_size``: the objects' size annotations); None when it changes
    nothing of its bucket."""
    o = None if old is None else live_item(old)
    n = live_item(new)
    ns, name = new.get("namespace"), new.get("name")
    bucket = (
        n.bucket
        if n is not None
        else (o.bucket if o is not None else bucket_of(str(ns), str(name)))
    )
    h = (0 if o is None else o.hash) ^ (0 if n is None else n.hash)
    count = (n is not None) - (o is not None)
    records = 1 if old is None else 0
    grown = new_size - (0 if old is None else old_size)
    if h == 0 and count == 0 and records == 0 and grown == 0:
        return None
    return Change(bucket, h, count, revision, records, grown)


def removal_of(item: Mapping[str, Any], size: int) -> Change:
    """The change of deleting a stored object (the janitor's pruning of a tombstone), at
    an unknown revision: its bucket is listed again before it is trusted."""
    ns, name = str(item.get("namespace")), str(item.get("name"))
    live = live_item(item)
    return Change(
        bucket_of(ns, name),
        0 if live is None else live.hash,
        0 if live is None else -1,
        None,
        -1,
        -size,
    )


class Pending:
    """The changes of one bucket not yet merged: XOR and counts summed, and the range of
    KCP revisions of the writes (``uncertain`` when one write's revision was unknown)."""

    __slots__ = ("bytes", "count", "hash", "max_rev", "min_rev", "records", "uncertain")

    def __init__(self) -> None:
        self.hash = self.count = self.records = self.bytes = 0
        self.min_rev: int | None = None
        self.max_rev: int | None = None
        self.uncertain = False

    def add(self, c: Change) -> None:
        self.hash ^= c.hash
        self.count += c.live
        self.records += c.records
        self.bytes += c.bytes
        if c.revision is None:
            self.uncertain = True
            return
        self.min_rev = c.revision if self.min_rev is None else min(self.min_rev, c.revision)
        self.max_rev = c.revision if self.max_rev is None else max(self.max_rev, c.revision)

    def combine(self, other: Pending) -> None:
        self.hash ^= other.hash
        self.count += other.count
        self.records += other.records
        self.bytes += other.bytes
        self.uncertain |= other.uncertain
        for r in (other.min_rev, other.max_rev):
            if r is not None:
                self.add(Change(0, 0, 0, r))


class Footprint:
    """Objects (tombstones included) and bytes per bucket, built one object at a time."""

    __slots__ = ("bytes", "records")

    def __init__(self) -> None:
        self.records = [0] * BUCKETS
        self.bytes = [0] * BUCKETS

    def add(self, bucket: int, size: int) -> None:
        self.records[bucket] += 1
        self.bytes[bucket] += size


class Stored(NamedTuple):
    """A stored summary: per bucket its hash, count (``UNKNOWN`` possible), the KCP
    revision of the listing that last set it (0: never listed), and its footprint
    (``records``: objects, ``UNKNOWN`` possible; ``bytes``)."""

    hashes: list[int]
    counts: list[int]
    revisions: list[int]
    records: list[int]
    bytes: list[int]

    @staticmethod
    def empty() -> Stored:
        return Stored([0] * BUCKETS, [0] * BUCKETS, [0] * BUCKETS, [0] * BUCKETS, [0] * BUCKETS)

    @staticmethod
    def listed(b: Buckets, revision: int, footprint: Footprint | None = None) -> Stored:
        f = footprint or Footprint()
        return Stored(
            list(b.hashes), list(b.counts), [revision] * BUCKETS, list(f.records), list(f.bytes)
        )


def _int(v: object, default: int) -> int:
    return v if isinstance(v, int) and not isinstance(v, bool) else default


def _ints(raw: object) -> list[object] | None:
    return raw if isinstance(raw, list) and len(raw) == BUCKETS else None


def stored_of(status: object) -> Stored | None:
    """The summary a ``RuntimeStateSummary`` status holds; None when it holds none usable
    (absent, another bucket count, damaged lists, or written before footprints): the
    listener then rebuilds it."""
    if not isinstance(status, Mapping) or status.get("bucketCount") != BUCKETS:
        return None
    raw_h, raw_c, raw_r = (_ints(status.get(k)) for k in ("hashes", "counts", "revisions"))
    raw_n, raw_b = _ints(status.get("records")), _ints(status.get("bytes"))
    if raw_h is None or raw_c is None or raw_r is None or raw_n is None or raw_b is None:
        return None
    hashes = [parse_hex(h) for h in raw_h]
    counts = [_int(c, UNKNOWN) for c in raw_c]
    records = [_int(n, UNKNOWN) for n in raw_n]
    size = [_int(b, 0) for b in raw_b]
    # a damaged hash makes its bucket unknown (listed and corrected at the next run)
    for i, h in enumerate(hashes):
        if h is None:
            counts[i] = UNKNOWN
    for i, b in enumerate(raw_b):
        if _int(b, UNKNOWN) == UNKNOWN or size[i] < 0:
            records[i] = UNKNOWN
    revs = [
        _int(r, 0) if not isinstance(r, str) else (int(r) if r.isdigit() and r.isascii() else 0)
        for r in raw_r
    ]
    return Stored([0 if h is None else h for h in hashes], counts, revs, records, size)


def status_of(s: Stored) -> dict[str, Any]:
    return {
        "bucketCount": BUCKETS,
        "hashes": [hex16(h) for h in s.hashes],
        "counts": list(s.counts),
        "revisions": [str(r) for r in s.revisions],
        "records": list(s.records),
        "bytes": list(s.bytes),
    }


def footprint_of(s: Stored) -> tuple[int, int] | None:
    """(objects, bytes) the summary says the runtime stores; None while a bucket's
    footprint is unknown (the storage quota then counts from a listing)."""
    if any(n < 0 for n in s.records):
        return None
    return sum(s.records), sum(s.bytes)


def merge(s: Stored, pending: Mapping[int, Pending]) -> Stored:
    """``s`` with pending changes merged. A bucket listed at revision R already holds every
    write at or below R: a pending change whose writes are all at or below R is skipped,
    one whose writes are all above is applied; one that straddles R (or whose revisions are
    unknown) is applied and the bucket marked ``UNKNOWN`` (count and footprint), so the
    next run lists it."""
    hashes, counts, revs = list(s.hashes), list(s.counts), list(s.revisions)
    records, size = list(s.records), list(s.bytes)
    for b, p in pending.items():
        listed_at = revs[b]
        if not p.uncertain and p.max_rev is not None and p.max_rev <= listed_at:
            continue
        hashes[b] ^= p.hash
        if counts[b] != UNKNOWN:
            counts[b] += p.count
        if records[b] != UNKNOWN:
            records[b] += p.records
            size[b] += p.bytes
        if p.uncertain or p.min_rev is None or p.min_rev <= listed_at or counts[b] < 0:
            counts[b] = UNKNOWN
        if counts[b] == UNKNOWN or records[b] < 0 or size[b] < 0:
            records[b], size[b] = UNKNOWN, max(size[b], 0)
    return Stored(hashes, counts, revs, records, size)


def corrected(
    s: Stored, bucket: int, hash_: int, count: int, revision: int, records: int = 0, size: int = 0
) -> Stored | None:
    """``s`` with one bucket set from a listing at ``revision`` (its hash, live count,
    objects and bytes); None when nothing changes (it agrees, or a newer listing set it
    already)."""
    if s.revisions[bucket] > revision:
        return None
    if (s.hashes[bucket], s.counts[bucket], s.records[bucket], s.bytes[bucket]) == (
        hash_,
        count,
        records,
        size,
    ):
        return None  # agrees: no write just to move the revision
    hashes, counts, revs = list(s.hashes), list(s.counts), list(s.revisions)
    recs, sizes = list(s.records), list(s.bytes)
    hashes[bucket], counts[bucket], revs[bucket] = hash_, count, revision
    recs[bucket], sizes[bucket] = records, size
    return Stored(hashes, counts, revs, recs, sizes)


def wire_of(s: Stored) -> dict[str, Any]:
    """The summary answer of ``GET .../state/summary``."""
    return {
        "bucketCount": BUCKETS,
        "hashes": [hex16(h) for h in s.hashes],
        "counts": list(s.counts),
    }


def spread(keys: Sequence[tuple[str, str]]) -> list[int]:
    """How many of ``keys`` fall into each bucket (for tests and sizing)."""
    out = [0] * BUCKETS
    for ns, name in keys:
        out[bucket_of(ns, name)] += 1
    return out
