"""Restore-safe ordering (plain data): the ordering rule with epochs, when the listener
starts a new epoch, the poller's test that history went back, and the wire parts."""

from __future__ import annotations

import urllib.parse
from typing import Any

import pytest

from listener.fleet import epochs, heartbeat
from poller import diff
from tether.kube import apitypes
from tether.runtime import sender
from tether.wire import changes, conversion, listenerapi
from webhook import forwarder

T0, T1 = "2026-11-30T10:00:00.000000Z", "2026-11-30T10:00:01.000000Z"


def v(rv: str, epoch: int = 0, ts: str = T0, deleted: bool = False) -> changes.Version:
    return changes.Version(rv, ts, deleted, epoch)


@pytest.mark.parametrize(
    ("stored", "incoming", "verdict"),
    [
        (v("900", 0), v("5", 1), "newer"),  # a new epoch wins whatever the resourceVersions
        (v("5", 1), v("900", 0), "stale"),  # an older epoch loses
        (v("5", 1), v("5", 1), "duplicate"),
        (v("5", 1), v("6", 1), "newer"),  # same epoch: today's rule
        (v("6", 1), v("5", 1, T1), "stale"),  # an older read never overwrites a newer one
        (v("5", 1), v("5", 1, deleted=True), "newer"),
        (v("5", 1, deleted=True), v("5", 1), "stale"),
        (v("²", 0), v("1", 0), "newer"),  # uninterpretable stored: replaced in its epoch
        (v("²", 2), v("1", 1), "stale"),  # ... but a higher stored epoch still wins
        (v("1", 0), v("²", 5), "stale"),  # uninterpretable incoming never wins
        (v("a", 3), v("b", 3, T1), "newer"),  # same epoch, not integers: observedAt
    ],
)
def test_compare_orders_by_epoch_then_resource_version(
    stored: changes.Version, incoming: changes.Version, verdict: str
) -> None:
    assert changes.compare(stored, incoming) == verdict


def test_a_record_without_an_epoch_is_of_epoch_0() -> None:
    rec = {"resourceVersion": "7", "observedAt": T0, "deleted": False}
    assert changes.version_of(rec).epoch == 0
    assert changes.version_of({**rec, "epoch": 3}).epoch == 3


@pytest.mark.parametrize(
    ("value", "epoch"),
    [
        (None, 0),
        (2, 2),
        ("2", 2),
        (2.0, 2),
        (True, 0),
        (-1, 0),
        ("-1", 0),
        ("٣", 0),
        (2**53, 0),
        ("9" * 17, 0),
        (2.5, 0),
        ({}, 0),
    ],
)
def test_epoch_of_is_total(value: object, epoch: int) -> None:
    assert changes.epoch_of(value) == epoch


def test_the_schema_takes_an_optional_epoch() -> None:
    rec = conversion.from_configmap(
        {"metadata": {"namespace": "a", "name": "b", "uid": "u", "resourceVersion": "1"}},
        runtime_id="rt",
        source="poller",
        observed_at=T0,
    )
    assert "epoch" not in rec and changes.validate_record(rec) == []
    assert changes.validate_record({**rec, "epoch": 4}) == []
    for bad in (-1, "1", 1.5, True, 2**53):
        assert changes.validate_record({**rec, "epoch": bad}), bad


S = epochs.State(epoch=2, identity="uid-a", lease_version="77")


@pytest.mark.parametrize(
    ("state", "report", "mark", "decision"),
    [
        (S, epochs.Report(), 100, None),
        (S, epochs.Report("uid-a"), 100, None),
        (S, epochs.Report("uid-b"), 100, epochs.Decision(3, "uid-b", "identity-changed")),
        (
            epochs.State(0, ""),
            epochs.Report("uid-a"),
            None,
            epochs.Decision(0, "uid-a", "identity-recorded"),
        ),
        # the claim: a listing after this epoch's digest came below its records
        (S, epochs.Report("uid-a", 2, 40), 100, epochs.Decision(3, "uid-a", "history-went-back")),
        (S, epochs.Report("", 2, 40), 100, epochs.Decision(3, "uid-a", "history-went-back")),
        (S, epochs.Report("uid-a", 2, 100), 100, None),  # not below: nothing went back
        (S, epochs.Report("uid-a", 2, 140), 100, None),
        (S, epochs.Report("uid-a", 1, 40), 100, None),  # about an older epoch: answered already
        (S, epochs.Report("uid-a", 2, 40), None, None),  # no records of the epoch: nothing to lose
        (
            epochs.State(0, ""),
            epochs.Report("uid-a", 0, 4),
            9,
            epochs.Decision(1, "uid-a", "history-went-back"),
        ),
    ],
)
def test_decide(
    state: epochs.State, report: epochs.Report, mark: int | None, decision: epochs.Decision | None
) -> None:
    assert epochs.decide(state, report, mark) == decision


def test_report_of_the_query() -> None:
    assert epochs.report_of({}) == epochs.Report()
    assert epochs.report_of({"identity": "u-1"}) == epochs.Report("u-1")
    assert epochs.report_of({"epoch": "3", "collectionResourceVersion": "120"}) == epochs.Report(
        "", 3, 120
    )
    for bad in (
        {"identity": "a b"},
        {"identity": "x" * 129},
        {"epoch": "1"},
        {"collectionResourceVersion": "1"},
        {"epoch": "x", "collectionResourceVersion": "1"},
        {"epoch": "1", "collectionResourceVersion": "²"},
        {"epoch": str(2**53), "collectionResourceVersion": "1"},
    ):
        assert isinstance(epochs.report_of(bad), str), bad


