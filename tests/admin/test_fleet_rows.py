"""The admin pages' pure decisions: rows and problems from plain objects, ordering, search
and pages, the metric's cap, the review bodies, charts and formatting."""

from __future__ import annotations

import datetime

from admin import auth, charts, fleet, parts, throttle, views
from tether.kube import apitypes
from tether.wire import delivery

NOW = datetime.datetime(2026, 12, 2, 12, 0, tzinfo=datetime.UTC)


def ts(seconds_ago: float) -> str:
    return delivery.fmt(NOW - datetime.timedelta(seconds=seconds_ago))


def kyma(name: str, rid: str | None, **meta: object) -> dict[str, object]:
    labels = {"kyma-project.io/runtime-id": rid} if rid else {}
    return {
        "metadata": {
            "name": name,
            "namespace": "kcp",
            "labels": labels,
            "creationTimestamp": ts(86_400),
            **meta,
        }
    }


def enrollment(name: str, ready: str = "True", not_after: float = 5 * 86_400) -> dict[str, object]:
    return {
        "metadata": {"name": name},
        "spec": {"kymaName": name},
        "status": {
            "conditions": [{"type": "Ready", "status": ready, "reason": "Why"}],
            "certificate": {"notAfter": ts(-not_after)},
        },
    }


def lease(rid: str, age: float) -> dict[str, object]:
    return {
        "metadata": {"labels": {"kyma-project.io/runtime-id": rid}},
        "spec": {"renewTime": ts(age)},
    }


def deliveries(rid: str, webhook: int, poller: int, refused: int = 0) -> dict[str, object]:
    d = delivery.Delta()
    for i in range(webhook + poller):
        d.record(NOW, "poller" if i < poller else "webhook", NOW, "persisted", "ns", "n")
    for _ in range(refused):
        d.refuse(NOW, "schema", 400)
    return {
        "metadata": {"labels": {"kyma-project.io/runtime-id": rid}},
        "status": delivery.merge(None, d, rid, NOW),
    }


def build(**kw: object) -> list[fleet.Row]:
    return fleet.build(fleet.Objects(**kw), fleet.Thresholds(), NOW)  # type: ignore[arg-type]


def test_a_runtime_is_a_kyma_cr_with_a_runtime_id() -> None:
    rows = build(
        kymas=[kyma("a", "rt-a"), kyma("no-id", None)],
        heartbeats=[lease("rt-gone", 1)],
        deliveries=[deliveries("rt-gone", 1, 0)],
    )
    assert [r.runtime_id for r in rows] == ["rt-a"]


def test_problems_follow_the_thresholds() -> None:
    rows = {
        r.runtime_id: r
        for r in build(
            kymas=[
                kyma(n, f"rt-{n}")
                for n in ("ok", "unenrolled", "silent", "poller", "expiring", "refusing", "few")
            ]
            + [kyma("gone", "rt-gone", deletionTimestamp=ts(5))],
            enrollments=[
                enrollment(n) for n in ("ok", "silent", "poller", "refusing", "few", "gone")
            ]
            + [enrollment("unenrolled", "False"), enrollment("expiring", not_after=3600)],
            heartbeats=[
                lease(f"rt-{n}", 10)
                for n in ("ok", "unenrolled", "poller", "expiring", "refusing", "few", "gone")
            ]
            + [lease("rt-silent", 301)],
            deliveries=[
                deliveries("rt-ok", 10, 4),
                deliveries("rt-poller", 5, 5),
                deliveries("rt-refusing", 1, 0, refused=5),
                deliveries("rt-few", 0, 4),
            ],
        )
    }
    assert rows["rt-ok"].problems == ()  # 4 of 14 by the poller: below half
    assert rows["rt-unenrolled"].problems == ("not_enrolled",)
    assert rows["rt-silent"].problems == ("silent",)
    assert rows["rt-poller"].problems == ("webhook_path_failing",)  # exactly half of 10
    assert rows["rt-few"].problems == ()  # all by the poller, but only 4 records
    assert rows["rt-expiring"].problems == ("certificate_expiring",)
    assert rows["rt-refusing"].problems == ("refusing",)
    assert rows["rt-gone"].problems == ()  # being deleted: nothing to fix
    assert rows["rt-ok"].delivery.poller_share == 4 / 14


def test_no_enrollment_and_no_heartbeat_since_creation_is_the_worst() -> None:
    rows = build(
        kymas=[kyma("b", "rt-b"), kyma("a", "rt-a")],
        enrollments=[enrollment("b")],
        heartbeats=[lease("rt-b", 1)],
    )
    assert [r.runtime_id for r in rows] == ["rt-a", "rt-b"]
    assert rows[0].problems == ("not_enrolled", "silent") and rows[0].enrolled == "Unknown"


