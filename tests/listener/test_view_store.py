"""The pod's view as plain data (listener/view): what the kinds keep and answer, their bounds,
the heartbeat's "due" decision and the socket's answers to bad requests. No planes: the
view on the real planes is tests/listener/test_view.py."""

from __future__ import annotations

import datetime
import json
from typing import Any

from listener.storage import records
from listener.view import beats, serve, store
from tether.kube import apitypes
from tether.wire import watches


def kyma(
    name: str, rid: str | None, domain: str = "d.example.com", rv: str = "1"
) -> dict[str, Any]:
    labels = {} if rid is None else {apitypes.RUNTIME_ID_LABEL: rid}
    return {
        "metadata": {
            "name": name,
            "namespace": "kcp",
            "uid": "u-" + name,
            "resourceVersion": rv,
            "labels": labels,
            "annotations": {apitypes.SKR_DOMAIN_ANNOTATION: domain},
        }
    }


def lease(rid: str, rv: str, renew: str) -> dict[str, Any]:
    return {
        "metadata": {
            "name": "tether-rt-" + rid,
            "resourceVersion": rv,
            "labels": {apitypes.RUNTIME_ID_LABEL: rid},
            "annotations": {apitypes.EPOCH_ANNOTATION: "2"},
        },
        "spec": {"renewTime": renew},
    }


def kinds(**bounds: int) -> store.Kind:
    k = store.Kind(
        "kymas", store.kyma_entry, bounds.get("objects", 100), bounds.get("size", 1 << 20)
    )
    return k


def test_not_synced_answers_nothing_then_indexes_by_runtime_id() -> None:
    k = kinds()
    k.replace([kyma("a", "rt-1"), kyma("b", None)])
    assert k.of("rt-1") is None  # listed but not marked synced by its watcher yet
    k.synced = True
    got = k.of("rt-1")
    assert (
        got is not None
        and [v["name"] for v in got] == ["a"]
        and got[0]["domain"] == "d.example.com"
    )
    assert k.of("rt-2") == []  # unknown: an answer (refused), not a fallback


def test_a_deleted_or_relabelled_kyma_cr_leaves_its_runtime() -> None:
    k = kinds()
    k.synced = True
    k.replace([kyma("a", "rt-1"), kyma("b", "rt-2")])
    k.apply("MODIFIED", kyma("a", "rt-9"))
    assert k.of("rt-1") == [] and [v["name"] for v in k.of("rt-9") or []] == ["a"]
    k.apply("DELETED", kyma("b", "rt-2"))
    assert k.of("rt-2") == []
    k.apply("MODIFIED", kyma("a", "rt-9", domain="other.example.com"))
    assert (k.of("rt-9") or [{}])[0]["domain"] == "other.example.com"
    assert k.sizes()[0] == 1


def test_over_its_bounds_a_kind_answers_nothing_until_a_listing_fits() -> None:
    k = kinds(objects=2)
    k.synced = True
    k.replace([kyma(f"k{i}", f"rt-{i}") for i in range(3)])
    assert k.full and k.of("rt-0") is None and k.sizes() == (0, 0)
    k.replace([kyma("k0", "rt-0")])
    assert not k.full and k.of("rt-0")
    small = kinds(size=300)
    small.synced = True
    small.apply("ADDED", kyma("a", "rt-1", domain="x" * 400))
    assert small.full and small.of("rt-1") is None


def test_a_written_lease_is_kept_unless_a_later_one_is_held() -> None:
    k = store.Kind("leases", store.lease_entry, 100, 1 << 20)
    k.synced = True
    k.apply("MODIFIED", lease("rt-1", "20", "2026-01-01T00:00:10.000000Z"))
    k.remember(lease("rt-1", "15", "2026-01-01T00:00:05.000000Z"))  # older than the watch's
    assert (k.of("rt-1") or [{}])[0]["rv"] == "20"
    k.remember(lease("rt-1", "30", "2026-01-01T00:00:30.000000Z"))
    held = (k.of("rt-1") or [{}])[0]
    assert held == {"epoch": 2, "identity": "", "rv": "30", "renew": "2026-01-01T00:00:30.000000Z"}


def test_a_heartbeat_is_due_from_the_renew_time_held() -> None:
    k = store.Kind("leases", store.lease_entry, 100, 1 << 20)
    now = datetime.datetime(2026, 1, 1, 0, 1, 0, tzinfo=datetime.UTC)
    b = beats.Beats(None, "ns", 30.0, 1.0, k, now=lambda: now)  # type: ignore[arg-type]
    assert b.seen("rt-1") is None  # the Leases not in the view: the worker writes itself
    k.synced = True
    k.apply("ADDED", lease("rt-1", "5", "2026-01-01T00:00:45.000000Z"))  # 15 s ago
    assert b.seen("rt-1") == "fresh"
    k.apply("MODIFIED", lease("rt-1", "6", "2026-01-01T00:00:30.000000Z"))  # 30 s ago
    assert b.seen("rt-1") == "queued" and b.seen("rt-1") == "queued"  # one write queued
    assert b._queue.qsize() == 1
    assert b.seen("rt-new") == "queued"  # no Lease yet: created
    assert b.due("") and b.due("not a time")


def test_bad_requests_get_an_error_never_an_exception() -> None:
    k = kinds()
    views = serve.Views(
        k,
        store.Kind("leases", store.lease_entry, 1, 1 << 20),
        store.Kind("summaries", store.summary_entry, 1, 1 << 20),
        beats.Beats(None, "ns", 30.0, 1.0, k),
    )  # type: ignore[arg-type]
    for line in (
        b"{",
        b"[]",
        b'{"op":"kyma"}',
        b'{"op":"kyma","id":"bad id!"}',
        b'{"op":"nope","id":"rt-1"}',
        b'{"op":"kyma","id":"' + b"a" * 64 + b'"}',
    ):
        assert "error" in json.loads(views.answer(line)), line
    assert json.loads(views.answer(b'{"op":"summary","id":"rt-1"}')) == {"synced": False}
    ping = json.loads(views.answer(b'{"op":"ping"}'))
    assert ping["synced"] == {"kymas": False, "leases": False, "summaries": False}