def item(name: str, rv: str, epoch: int | None, deleted: bool = False) -> changes.DigestItem:
    it: changes.DigestItem = {
        "namespace": "ns",
        "name": name,
        "uid": "u-" + name,
        "resourceVersion": rv,
        "observedAt": T0,
        "deleted": deleted,
    }
    if epoch is not None:
        it["epoch"] = epoch
    return it


def test_high_water_is_of_the_epoch_only() -> None:
    items = [item("a", "50", 1), item("b", "900", 0), item("c", "70", 1, True), item("d", "x", 1)]
    assert epochs.high_water(items, 1) == 70
    assert epochs.high_water(items, 0) == 900
    assert epochs.high_water(items, 2) is None
    assert diff.high_water(diff.load(items), 1) == 70
    assert changes.went_back("60", 70) and not changes.went_back("70", 70)
    assert not changes.went_back("", 70) and not changes.went_back("60", None)


def test_after_a_new_epoch_the_diff_resends_everything_and_tombstones_the_rest() -> None:
    digest = diff.load([item("kept", "900", 0), item("gone", "950", 0), item("dead", "5", 0, True)])
    # the runtime, restored, holds "kept" at an older resourceVersion: stale in epoch 0 ...
    assert diff.judge(digest[("ns", "kept")], "400", T1, 0) is None
    # ... changed in epoch 1
    assert diff.judge(digest[("ns", "kept")], "400", T1, 1) == "changed"
    assert diff.judge(digest[("ns", "dead")], "3", T1, 1) == "missing"
    assert diff.resend(digest[("ns", "kept")], "400", T1, 1)
    # a live key the listing did not show: a tombstone at the listing's resourceVersion
    assert diff.leftover(digest[("ns", "gone")], "410", T1, 0) is None
    assert diff.leftover(digest[("ns", "gone")], "410", T1, 1) == "410"
    assert diff.leftover(digest[("ns", "dead")], "410", T1, 1) is None


def test_the_report_goes_with_the_first_page_only() -> None:
    report = listenerapi.EpochReport("uid-1", 2, "120")
    first = urllib.parse.parse_qs(listenerapi.state_path("rt", 10, "", report).split("?")[1])
    assert first == {
        "limit": ["10"],
        "identity": ["uid-1"],
        "epoch": ["2"],
        "collectionResourceVersion": ["120"],
    }
    later = urllib.parse.parse_qs(listenerapi.state_path("rt", 10, "tok", report).split("?")[1])
    assert later == {"limit": ["10"], "continue": ["tok"]}
    only_id = listenerapi.state_path("rt", 10, "", listenerapi.EpochReport("uid-1"))
    assert "epoch" not in only_id and "identity=uid-1" in only_id


def test_answers_carry_the_epoch() -> None:
    out = sender.classify(200, {}, b'{"results": [], "epoch": 3}')
    assert out.epoch == 3
    assert sender.classify(200, {}, b'{"results": []}').epoch is None
    assert sender.classify(200, {}, b'{"results": [], "epoch": true}').epoch is None


def test_the_webhook_sends_again_only_what_an_older_epoch_made_stale() -> None:
    def rec(name: str, epoch: int | None) -> changes.ChangeRecord:
        r = conversion.tombstone(
            runtime_id="rt",
            namespace="ns",
            name=name,
            uid="u",
            resource_version="1",
            source="webhook",
            observed_at=T0,
        )
        if epoch is not None:
            r["epoch"] = epoch
        return r

    recs = [rec("a", 1), rec("b", 2), rec("c", None), rec("d", 1)]
    results = [
        {"outcome": "stale"},
        {"outcome": "stale"},
        {"outcome": "stale"},
        {"outcome": "persisted"},
    ]
    assert [r["name"] for r in forwarder._stale_by_epoch(recs, results, 2)] == ["a"]


# -- the per-worker cache of epochs (listener.fleet.heartbeat.Epochs), fed by heartbeat writes --


class LeaseReads:
    """Stands in for ``Heartbeats``' read of a Lease (the cache's only collaborator here),
    counting the reads; ``on_lease`` is what ``Epochs`` registers."""

    def __init__(self, state: epochs.State) -> None:
        self.state, self.reads = state, 0
        self.on_lease: Any = None

    def epoch_state(self, runtime_id: str) -> epochs.State:
        self.reads += 1
        return self.state


def lease(epoch: int, identity: str = "uid-1", rv: str = "7") -> dict[str, Any]:
    return {
        "metadata": {
            "resourceVersion": rv,
            "annotations": {
                apitypes.EPOCH_ANNOTATION: str(epoch),
                heartbeat.ANN_IDENTITY: identity,
            },
        }
    }


def test_a_heartbeat_write_feeds_the_epoch_cache_so_no_read_follows() -> None:
    now = [0.0]
    reads = LeaseReads(epochs.State(1, "uid-1", "5"))
    cache = heartbeat.Epochs(reads, ttl=10.0, clock=lambda: now[0])  # type: ignore[arg-type]
    reads.on_lease("rt", lease(2))  # the heartbeat's patch returned the Lease
    assert cache.current("rt") == 2 and reads.reads == 0
    assert cache.state("rt") == epochs.State(2, "uid-1", "7")
    # a heartbeat answer older than the cached epoch never takes it back
    reads.on_lease("rt", lease(1))
    assert cache.current("rt") == 2
    # past the TTL without a heartbeat: read again
    now[0] = 11.0
    reads.state = epochs.State(2, "uid-1", "9")
    assert cache.state("rt") == epochs.State(2, "uid-1", "9") and reads.reads == 1
    reads.on_lease("rt", lease(3))
    assert cache.current("rt") == 3 and reads.reads == 1
