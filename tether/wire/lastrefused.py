"""A runtime's last refusal per reason: ``status.lastRefused`` of its ``RuntimeDelivery``
(pure, plain data; ``tether.wire.delivery`` keeps the counts and merges both).

Beside the per-minute refusal counts the listener keeps, per runtime and reason, the newest
refusal: when (``tether.wire.delivery.fmt``, UTC), the status answered, and the refused object
when the refusal has one (a record refused by the quota or by the KCP); a request refused
before its records were read has none (the refused request was the runtime's own)::

    lastRefused:
      quota_records: {at: 2026-12-02T01:05:03.120000Z, status: 413, namespace: team-a, name: app}
      invalid_json: {at: 2026-12-02T01:04:59.000000Z, status: 400}

Bounded whatever the runtime sends: one entry per reason, at most ``MAX_LAST`` reasons (the
one refused longest ago is forgotten first), reasons cut to 40 characters and names (the
tenant's input) to 253. The newer entry of a reason wins, so merges commute. A stored map
written by hand or by an older version is reduced to what fits (``from_status``); an object
without one reads as {}.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Mapping
from typing import Any

MAX_LAST = 16
MAX_REASON = 40
MAX_TEXT = 253
_SCAN = 64  # entries of a stored map looked at (the CRD allows 16)
_AT = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z")  # as tether.wire.delivery.fmt writes

Entry = dict[str, Any]


def cut(text: object, limit: int = MAX_TEXT) -> str:
    s = str(text)
    return s if len(s) <= limit else s[: limit - 1] + "…"


def entry(at: str, status: object, namespace: object = "", name: object = "") -> Entry:
    """One refusal at ``at`` (a time as ``tether.wire.delivery.fmt`` writes it); the object only
    when it has a name."""
    code = status if isinstance(status, int) and not isinstance(status, bool) else 0
    e: Entry = {"at": at, "status": code if 0 <= code <= 999 else 0}
    if isinstance(name, str) and name:
        e.update(namespace=cut(namespace if isinstance(namespace, str) else ""), name=cut(name))
    return e


def note(into: dict[str, Entry], reason: str, e: Entry) -> None:
    """Keep ``e`` as ``reason``'s last refusal unless a newer one is kept; at most
    ``MAX_LAST`` reasons, the one refused longest ago forgotten first."""
    reason = cut(reason, MAX_REASON)
    old = into.get(reason)
    if old is not None and str(old["at"]) >= str(e["at"]):
        return
    into[reason] = e
    while len(into) > MAX_LAST:
        del into[min(into, key=lambda r: str(into[r]["at"]))]


def merged(older: Mapping[str, Entry], newer: Mapping[str, Entry]) -> dict[str, Entry]:
    out = dict(older)
    for reason, e in newer.items():
        note(out, reason, e)
    return out


def from_status(status: object) -> dict[str, Entry]:
    """The stored map of a ``RuntimeDelivery`` status, each entry reduced to its known
    fields with bounded values ({} without one)."""
    raw = status.get("lastRefused") if isinstance(status, Mapping) else None
    out: dict[str, Entry] = {}
    for reason, r in itertools.islice(raw.items() if isinstance(raw, Mapping) else (), _SCAN):
        at = r.get("at") if isinstance(r, Mapping) else None
        if isinstance(at, str) and _AT.fullmatch(at):
            note(
                out,
                str(reason),
                entry(at, r.get("status"), r.get("namespace", ""), r.get("name", "")),
            )
    return out
