"""tether.wire.delivery (pure): the per-runtime delivery summary, with plain data only."""

from __future__ import annotations

import datetime
import itertools
import json
import random
from typing import Any

import pytest

from listener.fleet import deliveries
from tether.wire import delivery

T0 = datetime.datetime(2026, 12, 2, 1, 5, 7, 250000, tzinfo=datetime.UTC)


def at(seconds: float) -> datetime.datetime:
    return T0 + datetime.timedelta(seconds=seconds)


def persisted(
    d: delivery.Delta,
    now: datetime.datetime,
    lag: float,
    source: str = "webhook",
    name: str = "app",
) -> float | None:
    return d.record(now, source, now - datetime.timedelta(seconds=lag), "persisted", "team-a", name)


def test_a_delta_counts_by_minute_source_and_lag_bucket() -> None:
    d = delivery.Delta()
    assert d.empty()
    assert persisted(d, at(0), 0.04) == pytest.approx(0.04)
    persisted(d, at(1), 3.0, "poller")
    d.record(at(2), "webhook", at(1), "duplicate", "team-a", "app")
    d.record(at(3), "webhook", None, "stale", "team-a", "app")
    d.refuse(at(4), "quota_records", 413)
    d.refuse(at(5), "rate", 429)
    d.refuse(at(61), "schema", 400)  # the next minute
    assert not d.empty()
    first, second = (d.minutes[k] for k in sorted(d.minutes))
    assert (first.webhook, first.poller) == (1, 1)  # only persisted records count
    assert first.lag[delivery.lag_bucket(0.04)] == 1 and first.lag[delivery.lag_bucket(3.0)] == 1
    assert sum(first.lag) == 2
    assert first.refused == {"quota_records": 1} and first.throttled == 1
    assert second.refused == {"schema": 1} and second.webhook == 0
    assert [r["outcome"] for r in d.recent] == ["persisted", "persisted", "duplicate", "stale"]
    assert d.recent[3]["lagSeconds"] is None
    assert d.last_change == at(1)


def test_lag_buckets_and_clock_skew() -> None:
    assert delivery.lag_bucket(-5.0) == 0  # a sender's clock ahead: counts as no lag
    assert delivery.lag_bucket(0.025) == 0
    assert delivery.lag_bucket(0.026) == 1
    assert delivery.lag_bucket(300.0) == len(delivery.LAG_BOUNDS) - 1
    assert delivery.lag_bucket(1e9) == len(delivery.LAG_BOUNDS)
    d = delivery.Delta()
    assert d.record(at(0), "webhook", at(10), "persisted", "a", "b") == 0.0


def test_a_delta_stays_bounded() -> None:
    d = delivery.Delta()
    for i in range(delivery.WINDOW_MINUTES * 3):
        persisted(d, at(60 * i), 0.1, name="x" * 1000)
        for k in range(delivery.MAX_REASONS * 3):
            d.refuse(at(60 * i), f"reason-{k}-" + "y" * 100, 400)
    assert len(d.minutes) == delivery.WINDOW_MINUTES
    assert min(d.minutes) == delivery.minute_of(at(60 * (delivery.WINDOW_MINUTES * 2)))
    assert len(d.recent) == delivery.RECENT
    assert all(len(r["name"]) == delivery.MAX_TEXT for r in d.recent)
    for m in d.minutes.values():
        assert len(m.refused) == delivery.MAX_REASONS + 1  # the rest counts as "other"
        assert m.refused["other"] == delivery.MAX_REASONS * 2
        assert all(len(k) <= 40 for k in m.refused)


def test_merge_creates_the_status_and_adds_up() -> None:
    a, b = delivery.Delta(), delivery.Delta()
    persisted(a, at(0), 0.01)
    persisted(b, at(0.5), 0.2, "poller")
    b.refuse(at(1), "quota_bytes", 413)
    b.stored = {"records": 3, "bytes": 100, "recordLimit": 10, "byteLimit": 1000}
    s1 = delivery.merge(None, a, "rt-1", at(1))
    s2 = delivery.merge(s1, b, "rt-1", at(2))
    assert s2["runtimeId"] == "rt-1" and s2["updatedAt"] == delivery.fmt(at(2))
    assert s2["lastChangeAt"] == delivery.fmt(at(0.5))
    assert s2["stored"] == b.stored
    [m] = s2["minutes"]
    assert m["start"] == "2026-12-02T01:05:00Z"
    assert (m["webhook"], m["poller"], sum(m["lag"]), m["refused"]) == (1, 1, 2, {"quota_bytes": 1})
    assert len(s2["recent"]) == 2
    # the stored usage stays when a later delta has none
    assert delivery.merge(s2, delivery.Delta(), "rt-1", at(3))["stored"] == b.stored
    json.dumps(s2)  # plain JSON data


