"""``tether status RUNTIME`` as a detail view (``admin.detail``, pure): enrollment,
certificate, heartbeat, lag, refusals by reason with their last objects and runbooks,
records, Compass; human durations; a tenant's names cannot forge lines."""

from __future__ import annotations

import datetime

from admin import detail, fleet, parts, runbooks
from tether.wire import delivery

NOW = datetime.datetime(2026, 12, 2, 12, 0, tzinfo=datetime.UTC)


def ago(**kw: float) -> datetime.datetime:
    return NOW - datetime.timedelta(**kw)


def row() -> fleet.Row:
    d = delivery.Delta()
    for i in range(4):
        d.record(
            ago(minutes=i), "poller", ago(minutes=i, seconds=90), "persisted", "team-a", f"app-{i}"
        )
    for _ in range(6):
        d.record(ago(minutes=3), "webhook", None, "refused", "team-a", "big\nFAKE LINE")
        d.refuse(ago(minutes=3), "quota_bytes", 413, "team-a", "big\nFAKE LINE")
    d.refuse(ago(minutes=1), "invalid_json", 400)
    d.refuse(ago(seconds=5), "rate", 429)
    summary = delivery.summarize(delivery.merge(None, d, "rt-1", NOW), NOW)
    r = fleet.Row(
        runtime_id="rt-1",
        kyma="kcp-system/kyma-1",
        created=ago(days=3),
        deleting=False,
        enrolled="True",
        enrollment_reason="Ready",
        enrollment_message="",
        certificate_not_after=NOW + datetime.timedelta(days=5),
        heartbeat=ago(hours=28),
        compass_state="Failed",
        compass_reason="RegistrationFailed",
        delivery=summary,
        problems=(),
    )
    return r._replace(problems=fleet.problems_of(r, fleet.Thresholds(), NOW))


def test_the_detail_view() -> None:
    links = runbooks.Links("https://docs.example.internal/t")
    mapping = parts.CompassMapping("kyma-1", "", "Failed", "RegistrationFailed", "Director 500")
    text = "\n".join(detail.lines(row(), mapping, links, NOW))
    assert text.startswith("Runtime rt-1\n")
    assert "Enrollment:  Ready" in text
    assert "Certificate: expires in 5d" in text
    assert "Heartbeat:   28h ago (2026-12-01 08:00:00Z)" in text  # human, not 100800s
    assert "Lag:         p50 3m, p99 5m (last hour)" in text  # 90 s, in the 30..300 s bucket
    assert "4 only by the poller (100%); 1 answered 429" in text
    assert "Compass:     Failed (RegistrationFailed: Director 500)" in text
    for p in ("silent", "refusing", "compass_failed"):
        assert f"  {p}: {fleet.PROBLEM_TEXT[p]}" in text
        assert f"runbook: https://docs.example.internal/t/docs/operations.md#problem-{p}" in text
    lines = text.splitlines()
    quota = next(ln for ln in lines if ln.lstrip().startswith("quota_bytes"))
    assert "team-a/big?FAKE LINE" in quota and "3m ago" in quota and "413" in quota
    assert quota.endswith("docs/operations.md#refusal-quota_bytes")
    assert not any(ln.startswith("FAKE LINE") for ln in lines)
    invalid = next(ln for ln in lines if ln.lstrip().startswith("invalid_json"))
    assert runbooks.NO_OBJECT in invalid and "60s ago" in invalid
    assert (
        "(1 answered 429: https://docs.example.internal/t/docs/operations.md#refusal-rate)" in text
    )
    assert "team-a/app-0" in text  # the newest records


def test_a_quiet_runtime() -> None:
    r = row()._replace(delivery=fleet.EMPTY, problems=(), compass_state="")
    text = "\n".join(detail.lines(r, None, runbooks.Links(), NOW, note="could not read"))
    assert "Problems: none" in text and "Refusals, last hour: none" in text
    assert "Compass:     no mapping" in text and "Note: could not read" in text
    assert "Events: none" in text
    assert "Muted:" not in text
    muted = "\n".join(detail.lines(r._replace(muted="flooding OPS-1"), None, runbooks.Links(), NOW))
    assert "Muted:       yes: flooding OPS-1 (tether unmute rt-1)" in muted


def test_the_events_of_the_page_are_in_the_detail_view() -> None:
    """The same Events the runtime page lists (``admin.parts.events_of``), newest first; a
    message a tenant influenced cannot add lines."""
    items = [
        {
            "type": "Warning",
            "reason": "EnrollFailed",
            "message": "the runtime's API answered 403\nFAKE LINE",
            "count": 4,
            "lastTimestamp": "2026-12-02T11:58:00Z",
            "involvedObject": {"kind": "Kyma", "name": "kyma-1"},
        },
        {
            "type": "Normal",
            "reason": "Enrolled",
            "message": "Tether installed",
            "lastTimestamp": "2026-12-02T11:00:00Z",
            "involvedObject": {"kind": "RuntimeEnrollment", "name": "kyma-1"},
        },
    ]
    events = parts.events_of(items)
    lines = detail.lines(row(), None, runbooks.Links(), NOW, events=events)
    start = lines.index("Events:")
    head, first, second = lines[start + 1 : start + 4]
    assert head.split() == ["LAST", "SEEN", "TYPE", "OBJECT", "REASON", "MESSAGE"]
    assert first.split()[:5] == ["2m", "ago", "Warning", "Kyma", "EnrollFailed"]
    assert first.endswith("the runtime's API answered 403?FAKE LINE (x4)")
    assert second.split()[:5] == ["60m", "ago", "Normal", "RuntimeEnrollment", "Enrolled"]
    assert not any(ln.startswith("FAKE LINE") for ln in lines)
    assert parts.event_json(events[0]) == {
        "lastSeen": "2026-12-02T11:58:00Z",
        "type": "Warning",
        "object": "Kyma",
        "reason": "EnrollFailed",
        "message": "the runtime's API answered 403\nFAKE LINE",
        "count": 4,
    }
