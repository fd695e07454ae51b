"""A Watch's status from what one full enroller run found: a pure function of plain data
(no I/O, the time passed in), tested in tests/enroller/test_watchstatus.py;
``enroller.watching`` lists the Watches and writes the status when it changed.

``status.runtimes``: ``selected``, the runtimes the Watch applies to (``watches.in_force``
over their Kyma CRs, those being deleted left out); ``inForce``, of those the runtimes whose
installed registration holds the Watch at its generation; ``notInForce``, the first
``NOT_IN_FORCE_LISTED`` others by runtime ID with why (the runtime's enrollment failure, or
not rendered yet). Runtimes not selected are not listed.

Conditions follow ``metav1.Condition`` (``lastTransitionTime`` kept while a condition's
status does not change, ``observedGeneration`` the Watch's generation):

- ``Valid``: the Watch can be used (``Parsed``) or not (``Invalid``, the ``WatchError``
  message: the field and what is wrong);
- ``Ready``: the Watch is in force in every runtime it selects (``InForce``; also when it
  selects none: ``NoRuntimes``), else ``Pending`` (how many selected runtimes lack it) or
  ``Invalid``.

An unchanged outcome gives an equal status, so the caller writes only when it differs.
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

from tether.base import times

NOT_IN_FORCE_LISTED = 20  # the CRD's maxItems
REASON_MAX = 1024  # the CRD's maxLength of a notInForce reason


class RuntimeFacts(NamedTuple):
    """One runtime the Watch applies to."""

    runtime_id: str
    in_force: bool  # its installed registration holds the Watch at its generation
    why_not: str = ""  # when not in force: the enrollment's failure, else empty (not rendered yet)


class WatchFacts(NamedTuple):
    now: datetime.datetime
    generation: int
    previous: Mapping[str, Any] | None  # the Watch's status as served (None: none yet)
    error: str | None  # the WatchError's message; None: the Watch parsed
    runtimes: Sequence[RuntimeFacts]  # the runtimes it applies to (empty when invalid)


def status(f: WatchFacts) -> dict[str, Any]:
    """The Watch's ``status``."""
    in_force = sum(1 for r in f.runtimes if r.in_force)
    missing = sorted((r for r in f.runtimes if not r.in_force), key=lambda r: r.runtime_id)
    listed = [
        {
            "runtimeId": r.runtime_id[:63],
            "reason": (r.why_not or "not rendered into the runtime yet")[:REASON_MAX],
        }
        for r in missing[:NOT_IN_FORCE_LISTED]
    ]
    previous = {
        c.get("type"): c
        for c in ((f.previous or {}).get("conditions") or [])
        if isinstance(c, Mapping)
    }
    if f.error is not None:
        valid = _condition(f, previous, "Valid", False, "Invalid", f.error)
        ready = _condition(
            f, previous, "Ready", False, "Invalid", f"the Watch cannot be used: {f.error}"
        )
    else:
        valid = _condition(f, previous, "Valid", True, "Parsed", "the Watch can be used")
        if not f.runtimes:
            ready = _condition(
                f, previous, "Ready", True, "NoRuntimes", "the Watch selects no runtime"
            )
        elif missing:
            ready = _condition(
                f,
                previous,
                "Ready",
                False,
                "Pending",
                f"not in force in {len(missing)} of {len(f.runtimes)} selected runtimes",
            )
        else:
            ready = _condition(
                f,
                previous,
                "Ready",
                True,
                "InForce",
                f"in force in every selected runtime ({len(f.runtimes)})",
            )
    return {
        "observedGeneration": f.generation,
        "runtimes": {"selected": len(f.runtimes), "inForce": in_force, "notInForce": listed},
        "conditions": [valid, ready],
    }


def state(status: Mapping[str, Any]) -> str:
    """The Watch's state for the enroller's gauge: Ready, Pending or Invalid."""
    ready: Mapping[str, Any] = next(
        (c for c in status.get("conditions") or [] if c.get("type") == "Ready"), {}
    )
    if ready.get("status") == "True":
        return "Ready"
    return "Invalid" if ready.get("reason") == "Invalid" else "Pending"


def changed(previous: Mapping[str, Any] | None, new: Mapping[str, Any]) -> bool:
    """Whether ``new`` differs from the status as served (then it is written)."""
    return dict(previous or {}) != dict(new)


def _condition(
    f: WatchFacts,
    previous: Mapping[Any, Mapping[str, Any]],
    kind: str,
    ok: bool,
    reason: str,
    message: str,
) -> dict[str, Any]:
    state = "True" if ok else "False"
    old = previous.get(kind)
    since = (
        old.get("lastTransitionTime") if old and old.get("status") == state else None
    ) or times.format_time(f.now)
    return {
        "type": kind,
        "status": state,
        "reason": reason,
        "message": message[:1000],
        "observedGeneration": f.generation,
        "lastTransitionTime": since,
    }
