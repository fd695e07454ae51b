"""The recent records of a runtime's RuntimeDelivery carry their request's trace ID
(``tether.base.tracing``), kept through a merge; a stored value that is no trace ID is dropped."""

from __future__ import annotations

import datetime

from tether.wire import delivery

TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"


def test_the_recent_records_carry_their_trace_id_through_a_merge() -> None:
    now = datetime.datetime(2026, 12, 2, 10, 0, tzinfo=datetime.UTC)
    d = delivery.Delta()
    d.record(now, "webhook", now, "persisted", "ns", "a", TRACE)
    d.record(now, "webhook", now, "persisted", "ns", "b", "not-a-trace-id")
    d.record(now, "poller", now, "refused", "ns", "c")
    status = delivery.merge(None, d, "rt", now)
    assert [r.get("traceId") for r in status["recent"]] == [TRACE, None, None]
    hostile = {
        **status,
        "recent": [
            {**status["recent"][0], "traceId": "x" * 10_000},
            {**status["recent"][0], "traceId": TRACE.upper()},
            {**status["recent"][0]},
        ],
    }
    summary = delivery.summarize(hostile, now)
    assert [r.get("traceId") for r in summary.recent] == [TRACE, None, None]
