"""What the templates print (pure): durations, sizes, shares, and the charts of a runtime."""

from __future__ import annotations

import datetime
from collections.abc import Sequence

from admin import charts
from tether.wire import delivery


def ago(t: datetime.datetime | None, now: datetime.datetime) -> str:
    if t is None:
        return "never"
    s = (now - t).total_seconds()
    return "in " + duration(-s) if s < 0 else duration(s) + " ago"


def until(t: datetime.datetime | None, now: datetime.datetime) -> str:
    if t is None:
        return "—"
    s = (t - now).total_seconds()
    return "expired " + duration(-s) + " ago" if s < 0 else "in " + duration(s)


def duration(seconds: float) -> str:
    s = abs(seconds)
    if s < 1:
        return f"{s * 1000:.0f}ms"
    if s < 120:
        return f"{s:.0f}s"
    if s < 7200:
        return f"{s / 60:.0f}m"
    if s < 172_800:
        return f"{s / 3600:.0f}h"
    return f"{s / 86_400:.0f}d"


def seconds(v: float | None) -> str:
    """A measured time (a lag, a listing): ms below a second, tenths below a minute, then
    as ``duration`` (28h, not 101279.3s)."""
    if v is None:
        return "—"
    if v < 1:
        return f"{v * 1000:.0f}ms"
    return f"{v:.1f}s" if v < 60 else duration(v)


def share(v: float | None) -> str:
    return "—" if v is None else f"{v * 100:.0f}%"


def size(n: int) -> str:
    for unit, step in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= step:
            return f"{n / step:.1f} {unit}"
    return f"{n} B"


def stamp(t: datetime.datetime | None) -> str:
    return "—" if t is None else t.strftime("%Y-%m-%d %H:%M:%SZ")


def _slots(points: Sequence[delivery.Point], now: datetime.datetime) -> list[datetime.datetime]:
    start = delivery.minute_of(now) - datetime.timedelta(minutes=delivery.WINDOW_MINUTES - 1)
    return [start + datetime.timedelta(minutes=i) for i in range(delivery.WINDOW_MINUTES)]


def lag_chart(summary: delivery.Summary, now: datetime.datetime) -> str:
    """Delivery lag p50 and p99 per minute over the last hour."""
    by = {p.start: p for p in summary.series}
    slots = _slots(summary.series, now)
    p50 = [by[s].p50 if s in by else None for s in slots]
    p99 = [by[s].p99 if s in by else None for s in slots]
    return charts.line_chart(
        [("p99", "lag p99", p99), ("p50", "lag p50", p50)],
        title="delivery lag per minute, last hour",
        unit="s",
    )


def beats_chart(summary: delivery.Summary, now: datetime.datetime) -> str:
    """Authenticated requests of the runtime per minute over the last hour (its heartbeats,
    state requests and deliveries): a gap is a silence. The minutes after the object's last
    merge are left out, not drawn as silence: a runtime that only polls has its requests
    merged once per ``listener.fleet.deliveries.BEATS_FLUSH_SECONDS`` per worker (its last
    contact is the Lease's, "Last heartbeat")."""
    by = {p.start: p for p in summary.series}
    slots = _slots(summary.series, now)
    merged = summary.updated
    beats = [
        float(by[s].beats) if s in by else None if merged is not None and s > merged else 0.0
        for s in slots
    ]
    title = "requests of the runtime per minute, last hour"
    if merged is not None and merged < now - datetime.timedelta(minutes=1):
        title += f" (merged up to {merged:%H:%M}Z)"
    return charts.line_chart([("beats", "requests seen", beats)], title=title, unit="")


def records_chart(summary: delivery.Summary, now: datetime.datetime) -> str:
    """Records per minute by source over the last hour (webhook, poller)."""
    by = {p.start: p for p in summary.series}
    slots = _slots(summary.series, now)
    web = [float(by[s].webhook) if s in by else 0.0 for s in slots]
    pol = [float(by[s].poller) if s in by else 0.0 for s in slots]
    return charts.line_chart(
        [("webhook", "webhook", web), ("poller", "poller only", pol)],
        title="records per minute by source, last hour",
        unit="",
    )
