"""A runtime's RuntimeEnrollment status from what one pass found: a pure function of plain
data (no I/O, the time passed in), tested in tests/enroller/test_conditions.py;
``enroller.reconcile`` writes it and emits the Events of its transitions.

Conditions follow ``metav1.Condition``: ``lastTransitionTime`` is kept while a condition's
status does not change, ``observedGeneration`` is the RuntimeEnrollment's generation.
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping
from typing import Any, NamedTuple

from tether.base import times

QUARANTINED = "MissedCARollover"  # the Quarantined condition's reason (and Ready's, while it lasts)
HEARTBEAT_STALE = datetime.timedelta(minutes=10)
QUARANTINE_MESSAGE = (
    "its client certificate is from a CA no longer trusted (it was not renewed before "
    "the CA rollover's deadline): the listener refuses it; it gets new certificates "
    "when the enroller reaches it"
)


class StatusFacts(NamedTuple):
    now: datetime.datetime
    previous: Mapping[str, Mapping[str, Any]]  # the conditions as last written, by type
    generation: int  # the RuntimeEnrollment's
    failure: tuple[str, str] | None  # (reason, message) of this pass's failure
    not_after: datetime.datetime | None  # the installed client certificate's (no failure)
    webhook_serving: bool | None  # the webhook Deployment has an available replica
    beat: datetime.datetime | None  # the listener last heard from the runtime
    quarantined: bool


def conditions(f: StatusFacts) -> list[dict[str, Any]]:
    """Ready, Enrolled, CertificateValid, WebhookServing, Heartbeat, Quarantined. A failed
    pass could not evaluate the certificate nor the webhook: those are kept as they were."""

    def cond(kind: str, ok: bool | None, reason: str, message: str) -> dict[str, Any]:
        return _condition(f, kind, ok, reason, message)

    if f.failure is not None:
        enrolled = cond("Enrolled", False, *f.failure)
        cert, hook = _kept(f, "CertificateValid"), _kept(f, "WebhookServing")
    else:
        assert f.not_after is not None
        enrolled = cond(
            "Enrolled", True, "Installed", "Tether's objects are installed in the runtime"
        )
        valid = (f.not_after - f.now).total_seconds() > 0
        cert = cond(
            "CertificateValid",
            valid,
            "Valid" if valid else "Expired",
            f"client certificate valid until {times.format_time(f.not_after)}",
        )
        hook = cond(
            "WebhookServing",
            f.webhook_serving,
            "Available" if f.webhook_serving else "NoAvailableReplicas",
            "the webhook Deployment has available replicas"
            if f.webhook_serving
            else "the webhook Deployment has no available replica",
        )
    fresh = f.beat is not None and f.now - f.beat <= HEARTBEAT_STALE
    heart = cond(
        "Heartbeat",
        fresh if f.beat is not None else None,
        "Recent" if fresh else "Stale" if f.beat is not None else "None",
        f"last delivery {times.format_time(f.beat)}"
        if f.beat is not None
        else "no delivery seen yet",
    )
    quarantine = cond(
        "Quarantined",
        f.quarantined,
        QUARANTINED if f.quarantined else "NotQuarantined",
        QUARANTINE_MESSAGE
        if f.quarantined
        else "its client certificate, if any, is from a trusted CA",
    )
    return [_ready(f, enrolled, cert, hook, quarantine), enrolled, cert, hook, heart, quarantine]


def _ready(
    f: StatusFacts,
    enrolled: Mapping[str, Any],
    cert: Mapping[str, Any],
    hook: Mapping[str, Any],
    quarantine: Mapping[str, Any],
) -> dict[str, Any]:
    """True when enrolled, the certificate valid and the webhook serving, not quarantined;
    else the reason of the first that is not (quarantine and a failure first)."""
    failure = f.failure
    ok = (
        failure is None
        and not f.quarantined
        and all(c["status"] == "True" for c in (enrolled, cert, hook))
    )
    why = (
        QUARANTINED
        if f.quarantined
        else failure[0]
        if failure
        else next((c["reason"] for c in (cert, hook) if c["status"] != "True"), "Ready")
    )
    return _condition(
        f,
        "Ready",
        ok,
        "Ready" if ok else why,
        "the runtime is connected"
        if ok
        else f"quarantined: {quarantine['message']}; {failure[1] if failure else ''}"
        if f.quarantined
        else (failure[1] if failure else f"{why}"),
    )


def _condition(
    f: StatusFacts, kind: str, ok: bool | None, reason: str, message: str
) -> dict[str, Any]:
    status = "Unknown" if ok is None else "True" if ok else "False"
    old = f.previous.get(kind)
    since = (
        old["lastTransitionTime"]
        if old and old.get("status") == status
        else times.format_time(f.now)
    )
    return {
        "type": kind,
        "status": status,
        "reason": reason,
        "message": message[:1000],
        "observedGeneration": f.generation,
        "lastTransitionTime": since,
    }


def _kept(f: StatusFacts, kind: str) -> dict[str, Any]:
    """A condition this pass could not evaluate: as it was (metav1.Condition fields
    completed, e.g. one written before observedGeneration was), else Unknown."""
    old = f.previous.get(kind)
    if not old:
        return _condition(f, kind, None, "Unknown", "not enrolled yet")
    return {
        "observedGeneration": f.generation,
        "reason": "Unknown",
        "message": "",
        "lastTransitionTime": times.format_time(f.now),
        **old,
    }


def certificate(
    result: Mapping[str, str] | None,
    remembered: Mapping[str, Any] | None,
    recorded: Mapping[str, Any] | None,
) -> Mapping[str, Any] | None:
    """``status.certificate``: this pass's (notAfter, caSerial), else as this process last
    wrote it, else as the RuntimeEnrollment records it; None: nothing known."""
    for cert in (
        result,
        (remembered or {}).get("certificate"),
        ((recorded or {}).get("status") or {}).get("certificate"),
    ):
        if cert:
            return cert
    return None
