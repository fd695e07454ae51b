"""tether.wire.statehash with plain data: buckets, XOR commutativity, tombstones, merges."""

from __future__ import annotations

import itertools
import random

from tether.wire import statehash


def item(ns: str, name: str, rv: str, deleted: bool = False, epoch: int | None = None) -> dict:
    out: dict = {
        "namespace": ns,
        "name": name,
        "uid": "u",
        "resourceVersion": rv,
        "observedAt": "2026-01-01T00:00:00Z",
        "deleted": deleted,
    }
    if epoch is not None:
        out["epoch"] = epoch
    return out


def test_buckets_spread_keys_evenly() -> None:
    keys = [(f"ns-{i % 37}", f"cm-{i}") for i in range(100_000)]
    spread = statehash.spread(keys)
    mean = len(keys) / statehash.BUCKETS
    assert min(spread) > 0.8 * mean and max(spread) < 1.2 * mean
    assert statehash.bucket_of("a", "bc") != statehash.bucket_of("ab", "c") or statehash.item_hash(
        "a", "bc", "1"
    ) != statehash.item_hash("ab", "c", "1")


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
    assert statehash.live_item(item("n", "c", "5")) == statehash.live_item(
        item("n", "c", "5", epoch=0)
    )
    assert statehash.live_item(item("n", "c", "5")) != statehash.live_item(
        item("n", "c", "5", epoch=1)
    )


def test_changes_commute_and_merge_to_the_listing() -> None:
    """Writes applied as changes in any order give the summary a listing gives."""
    start = [item("ns", f"cm-{i}", "1") for i in range(40)]
    writes = [
        (item("ns", f"cm-{i}", "1"), item("ns", f"cm-{i}", str(10 + i))) for i in range(0, 40, 3)
    ]
    writes += [(None, item("ns", f"new-{i}", "50")) for i in range(5)]
    writes += [
        (item("ns", f"cm-{i}", "1"), item("ns", f"cm-{i}", "60", deleted=True))
        for i in range(1, 40, 7)
        if i % 3
    ]
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


# -- footprints (the storage quota's count) ----------------------------------------------------


def footprint_of_items(items: list[tuple[dict, int]]) -> statehash.Footprint:
    f = statehash.Footprint()
    for it, size in items:
        f.add(statehash.bucket_of(it["namespace"], it["name"]), size)
    return f


def test_footprint_changes_commute_and_merge_to_the_listings_footprint() -> None:
    """Creates, updates, deletions (tombstones stay objects) and prunings (objects leave),
    merged in any order, give the footprint a listing of the final objects gives."""
    start = [(item("ns", f"cm-{i}", "1"), 100 + i) for i in range(30)]
    writes: list[tuple[dict | None, int, dict, int]] = []
    writes += [
        (start[i][0], start[i][1], item("ns", f"cm-{i}", "20"), 500) for i in range(0, 30, 4)
    ]
    writes += [(None, 0, item("ns", f"new-{i}", "30"), 70) for i in range(6)]
    writes += [
        (start[i][0], start[i][1], item("ns", f"cm-{i}", "40", deleted=True), 60) for i in (1, 5, 9)
    ]
    final = {(i["namespace"], i["name"]): (i, size) for i, size in start}
    for _, _, new, size in writes:
        final[(new["namespace"], new["name"])] = (new, size)
    pruned = [final.pop(("ns", "cm-5"))]  # a tombstone the janitor deleted
    want = footprint_of_items(list(final.values()))
    for seed in range(4):
        order = list(range(len(writes)))
        random.Random(seed).shuffle(order)
        s = statehash.Stored.listed(
            statehash.fold(i for i, _ in start), 100, footprint_of_items(start)
        )
        pending: dict[int, statehash.Pending] = {}
        for rev, k in enumerate(order):
            old, old_size, new, size = writes[k]
            c = statehash.change_of(old, new, 200 + rev, old_size, size)
            assert c is not None
            pending.setdefault(c.bucket, statehash.Pending()).add(c)
        merged = statehash.merge(s, pending)
        assert merged.records != want.records  # the pruning is not in yet
        gone = statehash.removal_of(*pruned[0])
        assert (gone.records, gone.bytes, gone.live, gone.revision) == (-1, -60, 0, None)
        p = statehash.Pending()
        p.add(gone)
        after = statehash.merge(merged, {gone.bucket: p})
        # at an unknown revision: its bucket's footprint is unknown until listed
        assert after.records[gone.bucket] == statehash.UNKNOWN
        assert statehash.footprint_of(after) is None
        listed = [
            (i, sz)
            for i, sz in final.values()
            if statehash.bucket_of(i["namespace"], i["name"]) == gone.bucket
        ]
        h, n = statehash.bucket_hash(i for i, _ in listed)
        fixed = statehash.corrected(
            after, gone.bucket, h, n, 10_000, len(listed), sum(sz for _, sz in listed)
        )
        assert fixed is not None
        assert fixed.records == want.records and fixed.bytes == want.bytes
        assert statehash.footprint_of(fixed) == (len(final), sum(sz for _, sz in final.values()))


def test_a_write_that_changes_only_the_size_is_a_change_and_one_that_changes_nothing_is_not() -> (
    None
):
    tomb_a, tomb_b = item("ns", "t", "5", deleted=True), item("ns", "t", "6", deleted=True)
    c = statehash.change_of(tomb_a, tomb_b, 10, 300, 320)  # a tombstone rewritten, larger
    assert c is not None and (c.hash, c.live, c.records, c.bytes) == (0, 0, 0, 20)
    assert statehash.change_of(tomb_a, tomb_b, 10, 300, 300) is None
    created = statehash.change_of(None, tomb_a, 10, 0, 300)  # a new key's first record: a tombstone
    assert created is not None and (created.live, created.records, created.bytes) == (0, 1, 300)


def test_a_straddling_change_makes_the_footprint_unknown_and_summaries_without_one_are_rebuilt() -> (  # noqa: E501
    None
):
    old, new = item("ns", "a", "1"), item("ns", "a", "2")
    b = statehash.bucket_of("ns", "a")
    listed = statehash.Stored.listed(statehash.fold([new]), 500, footprint_of_items([(new, 10)]))
    assert statehash.footprint_of(listed) == (1, 10)
    p = statehash.Pending()
    c = statehash.change_of(old, new, 400, 10, 10)
    assert c is not None
    p.add(c)
    p.add(statehash.Change(b, 0, 0, 600, 0, 5))
    merged = statehash.merge(listed, {b: p})
    assert merged.records[b] == statehash.UNKNOWN and statehash.footprint_of(merged) is None
    # a status written before footprints (no records/bytes): not usable, rebuilt
    status = statehash.status_of(listed)
    assert statehash.stored_of(status) == listed
    for key in ("records", "bytes"):
        older = {k: v for k, v in status.items() if k != key}
        assert statehash.stored_of(older) is None
    damaged = dict(status, bytes=["x"] * statehash.BUCKETS)
    again = statehash.stored_of(damaged)
    assert again is not None and statehash.footprint_of(again) is None
