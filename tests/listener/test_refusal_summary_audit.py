"""listener.edge.refusalsummary: unauthenticated refusals counted per reason, source and window,
one audit line per key, bounded keys and samples (plain data, an injected clock)."""

from __future__ import annotations

import io
import json
import logging
import time
from typing import Any

from listener.edge import refusalsummary
from tether.base import logs


def _logger() -> tuple[logging.Logger, io.StringIO]:
    out = io.StringIO()
    logger = logging.getLogger("test.refusalsummary")
    logger.propagate = False
    handler = logging.StreamHandler(out)
    handler.setFormatter(logs.JSONFormatter())
    logger.handlers[:] = [handler]
    logger.setLevel(logging.INFO)
    return logger, out


def _lines(out: io.StringIO) -> list[dict[str, Any]]:
    return [json.loads(x) for x in out.getvalue().splitlines()]


def test_a_flood_from_one_source_is_one_line_with_the_count() -> None:
    logger, out = _logger()
    now = [1_800_000_000.0]  # 2027-01-15T08:00:00Z, a minute's start
    agg = refusalsummary.RefusalSummary(logger, 60, clock=lambda: now[0])
    for i in range(300):
        now[0] += 0.02  # 6 s
        agg.record("no_certificate", "203.0.113.7", 401, f"rt-{i}")
    assert out.getvalue() == ""  # nothing before the minute ends
    assert agg.flush_due() == 0
    now[0] = 1_800_000_060.0
    assert agg.flush_due() == 1
    (line,) = _lines(out)
    assert line["event"] == "auth_refused_summary"
    assert (line["reason"], line["source"], line["count"], line["status"]) == (
        "no_certificate",
        "203.0.113.7",
        300,
        401,
    )
    assert line["minute"] == "2027-01-15T08:00:00+00:00" and line["seconds"] == 60
    assert len(line["claimed_runtimes"]) == refusalsummary.MAX_CLAIMED
    assert line["claimed_runtimes_truncated"] is True
    assert "runtime" not in line and "overflow" not in line
    assert agg.flush_due() == 0 and agg.flush() == 0  # written once


def test_keys_are_reason_and_source_and_the_next_minute_writes_the_last() -> None:
    logger, out = _logger()
    now = [120.0]
    agg = refusalsummary.RefusalSummary(logger, 60, clock=lambda: now[0])
    agg.record("no_certificate", "10.0.0.1", 401, "a")
    agg.record("no_certificate", "10.0.0.1", 401, "a")
    agg.record("no_certificate", "10.0.0.2", 401, "b")
    agg.record("cn_mismatch", "10.0.0.1", 403, "c", cn="rt-real")
    now[0] = 185.0  # the next minute: its first refusal writes the previous minute
    agg.record("san_mismatch", None, 403, "d", cn="rt-d")
    first = _lines(out)
    got = {(x["reason"], x["source"]): (x["count"], x["claimed_runtimes"]) for x in first}
    assert got == {
        ("no_certificate", "10.0.0.1"): (2, ["a"]),
        ("no_certificate", "10.0.0.2"): (1, ["b"]),
        ("cn_mismatch", "10.0.0.1"): (1, ["c"]),
    }
    assert [x.get("certificate_cns") for x in first if x["reason"] == "cn_mismatch"] == [
        ["rt-real"]
    ]
    assert {x["minute"] for x in first} == {"1970-01-01T00:02:00+00:00"}
    assert agg.flush() == 1  # worker exit: the current minute, ended or not
    last = _lines(out)[-1]
    assert (last["reason"], last["source"], last["count"], last["minute"]) == (
        "san_mismatch",
        "unknown",
        1,
        "1970-01-01T00:03:00+00:00",
    )


def test_keys_beyond_the_bound_are_counted_in_an_other_bucket_that_says_so() -> None:
    logger, out = _logger()
    agg = refusalsummary.RefusalSummary(logger, 60, clock=lambda: 0.0, max_keys=3)
    for i in range(100):  # 100 sources
        agg.record("no_certificate", f"10.0.{i // 256}.{i % 256}", 401, f"rt-{i}")
    agg.record("cn_mismatch", "10.9.9.9", 403, "x")  # a new reason: its own overflow bucket
    agg.record("no_certificate", "10.0.0.1", 401, "again")  # a kept key is still counted
    assert agg.flush() == 5
    lines = _lines(out)
    kept = [x for x in lines if "overflow" not in x]
    other = [x for x in lines if x.get("overflow")]
    assert len(kept) == 3 and sum(x["count"] for x in kept) == 4
    assert {(x["reason"], x["source"], x["count"]) for x in other} == {
        ("no_certificate", "other", 97),
        ("cn_mismatch", "other", 1),
    }
    assert all("more than 3" in x["note"] for x in other)
    assert sum(x["count"] for x in lines) == 102


def test_claimed_ids_are_bounded_in_number_and_length() -> None:
    logger, out = _logger()
    agg = refusalsummary.RefusalSummary(logger, 60, clock=lambda: 0.0, max_claimed=2)
    for claimed in ("a", "a", "b", "x" * 1000, "c"):
        agg.record("unknown_runtime", "10.0.0.1", 403, claimed, cn="y" * 1000)
    agg.flush()
    (line,) = _lines(out)
    assert line["claimed_runtimes"] == ["a", "b"] and line["claimed_runtimes_truncated"]
    assert line["certificate_cns"] == [logs.bounded("y" * 1000, refusalsummary.MAX_TEXT)]
    assert "certificate_cns_truncated" not in line
    assert len(out.getvalue()) < 1000


def test_memory_holds_one_window() -> None:
    logger, out = _logger()
    now = [0.0]
    agg = refusalsummary.RefusalSummary(logger, 60, clock=lambda: now[0], max_keys=10)
    for minute in range(50):
        now[0] = minute * 60.0
        for i in range(1000):
            agg.record("no_certificate", f"10.1.{i // 256}.{i % 256}", 401, str(i))
        window = agg._window
        assert window is not None and len(window.counts) <= 10 and len(window.overflow) <= 1
    agg.flush()
    lines = _lines(out)
    assert len(lines) == 50 * 11 and sum(x["count"] for x in lines) == 50 * 1000


def test_interval_zero_writes_a_line_per_refusal() -> None:
    logger, out = _logger()
    agg = refusalsummary.RefusalSummary(logger, 0, clock=lambda: 60.0)
    agg.record("no_certificate", "10.0.0.1", 401, "a")
    agg.record("no_certificate", "10.0.0.1", 401, "b")
    assert [(x["count"], x["claimed_runtimes"], x["seconds"]) for x in _lines(out)] == [
        (1, ["a"], 0),
        (1, ["b"], 0),
    ]
    assert agg.flush_due() == 0 and agg.flush() == 0


def test_the_flush_thread_writes_just_after_the_window_ends() -> None:
    logger, out = _logger()
    base = time.monotonic()

    def clock() -> float:  # 0.2 s before a minute's end, then real time
        return time.monotonic() - base + 59.8

    agg = refusalsummary.RefusalSummary(logger, 60, clock=clock)
    assert 0.2 <= agg.seconds_left() <= 0.26
    agg.record("no_certificate", "10.0.0.1", 401, "a")
    t = agg.start()
    try:
        deadline = time.monotonic() + 5
        while not out.getvalue() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert [x["count"] for x in _lines(out)] == [1]
    finally:
        agg.stop()
        t.join(timeout=5)
    assert not t.is_alive()