def _random_delta(rng: random.Random, base: float) -> delivery.Delta:
    d = delivery.Delta()
    for _ in range(rng.randrange(1, 30)):
        now = at(base + rng.uniform(0, 600))
        kind = rng.random()
        if kind < 0.6:
            outcome = rng.choice(["persisted", "persisted", "duplicate", "stale"])
            d.record(
                now,
                rng.choice(delivery.SOURCES),
                now - datetime.timedelta(seconds=rng.uniform(-1, 400)),
                outcome,  # type: ignore[arg-type]
                "ns",
                f"n{rng.randrange(5)}",
            )
        else:
            d.refuse(
                now,
                rng.choice(["rate", "schema", "quota_records", "media_type"]),
                rng.choice([400, 413, 415, 429]),
            )
    return d


def _counts(status: dict[str, Any]) -> Any:
    return [
        (m["start"], m["webhook"], m["poller"], m["lag"], m["refused"], m["throttled"])
        for m in status["minutes"]
    ]


def test_merge_is_commutative_in_its_counts() -> None:
    rng = random.Random(13)
    now = at(700)
    for _ in range(20):
        deltas = [_random_delta(rng, rng.uniform(0, 60)) for _ in range(4)]
        results = []
        for order in itertools.permutations(deltas):
            status: dict[str, Any] | None = None
            for d in order:
                status = delivery.merge(status, d, "rt", now)
            assert status is not None
            results.append(status)
        first = results[0]
        for other in results[1:]:
            assert _counts(other) == _counts(first)
            assert other.get("lastChangeAt") == first.get("lastChangeAt")
            assert [r["at"] for r in other["recent"]] == [r["at"] for r in first["recent"]]
        total = sum(m["webhook"] + m["poller"] for m in first["minutes"])
        assert total == sum(m.webhook + m.poller for d in deltas for m in d.minutes.values())


def test_merge_drops_minutes_outside_the_window() -> None:
    old = delivery.Delta()
    persisted(old, at(0), 0.1)
    status = delivery.merge(None, old, "rt", at(0))
    later = at(60 * delivery.WINDOW_MINUTES)
    new = delivery.Delta()
    persisted(new, later, 0.1)
    status = delivery.merge(status, new, "rt", later)
    assert [m["start"] for m in status["minutes"]] == [later.strftime("%Y-%m-%dT%H:%M:00Z")]
    assert delivery.summarize(status, later).records == 1


def test_counts_saturate_instead_of_wrapping_to_zero() -> None:
    d = delivery.Delta()
    persisted(d, at(0), 0.01)
    status = delivery.merge(None, d, "rt", at(0))
    status["minutes"][0]["webhook"] = delivery.MAX_COUNT
    status = delivery.merge(status, d, "rt", at(0))
    assert status["minutes"][0]["webhook"] == delivery.MAX_COUNT
    assert delivery.summarize(status, at(0)).webhook == delivery.MAX_COUNT


def test_reasons_stay_bounded_across_merges_and_survive_a_reread() -> None:
    status: dict[str, Any] | None = None
    for k in range(delivery.MAX_REASONS + 5):
        d = delivery.Delta()
        d.refuse(at(0), f"r{k:02d}", 400)
        status = delivery.merge(status, d, "rt", at(0))
    assert status is not None
    refused = status["minutes"][0]["refused"]
    assert len(refused) == delivery.MAX_REASONS + 1 and refused["other"] == 5
    # stored as JSON, keys may come back sorted ("other" not last): nothing is lost
    reread = json.loads(json.dumps(status, sort_keys=True))
    again = delivery.merge(reread, delivery.Delta(), "rt", at(0))
    assert sum(again["minutes"][0]["refused"].values()) == delivery.MAX_REASONS + 5
    assert delivery.summarize(reread, at(0)).refusals == delivery.MAX_REASONS + 5


def test_quantiles_interpolate_like_histogram_quantile() -> None:
    counts = [0] * delivery.N_LAG
    assert delivery.quantile(counts, 0.5) is None
    counts[0] = 10  # all within 0.025 s
    assert delivery.quantile(counts, 0.5) == pytest.approx(0.0125)
    counts = [0] * delivery.N_LAG
    counts[2] = 4  # (0.05, 0.1]
    assert delivery.quantile(counts, 0.5) == pytest.approx(0.075)
    assert delivery.quantile(counts, 1.0) == pytest.approx(0.1)
    counts[-1] = 100  # above the last bound: answers it
    assert delivery.quantile(counts, 0.99) == delivery.LAG_BOUNDS[-1]
    s = delivery.summarize(
        {"minutes": [{"start": "2026-12-02T01:05:00Z", "webhook": 4, "lag": [0, 0, 4]}]}, at(0)
    )
    assert s.lag_p50 == pytest.approx(0.075) and s.records == 4 and s.poller_share == 0.0
    assert s.series[0].p50 == pytest.approx(0.075)


