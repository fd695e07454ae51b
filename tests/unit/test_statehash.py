"""common.statehash with plain data: buckets, XOR commutativity, tombstones, merges."""

from __future__ import annotations

import itertools
import random

from common import statehash


def item(ns: str, name: str, rv: str, deleted: bool = False, epoch: int | None = None) -> dict:
    out: dict = {"namespace": ns, "name": name, "uid": "u", "resourceVersion": rv,
                 "observedAt": "2026-01-01T00:00:00Z", "deleted": deleted}
    if epoch is not None:
        out["epoch"] = epoch
    return out


def test_buckets_spread_keys_evenly() -> None:
    keys = [(f"ns-{i % 37}", f"cm-{i}") for i in range(100_000)]
    spread = statehash.spread(keys)
    mean = len(keys) / statehash.BUCKETS
    assert min(spread) > 0.8 * mean and max(spread) < 1.2 * mean
    assert statehash.bucket_of("a", "bc") != statehash.bucket_of("ab", "c") or \
        statehash.item_hash("a", "bc", "1") != statehash.item_hash("ab", "c", "1")


def test_fold_is_order_independent_and_tombstones_are_absence() -> None:
    items = [item("ns", f"cm-{i}", str(i)) for i in range(500)]
    a = statehash.fold(items)
    shuffled = list(items)
    random.Random(7).shuffle(shuffled)
    assert statehash.fold(shuffled).hashes == a.hashes
    with_tombs = items + [item("ns", f"gone-{i}", "9", deleted=True) for i in range(50)]
    assert statehash.fold(with_tombs).hashes == a.hashes
    assert statehash.fold(with_tombs).counts == a.counts
    # an update changes exactly its bucket
    changed = items[:10] + [item("ns", "cm-10", "1000")] + items[11:]
    b = statehash.fold(changed)
    diff = [i for i in range(statehash.BUCKETS) if a.hashes[i] != b.hashes[i]]
    assert diff == [statehash.bucket_of("ns", "cm-10")]


def test_epoch_zero_agrees_with_no_epoch_and_others_differ() -> None:
    assert statehash.live_item(item("n", "c", "5")) == statehash.live_item(item("n", "c", "5", epoch=0))
    assert statehash.live_item(item("n", "c", "5")) != statehash.live_item(item("n", "c", "5", epoch=1))


def test_changes_commute_and_merge_to_the_listing() -> None:
    """Writes applied as changes in any order give the summary a listing gives."""
    start = [item("ns", f"cm-{i}", "1") for i in range(40)]
    writes = [(item("ns", f"cm-{i}", "1"), item("ns", f"cm-{i}", str(10 + i))) for i in range(0, 40, 3)]
    writes += [(None, item("ns", f"new-{i}", "50")) for i in range(5)]
    writes += [(item("ns", f"cm-{i}", "1"), item("ns", f"cm-{i}", "60", deleted=True))
               for i in range(1, 40, 7) if i % 3]
    final = {(i["namespace"], i["name"]): i for i in start}
    for _, new in writes:
        final[(new["namespace"], new["name"])] = new
    expected = statehash.fold(final.values())
    for order in itertools.islice(itertools.permutations(range(len(writes))), 5):
        s = statehash.Stored.listed(statehash.fold(start), 100)
        pending: dict[int, statehash.Pending] = {}
        for rev, k in enumerate(order):
            old, new = writes[k]
            c = statehash.change_of(old, new, 200 + rev)
            assert c is not None
            pending.setdefault(c.bucket, statehash.Pending()).add(c)
        merged = statehash.merge(s, pending)
        assert merged.hashes == expected.hashes and merged.counts == expected.counts


def test_a_change_the_listing_holds_is_skipped_and_a_straddling_one_marks_the_bucket() -> None:
    old, new = item("ns", "a", "1"), item("ns", "a", "2")
    b = statehash.bucket_of("ns", "a")
    listed = statehash.Stored.listed(statehash.fold([new]), 500)
    c = statehash.change_of(old, new, 400)  # written at 400, listed at 500: included
    assert c is not None
    p = statehash.Pending()
    p.add(c)
    assert statehash.merge(listed, {b: p}) == listed
    p2 = statehash.Pending()
    p2.add(c)
    p2.add(statehash.Change(b, 0, 0, 600))  # one write before, one after the listing
    merged = statehash.merge(listed, {b: p2})
    assert merged.counts[b] == statehash.UNKNOWN
    unsure = statehash.Pending()
    unsure.add(statehash.Change(b, 5, 1, None))
    assert statehash.merge(statehash.Stored.empty(), {b: unsure}).counts[b] == statehash.UNKNOWN


def test_corrected_sets_one_bucket_and_never_goes_back() -> None:
    s = statehash.Stored.empty()
    fixed = statehash.corrected(s, 3, 42, 1, 100)
    assert fixed is not None and fixed.hashes[3] == 42 and fixed.revisions[3] == 100
    assert statehash.corrected(fixed, 3, 7, 1, 90) is None  # an older listing
    assert statehash.corrected(fixed, 3, 42, 1, 120) is None  # agrees


def test_wire_round_trip_and_mismatch() -> None:
    local = statehash.fold([item("ns", f"cm-{i}", "1") for i in range(10)])
    remote = statehash.parse_summary(local.wire())
    assert remote is not None and statehash.mismatching(local, remote) == []
    stored = statehash.stored_of(statehash.status_of(statehash.Stored.listed(local, 9)))
    assert stored is not None
    doc = statehash.wire_of(stored)
    doc["counts"][5] = statehash.UNKNOWN
    remote2 = statehash.parse_summary(doc)
    assert remote2 is not None and statehash.mismatching(local, remote2) == [5]
    assert statehash.parse_summary({"bucketCount": 16}) is None
    assert statehash.parse_summary({**doc, "hashes": ["zz"] * statehash.BUCKETS}) is None
    damaged = statehash.status_of(stored)
    damaged["hashes"][2] = "nothex"
    again = statehash.stored_of(damaged)
    assert again is not None and again.counts[2] == statehash.UNKNOWN