def test_garbage_objects_never_raise() -> None:
    rows = build(
        kymas=[kyma("a", "rt-a"), {"metadata": "x"}, {}],
        enrollments=[{"spec": None, "status": {"conditions": "no"}}, {}],
        heartbeats=[
            {
                "metadata": {"labels": {"kyma-project.io/runtime-id": "rt-a"}},
                "spec": {"renewTime": "2026-13-45"},
            }
        ],
        deliveries=[
            {
                "metadata": {"labels": {"kyma-project.io/runtime-id": "rt-a"}},
                "status": {
                    "minutes": [{"start": "x", "lag": "y"}, 5],
                    "recent": "z",
                    "stored": [1],
                },
            }
        ],
        mappings=[{"metadata": {"labels": {}}}],
    )
    assert rows[0].runtime_id == "rt-a" and rows[0].heartbeat is None


def test_select_searches_filters_and_pages() -> None:
    rows = build(
        kymas=[kyma(f"k{i}", f"rt-{i:02d}") for i in range(23)],
        enrollments=[enrollment(f"k{i}") for i in range(23) if i != 7],
        heartbeats=[lease(f"rt-{i:02d}", 1) for i in range(23)],
    )
    page = fleet.select(rows, page=3, size=10)
    assert (page.number, page.pages, page.total, len(page.rows)) == (3, 3, 23, 3)
    assert fleet.select(rows, page=99, size=10).number == 3
    assert [r.runtime_id for r in fleet.select(rows, "RT-1").rows][:2] == ["rt-10", "rt-11"]
    assert [r.runtime_id for r in fleet.select(rows, problem="not_enrolled").rows] == ["rt-07"]
    assert fleet.select(rows, "k7").total == 1 and fleet.select([], page=0).pages == 1


def test_the_problem_series_are_capped_worst_first() -> None:
    rows = build(kymas=[kyma(f"k{i}", f"rt-{i}") for i in range(5)])
    pairs, omitted = fleet.problem_series(rows, 3)
    assert len(pairs) == 3 and omitted == 7 and pairs[0] == ("rt-0", "not_enrolled")
    assert fleet.counts(rows)["silent"] == 5 and set(fleet.counts(rows)) == set(fleet.PROBLEMS)


def test_review_bodies_carry_the_identity_and_the_page() -> None:
    who = auth.identity_of(
        {
            "status": {
                "authenticated": True,
                "audiences": ["tether-admin"],
                "user": {
                    "username": "alice",
                    "uid": "u1",
                    "groups": ["ops"],
                    "extra": {"scope": ["a"]},
                },
            }
        },
        "tether-admin",
    )
    assert who == auth.Identity("alice", "u1", ("ops",), (("scope", ("a",)),))
    body = auth.access_body(who, "compass")
    assert body["spec"]["resourceAttributes"] == {
        "group": "tether.kyma-project.io",
        "resource": "adminpages",
        "name": "compass",
        "verb": "get",
    }
    assert body["spec"]["extra"] == {"scope": ["a"]} and body["spec"]["groups"] == ["ops"]
    assert auth.identity_of({"status": {"authenticated": False}}, "tether-admin") is None
    assert (
        auth.identity_of(
            {
                "status": {
                    "authenticated": True,
                    "audiences": ["https://kcp"],
                    "user": {"username": "alice"},
                }
            },
            "tether-admin",
        )
        is None
    )  # a token for another audience
    assert auth.token_key("t") != "t" and len(auth.token_key("t")) == 64


def test_the_authorizer_refuses_unusable_tokens_without_asking() -> None:
    class NoKcp:
        def create(self, *a: object, **k: object) -> dict[str, object]:
            raise AssertionError("the KCP must not be asked")

    a = auth.Authorizer(NoKcp(), 30, 1, "tether-admin", throttle.Buckets(10, 10))  # type: ignore[arg-type]
    for token in ("", "x" * (auth.MAX_TOKEN + 1), "tab\there", "é-token"):
        assert a.identify(token, "10.0.0.1") is None


def test_charts_hold_numbers_only_and_break_on_gaps() -> None:
    svg = charts.line_chart([("p50", "lag <p50>", [0.1, None, 0.3, 0.2])], title="a&b")
    assert svg.count("<polyline") == 1 and svg.count("<circle") == 1
    assert "lag &lt;p50&gt;" in svg and "<title>a&amp;b</title>" in svg
    assert "<polyline" not in charts.line_chart([("x", "x", [None, None])])


