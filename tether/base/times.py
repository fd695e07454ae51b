"""observedAt's time format: UTC, microseconds, 'Z' (``format_time``, ``now``), and
parsing it strictly (``parse_time``: None for anything that is not one, or not a real date
and time). Pure: the standard library only."""

from __future__ import annotations

import datetime
import re

_TIME = re.compile(
    r"([0-9]{4})-([0-9]{2})-([0-9]{2})T([0-9]{2}):([0-9]{2}):([0-9]{2})"
    r"(?:\.([0-9]{1,9}))?Z"
)


def parse_time(ts: object) -> datetime.datetime | None:
    """An observedAt as a UTC datetime (nanoseconds cut to microseconds); None when it is
    not one or not a real date and time (``2026-13-45T...``, ``2026-02-30T...``)."""
    if not isinstance(ts, str) or len(ts) > 40:
        return None
    m = _TIME.fullmatch(ts)
    if m is None:
        return None
    y, mo, d, h, mi, s, frac = m.groups()
    try:
        return datetime.datetime(
            int(y),
            int(mo),
            int(d),
            int(h),
            int(mi),
            int(s),
            int((frac or "0")[:6].ljust(6, "0")),
            tzinfo=datetime.UTC,
        )
    except ValueError:
        return None


def format_time(ts: datetime.datetime) -> str:
    """observedAt format: UTC, microseconds, 'Z'."""
    return ts.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def now() -> str:
    return format_time(datetime.datetime.now(datetime.UTC))
