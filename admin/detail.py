"""``tether status RUNTIME``: one runtime in detail, as text (pure).

What the runtime page shows, for a terminal: its problems (each with its runbook), enrollment,
client certificate, heartbeat, last change and lag, the refusals of the last hour by reason
with their last refused object, when, and runbook, the records summary (last hour, stored
against the quota, the newest records) and Compass. Durations are human (``admin.views``).
Every value that comes from the KCP is printed on one line (control characters replaced), so
a tenant's object name cannot forge lines of the output.
"""

from __future__ import annotations

import datetime
import re
from collections.abc import Sequence
from typing import Any

from admin import fleet, parts, runbooks, views

RECENT = 5  # newest records printed
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def clean(value: object) -> str:
    """A value on one line: control characters (newlines, escapes) shown as ``?``."""
    return _CONTROL.sub("?", str(value))


def _table(head: tuple[str, ...], rows: list[list[str]], indent: str = "  ") -> list[str]:
    cells = [list(head), *rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(head))]
    return [
        (indent + "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True))).rstrip()
        for r in cells
    ]


def _facts(
    row: fleet.Row, mapping: parts.CompassMapping | None, now: datetime.datetime
) -> list[tuple[str, str]]:
    d = row.delivery
    enrolled = "Ready" if row.enrolled == "True" else f"{row.enrolled} ({row.enrollment_reason})"
    if row.enrollment_message:
        enrolled += f": {row.enrollment_message}"
    stored = f"{row.stored_records} records, {views.size(row.stored_bytes)}"
    if d.stored.get("recordLimit"):
        stored += (
            f" (quota {d.stored['recordLimit']} records, "
            f"{views.size(d.stored.get('byteLimit', 0))})"
        )
    if mapping is not None:
        compass = mapping.state + (
            f", Compass runtime {mapping.runtime}" if mapping.runtime else ""
        )
        if mapping.reason:
            compass += (
                f" ({mapping.reason}" + (f": {mapping.message}" if mapping.message else "") + ")"
            )
    else:
        compass = row.compass_state or "no mapping"
    return [
        ("Kyma CR", row.kyma + (" (being deleted)" if row.deleting else "")),
        *([("Muted", f"yes: {row.muted} (tether unmute {row.runtime_id})")] if row.muted else []),
        ("Enrollment", enrolled),
        (
            "Certificate",
            f"expires {views.until(row.certificate_not_after, now)} "
            f"({views.stamp(row.certificate_not_after)})",
        ),
        ("Heartbeat", f"{views.ago(row.heartbeat, now)} ({views.stamp(row.heartbeat)})"),
        ("Last change", f"{views.ago(d.last_change, now)} ({views.stamp(d.last_change)})"),
        ("Lag", f"p50 {views.seconds(d.lag_p50)}, p99 {views.seconds(d.lag_p99)} (last hour)"),
        (
            "Records",
            f"{d.records} in the last hour: {d.webhook} by the webhook, {d.poller} only "
            f"by the poller ({views.share(d.poller_share)}); {d.throttled} "
            "answered 429",
        ),
        ("Stored", stored),
        ("Compass", compass),
    ]


def lines(
    row: fleet.Row,
    mapping: parts.CompassMapping | None,
    links: runbooks.Links,
    now: datetime.datetime,
    note: str = "",
    events: Sequence[parts.Event] = (),
) -> list[str]:
    """The detail view of one runtime, line by line."""
    out = [f"Runtime {clean(row.runtime_id)}", ""]
    out += [f"{k + ':':<13}{clean(v)}" for k, v in _facts(row, mapping, now)]
    out += ["", "Problems:" if row.problems else "Problems: none"]
    for p in row.problems:
        out += [f"  {p}: {fleet.PROBLEM_TEXT.get(p, '')}", f"    runbook: {links.problem(p)}"]
    refused = runbooks.refusals(row.delivery, links)
    out += ["", "Refusals, last hour:" + ("" if refused else " none")]
    if refused:
        out += _table(
            ("REASON", "COUNT", "LAST OBJECT", "WHEN", "STATUS", "RUNBOOK"),
            [
                [
                    clean(r.reason),
                    str(r.refused),
                    clean(r.object),
                    views.ago(r.at, now) if r.at else "-",
                    str(r.status or "-"),
                    r.runbook,
                ]
                for r in refused
            ],
        )
    if row.delivery.throttled:
        out.append(f"  ({row.delivery.throttled} answered 429: {links.refusal('rate')})")
    recent: list[dict[str, Any]] = row.delivery.recent[:RECENT]
    out += [
        "",
        f"Newest records (of {len(row.delivery.recent)} kept):"
        if recent
        else "Newest records: none in the last hour",
    ]
    if recent:
        out += _table(
            ("AT", "OBJECT", "SOURCE", "LAG", "OUTCOME"),
            [
                [
                    clean(r.get("at", "")),
                    clean(f"{r.get('namespace', '')}/{r.get('name', '')}"),
                    clean(r.get("source", "")),
                    views.seconds(r.get("lagSeconds")),
                    clean(r.get("outcome", "")),
                ]
                for r in recent
            ],
        )
    out += ["", "Events:" if events else "Events: none"]
    if events:
        out += _table(
            ("LAST SEEN", "TYPE", "OBJECT", "REASON", "MESSAGE"),
            [
                [
                    views.ago(e.at, now) if e.at else "-",
                    clean(e.type),
                    clean(e.kind),
                    clean(e.reason),
                    clean(e.message) + (f" (x{e.times})" if e.times > 1 else ""),
                ]
                for e in events
            ],
        )
    if note:
        out += ["", f"Note: {clean(note)}"]
    return out