GARBAGE: list[Any] = [
    None,
    [],
    "status",
    7,
    {"minutes": "x"},
    {"minutes": [1, "a", None, {}]},
    {"minutes": [{"start": "not a time"}, {"start": 12}, {"start": "2026-12-02T01:05:00"}]},
    {
        "minutes": [
            {
                "start": "2026-12-02T01:05:00Z",
                "webhook": -3,
                "poller": True,
                "lag": "x",
                "refused": [1],
                "throttled": 1.5,
            }
        ]
    },
    {
        "minutes": [
            {
                "start": "2026-12-02T01:05:00Z",
                "lag": [1] * 10_000,
                "refused": {f"k{i}" * 50: i for i in range(10_000)},
            }
        ]
        * 500
    },
    {"minutes": [{"start": "2026-12-02T01:05:00Z", "webhook": 10**30, "lag": [None, -1, 2**70]}]},
    {
        "recent": [
            1,
            None,
            {"at": "x"},
            {
                "at": "2026-12-02T01:05:00Z",
                "name": "n" * 100_000,
                "lagSeconds": float("nan"),
                "outcome": "evil",
                "extra": "z" * 100_000,
            },
        ]
        * 1000
    },
    {"stored": ["a"], "lastChangeAt": 5, "updatedAt": "x" * 1000},
    {"stored": {"records": "many", "bytes": -1, "evil": 1}},
]


@pytest.mark.parametrize("status", GARBAGE, ids=range(len(GARBAGE)))
def test_hostile_stored_status_never_raises_and_stays_bounded(status: Any) -> None:
    d = delivery.Delta()
    persisted(d, at(0), 0.3)
    out = delivery.merge(status, d, "rt", at(1))
    text = json.dumps(out)
    assert len(text) < 64 * 1024
    assert len(out["minutes"]) <= delivery.WINDOW_MINUTES
    assert len(out["recent"]) <= delivery.RECENT
    for m in out["minutes"]:
        assert len(m["lag"]) == delivery.N_LAG and len(m["refused"]) <= delivery.MAX_REASONS + 1
        assert all(0 <= n <= delivery.MAX_COUNT for n in m["lag"])
    for r in out["recent"]:
        assert set(r) == {"at", "namespace", "name", "source", "lagSeconds", "outcome"}
        assert r["outcome"] in ("persisted", "duplicate", "stale", "refused")
        assert len(r["name"]) <= delivery.MAX_TEXT
    assert set(out.get("stored", {})) <= {"records", "bytes", "recordLimit", "byteLimit"}
    s = delivery.summarize(status, at(1))
    assert s.records >= 0 and len(s.refused) <= delivery.MAX_REASONS + 1
    assert len(s.recent) <= delivery.RECENT
    assert delivery.summarize(out, at(1)).webhook >= 1


def test_body_is_a_new_object_named_for_the_runtime() -> None:
    b = delivery.body("tether-rt-abc", "kcp-system", "rt-1", {"kyma-project.io/runtime-id": "rt-1"})
    assert b["apiVersion"] == "tether.kyma-project.io/v1alpha1" and b["kind"] == "RuntimeDelivery"
    assert b["metadata"] == {
        "name": "tether-rt-abc",
        "namespace": "kcp-system",
        "labels": {"kyma-project.io/runtime-id": "rt-1"},
    }
    assert b["spec"] == {"runtimeId": "rt-1"} and "status" not in b


def test_totals_over_runtimes() -> None:
    d = delivery.Delta()
    persisted(d, at(0), 0.1)
    persisted(d, at(0), 0.1, "poller")
    s = delivery.summarize(delivery.merge(None, d, "rt", at(0)), at(0))
    assert delivery.totals([s, s]) == (2, 2)
    assert s.poller_share == 0.5


def test_the_listener_combines_a_failed_flush_with_newer_counts() -> None:
    """listener.fleet.deliveries.combined: a delta kept after a failed write plus the new one."""
    older, newer = delivery.Delta(), delivery.Delta()
    persisted(older, at(0), 0.1)
    older.refuse(at(0), "rate", 429)
    older.stored = {"records": 1, "bytes": 1, "recordLimit": 2, "byteLimit": 2}
    persisted(newer, at(70), 0.2, "poller")
    both = deliveries.combined(older, newer, "rt", at(71))
    status = delivery.merge(None, both, "rt", at(71))
    s = delivery.summarize(status, at(71))
    assert (s.webhook, s.poller, s.throttled) == (1, 1, 1)
    assert both.stored == older.stored and both.last_change == at(70)
    assert len(both.recent) == 2
