"""Which Watch admits each record of a request, or why none does (pure).

The KCP's own check of what a runtime sends (docs/watches.md, "The records"): a v2 record
names its Watch, which must be in force for the runtime (``tether.wire.watches.in_force``); a
v1 record (a sender of the previous version) is taken through the runtime's *compat
Watch*: the first Watch by name in force for it that covers ConfigMaps (v1) and sends
``full``. Either way the record must then pass ``tether.wire.watches.violation``. A refusal has
a reason code (``REASONS``: the metric label, bounded) and a message naming the Watch and
what is wrong, never a value of the record.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, NamedTuple

from tether.wire import changes, conversion, watches

NOT_IN_FORCE, NO_COMPAT, VIOLATION = "watch_not_in_force", "no_compat_watch", "watch_violation"
REASONS = (NOT_IN_FORCE, NO_COMPAT, VIOLATION)
MAX_LISTED = 20  # refusals named in one answer


class Refused(NamedTuple):
    position: int  # in the request's records
    reason: str  # one of REASONS
    message: str


def in_force(
    all_watches: Iterable[watches.Watch], labels: Mapping[str, str], modules: Iterable[str]
) -> tuple[watches.Watch, ...]:
    """The Watches in force for a runtime whose Kyma CR has these labels and modules."""
    mods = frozenset(modules)
    return tuple(
        sorted((w for w in all_watches if watches.applies(w, labels, mods)), key=lambda w: w.name)
    )


def compat(ws: Iterable[watches.Watch]) -> watches.Watch | None:
    """The compat Watch among the Watches in force (by name): v1 records go through it."""
    return next(
        (
            w
            for w in sorted(ws, key=lambda w: w.name)
            if w.target == watches.CONFIGMAP and w.mode == "full"
        ),
        None,
    )


def watch_for(
    record: Mapping[str, Any], ws: Sequence[watches.Watch]
) -> watches.Watch | tuple[str, str]:
    """The Watch ``record`` is checked against, or (reason, message) when there is none."""
    if not conversion.is_v1(record):
        name = str(record.get("watch", ""))
        w = next((w for w in ws if w.name == name), None)
        if w is None:
            return NOT_IN_FORCE, f"the watch {name} is not in force for this runtime"
        return w
    w = compat(ws)
    if w is None:
        return NO_COMPAT, (
            "a v1 record needs a watch in force for this runtime that covers "
            "ConfigMap v1 in mode full; there is none"
        )
    return w


def check(records: Sequence[Mapping[str, Any]], ws: Sequence[watches.Watch]) -> list[Refused]:
    """Every record's refusal (empty: each is admitted by its Watch)."""
    out: list[Refused] = []
    for i, rec in enumerate(records):
        w = watch_for(rec, ws)
        if not isinstance(w, watches.Watch):
            out.append(Refused(i, *w))
            continue
        why = watches.violation(w, rec)
        if why is not None:
            out.append(Refused(i, VIOLATION, why))
    return out


def assign(records: Iterable[changes.ChangeRecord], ws: Sequence[watches.Watch]) -> None:
    """Give each admitted v1 record its compat Watch and kind, as it is stored: the listener's
    intake of the previous version's records (``conversion.upgrade``)."""
    w = compat(ws)
    for rec in records:
        if conversion.is_v1(rec) and w is not None:
            conversion.upgrade(rec, w)


def details(refused: Sequence[Refused], batch: bool) -> list[dict[str, str]]:
    """The answer's list of refused records (at most ``MAX_LISTED``)."""
    prefix = "$.items[{}]" if batch else "$"
    return [
        {"path": prefix.format(r.position), "reason": r.reason, "message": r.message}
        for r in refused[:MAX_LISTED]
    ]