def summary(rid: str) -> dict[str, Any]:
    """A state summary as the KCP lists it: five arrays of 256 values (~1,300 Python objects)."""
    return {
        "metadata": {
            "name": "tether-rt-" + rid,
            "resourceVersion": "7",
            "managedFields": [{"manager": "listener", "fieldsV1": {"f:status": {}}}],
        },
        "spec": {"runtimeId": rid},
        "status": {
            "runtimeId": rid,
            "hashes": [f"{i:016x}" for i in range(256)],
            "counts": list(range(256)),
            "records": list(range(256)),
            "bytes": [i * 1000 for i in range(256)],
            "revisions": list(range(256)),
        },
    }


def test_a_listing_holds_one_page_of_parsed_objects_not_the_whole_listing() -> None:
    """A relist of 5,000 state summaries once held every page's parsed objects until the
    listing ended (~300 MiB in the view process, within a 768 MiB pod); the entries are now
    made page by page, so the parsed objects of one page at most are alive at once."""
    import gc
    import tracemalloc

    pages, per_page = 20, 50

    def page(n: int) -> list[dict[str, Any]]:
        return [summary(f"rt-{n}-{i}") for i in range(per_page)]

    k = store.Kind("summaries", store.summary_entry, 10_000, 1 << 30)
    gc.collect()
    tracemalloc.start()
    try:
        one = page(0)
        one_page = tracemalloc.get_traced_memory()[0]
        del one
        tracemalloc.reset_peak()
        base = tracemalloc.get_traced_memory()[0]
        listing = store.Listing(k)
        for n in range(pages):
            listing.add(page(n))  # the page is garbage once added, as the watcher's is
        listing.done()
        peak = tracemalloc.get_traced_memory()[1] - base
        kept = tracemalloc.get_traced_memory()[0] - base
    finally:
        tracemalloc.stop()
    assert k.sizes()[0] == pages * per_page
    # the whole listing parsed at once would be ~pages x one page; held: entries + ~one page
    assert peak < kept + 3 * one_page, (peak, kept, one_page)
    assert peak < pages * one_page / 3, (peak, pages * one_page)


def test_a_listing_over_the_bound_keeps_the_kind_full_and_empty() -> None:
    k = store.Kind("summaries", store.summary_entry, 10, 1 << 30)
    k.synced = True
    listing = store.Listing(k)
    listing.add([summary(f"rt-{i}") for i in range(8)])
    listing.add([summary(f"rt-x{i}") for i in range(8)])
    listing.done()
    assert k.full and k.sizes() == (0, 0) and k.of("rt-1") is None
    k.replace([summary("rt-1")])  # a listing that fits answers again
    assert not k.full and k.of("rt-1") is not None


def stored(
    ns: str, name: str, rid: str, watch: str | None, key: str, **more: str
) -> dict[str, Any]:
    """A stored record's metadata as the view's metadata-only watch brings it."""
    labels = {apitypes.RUNTIME_ID_LABEL: rid, **more}
    if watch is not None:
        labels[watches.WATCH_LABEL] = watch
    ann = {
        records.ANN_NAMESPACE: "team-a",
        records.ANN_NAME: key,
        records.ANN_UID: "u-" + key,
        records.ANN_RV: "12",
        records.ANN_OBSERVED: "2026-12-01T00:00:00.000000Z",
        records.ANN_DELETED: "false",
    }
    return {"metadata": {"namespace": ns, "name": name, "labels": labels, "annotations": ann}}


def test_records_are_held_by_runtime_and_watch_and_answered_only_from_their_namespace() -> None:
    recs = store.Kind("records", store.record_entry, 10, 1 << 20, key=store.namespaced)
    k = kinds()
    views = serve.Views(
        k,
        store.Kind("leases", store.lease_entry, 1, 1 << 20),
        store.Kind("summaries", store.summary_entry, 1, 1 << 20),
        beats.Beats(None, "ns", 30.0, 1.0, k),  # type: ignore[arg-type]
        records=recs,
    )
    ask = b'{"op":"records","id":"rt-1","watch":"w","ns":"home"}'
    assert json.loads(views.answer(ask)) == {"synced": False}
    recs.replace(
        [
            stored("home", "same-name", "rt-1", "w", "a"),
            stored("elsewhere", "same-name", "rt-1", "w", "b"),  # copied outside: not answered
            stored("home", "x2", "rt-2", "w", "c"),  # another runtime
            stored("home", "x3", "rt-1", "other", "d"),  # another Watch
            stored("home", "x4", "rt-1", None, "e"),  # a legacy record: held nowhere
        ]
    )
    recs.synced = True
    got = json.loads(views.answer(ask))
    assert got == {
        "synced": True,
        "items": [["team-a", "a", "u-a", "12", "2026-12-01T00:00:00.000000Z", False, 0]],
    }
    assert recs.sizes()[0] == 4
    recs.apply("DELETED", stored("home", "same-name", "rt-1", "w", "a"))
    assert json.loads(views.answer(ask))["items"] == []
    for bad in (b'"watch":"bad watch!","ns":"home"', b'"watch":"w","ns":""', b'"watch":"w"'):
        assert "error" in json.loads(views.answer(b'{"op":"records","id":"rt-1",' + bad + b"}"))
