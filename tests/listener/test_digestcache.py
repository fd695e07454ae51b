"""State digest snapshots: one KCP read per listing, same pages as without them."""

from __future__ import annotations

from listener.storage import digestcache, records
from tether.wire import changes


def item(ns: str, name: str, rv: str = "1") -> changes.DigestItem:
    return {
        "namespace": ns,
        "name": name,
        "uid": "",
        "resourceVersion": rv,
        "observedAt": "2026-11-30T10:00:00.000000Z",
        "deleted": False,
    }


ITEMS = [item(f"ns-{i % 7}", f"cm-{i:04d}") for i in range(1000)]


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def walk(
    cache: digestcache.DigestSnapshots, rid: str, limit: int, load: object
) -> list[changes.DigestItem]:
    out, after = [], None
    while True:
        chunk, after = cache.page(rid, after, limit, load)  # type: ignore[arg-type]
        out += chunk
        if after is None:
            return out


def test_pages_equal_the_uncached_pages_and_cost_one_load() -> None:
    cache = digestcache.DigestSnapshots(clock=Clock())
    got = walk(cache, "rt", 33, lambda: list(ITEMS))
    expected, after = [], None
    while True:
        chunk, after = records.page(list(ITEMS), after, 33)
        expected += chunk
        if after is None:
            break
    assert got == expected and len(got) == 1000
    assert cache.loads == 1


def test_a_new_listing_reads_afresh() -> None:
    cache = digestcache.DigestSnapshots(clock=Clock())
    walk(cache, "rt", 100, lambda: list(ITEMS))
    got = walk(cache, "rt", 100, lambda: [*ITEMS, item("zz", "new")])
    assert got[-1]["name"] == "new" and cache.loads == 2


def test_an_old_snapshot_is_not_used() -> None:
    clock = Clock()
    cache = digestcache.DigestSnapshots(ttl=60, clock=clock)
    first, after = cache.page("rt", None, 10, lambda: list(ITEMS))
    clock.now = 61
    cache.page("rt", after, 10, lambda: list(ITEMS))
    assert cache.loads == 2


def test_bounded_number_of_runtimes() -> None:
    cache = digestcache.DigestSnapshots(max_runtimes=2, clock=Clock())
    for rid in ("a", "b", "c"):
        cache.page(rid, None, 10, lambda: list(ITEMS))
    _, after = records.page(list(ITEMS), None, 10)
    cache.page("a", after, 10, lambda: list(ITEMS))  # "a" was dropped: reloaded
    assert cache.loads == 4


def test_empty_digest() -> None:
    cache = digestcache.DigestSnapshots(clock=Clock())
    assert cache.page("rt", None, 10, list) == ([], None)