def test_formatting() -> None:
    assert views.ago(NOW - datetime.timedelta(seconds=90), NOW) == "90s ago"
    assert (
        views.ago(None, NOW) == "never"
        and views.until(NOW - datetime.timedelta(days=3), NOW) == "expired 3d ago"
    )
    assert (
        views.seconds(0.0421) == "42ms"
        and views.seconds(2.5) == "2.5s"
        and views.seconds(None) == "—"
    )
    # long lags are human durations, not raw seconds
    assert views.seconds(101279.3) == "28h" and views.seconds(600.0) == "10m"
    assert views.seconds(59.94) == "59.9s" and views.seconds(3 * 86_400.0) == "3d"
    assert views.size(3 << 20) == "3.0 MiB" and views.share(0.256) == "26%"


def test_parts_leaders_and_compass_from_leases() -> None:
    deps = [
        {
            "metadata": {"name": "tether-compass"},
            "spec": {
                "replicas": 2,
                "template": {"spec": {"containers": [{"image": "registry:5000/tether:0.1.0"}]}},
            },
            "status": {"readyReplicas": 1, "conditions": [{"type": "Available", "status": "True"}]},
        }
    ]
    leases = [
        {
            "metadata": {
                "name": "tether-compass-1",
                "annotations": {
                    apitypes.LAST_RUN_RESULT_ANNOTATION: "ok",
                    apitypes.BREAKER_ANNOTATION: "half-open",
                    apitypes.DIRECTOR_ERRORS_ANNOTATION: (
                        '[{"at": "t", "operation": "op", "message": "' + "m" * 500 + '"}]'
                    ),
                },
            },
            "spec": {"holderIdentity": "pod_1"},
        },
        {"metadata": {"name": "unrelated"}, "spec": {}},
    ]
    (p,) = parts.parts_of(deps, leases)
    assert (p.version, p.ready, p.desired) == ("0.1.0", 1, 2)
    assert [(x.lease, x.holder, x.last_result) for x in p.leaders] == [
        ("tether-compass-1", "pod_1", "ok")
    ]
    c = parts.compass_of(leases)
    assert c.breaker == "half-open" and len(c.errors[0]["message"]) == 200
    assert parts.compass_of([]).breaker == "unknown"
    bad = parts.compass_of(
        [
            {
                "metadata": {
                    "name": "tether-compass",
                    "annotations": {apitypes.DIRECTOR_ERRORS_ANNOTATION: "{not json"},
                }
            }
        ]
    )
    assert bad.errors == ()


def test_the_beats_chart_leaves_out_minutes_not_merged_yet() -> None:
    """A runtime that only polls has its requests merged every 50 minutes per worker: the
    minutes after the object's last merge are unknown, not a silence."""
    d = delivery.Delta()
    merged_at = NOW - datetime.timedelta(minutes=30)
    for m in range(20):
        d.seen(merged_at - datetime.timedelta(minutes=m))
    summary = delivery.summarize(delivery.merge(None, d, "rt", merged_at), NOW)
    svg = views.beats_chart(summary, NOW)
    assert "merged up to 11:30Z" in svg
    points = svg.split("<polyline", 1)[1].split('points="', 1)[1].split('"', 1)[0].split()
    assert len(points) == 30  # 11:01..11:30 drawn (20 of them with requests), 11:31..12:00 not
    fresh = delivery.summarize(delivery.merge(None, d, "rt", NOW), NOW)
    assert "merged up to" not in views.beats_chart(fresh, NOW)


def test_a_muted_runtime_says_so_and_is_not_silent() -> None:
    """``tether mute`` silences a runtime on purpose: the row carries the reason, and its
    missing heartbeat is no problem; the same runtime unmuted and quiet is ``silent``."""
    muted = kyma("m", "rt-m", annotations={apitypes.MUTED_ANNOTATION: "flooding\tOPS-1"})
    rows = {
        r.runtime_id: r
        for r in build(
            kymas=[muted, kyma("q", "rt-q")],
            enrollments=[enrollment("m"), enrollment("q")],
            heartbeats=[lease("rt-m", 3600), lease("rt-q", 3600)],
        )
    }
    assert rows["rt-m"].muted == "flooding OPS-1" and "silent" not in rows["rt-m"].problems
    assert rows["rt-q"].muted is None and "silent" in rows["rt-q"].problems
    assert fleet.as_json(rows["rt-m"])["muted"] == "flooding OPS-1"
    empty = kyma("e", "rt-e", annotations={apitypes.MUTED_ANNOTATION: ""})
    assert build(kymas=[empty])[0].muted == "muted"  # present but empty still mutes
