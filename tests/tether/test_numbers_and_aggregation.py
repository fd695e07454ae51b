"""tether.base.numbers.ascii_int and tether.base.logs.Aggregated (plain data)."""

from __future__ import annotations

import io
import json
import logging
import pathlib

import pytest

from tether.base import logs, numbers


@pytest.mark.parametrize(
    "text,expected",
    [
        ("0", 0),
        ("12", 12),
        ("00042", 42),
        ("9" * 20, int("9" * 20)),
        ("²", None),
        ("١٢٣", None),
        ("１２", None),
        ("12\n", None),
        (" 1", None),
        ("+1", None),
        ("-1", None),
        ("1_0", None),
        ("", None),
        ("9" * 21, None),
        (5, None),
        (None, None),
    ],
)
def test_ascii_int_accepts_only_ascii_digits(text: object, expected: int | None) -> None:
    assert numbers.ascii_int(text) == expected


def test_ascii_int_max_digits() -> None:
    assert numbers.ascii_int("123456", max_digits=6) == 123456
    assert numbers.ascii_int("1234567", max_digits=6) is None


def _logger() -> tuple[logging.Logger, io.StringIO]:
    out = io.StringIO()
    logger = logging.getLogger("test.aggregated")
    logger.propagate = False
    handler = logging.StreamHandler(out)
    handler.setFormatter(logs.JSONFormatter())
    logger.handlers[:] = [handler]
    logger.setLevel(logging.INFO)
    return logger, out


def test_aggregated_writes_first_event_then_one_summary_per_interval() -> None:
    logger, out = _logger()
    now = [0.0]
    agg = logs.Aggregated(logger, "refused", interval=60, clock=lambda: now[0])
    for _ in range(1000):
        agg.record("no_certificate", status=401)
    lines = [json.loads(x) for x in out.getvalue().splitlines()]
    assert len(lines) == 1 and lines[0]["event"] == "refused" and lines[0]["count"] == 1
    now[0] = 61.0
    agg.record("no_certificate", status=401)
    lines = [json.loads(x) for x in out.getvalue().splitlines()]
    assert [(x["event"], x["count"]) for x in lines] == [
        ("refused", 1),
        ("refused_aggregated", 999),
        ("refused", 1),
    ]


def test_aggregated_flush_writes_pending_counts_per_key() -> None:
    logger, out = _logger()
    agg = logs.Aggregated(logger, "refused", interval=60, clock=lambda: 0.0)
    for key in ("a", "b", "a", "a"):
        agg.record(key)
    agg.flush()
    lines = [json.loads(x) for x in out.getvalue().splitlines()]
    summary = {x["key"]: x["count"] for x in lines if x["event"] == "refused_aggregated"}
    assert summary == {"a": 2}
    assert sorted(x["key"] for x in lines if x["event"] == "refused") == ["a", "b"]


def test_a_resource_version_is_read_one_way_everywhere() -> None:
    """listener.fleet.summaryobject and tether.runtime.consumerstate read resourceVersions through
    numbers.revision_of: before, consumerstate took any str.isdigit() text ('١٢٣' as 123,
    and a 5,000-digit string raised ValueError from int())."""
    from listener.fleet import summaryobject
    from tether.runtime import consumerstate

    assert numbers.revision_of({"resourceVersion": "123"}) == 123
    assert numbers.revision_of({"resourceVersion": "١٢٣"}) is None
    assert numbers.revision_of({"resourceVersion": "9" * 5000}) is None
    read = numbers.revision_of
    assert read({"resourceVersion": 123}) is None and read(None) is None and read([]) is None
    for module in (summaryobject, consumerstate):  # no second name, no reader of their own
        assert not hasattr(module, "revision_of"), module.__name__
        assert "numbers.revision_of(" in pathlib.Path(module.__file__ or "").read_text()
