"""The mapping's status as pure functions of the previous status (plain dicts).

Fields (compatible with compass-manager's ``registered``, ``configured``, ``state``):
``registered``, ``configured``, ``state`` (Ready/Processing/Failed), ``conditions``
(``metav1.Condition``: types ``Registered``, ``Configured`` and the summary ``Ready``, each
with status True/False/Unknown, observedGeneration, lastTransitionTime (moved only when the
status changes), a CamelCase reason and a bounded message), ``observedGeneration``, and
Tether's own ``runtimeConnected``, ``tokenExpiresAt``, ``secretDigest`` (SHA-256 of the
delivered Secret's data, never the token), ``failures`` and ``nextAttemptAt`` (the
per-runtime backoff, persisted so a restart keeps it).

Every status written passes through ``finish`` (the ``Ready`` condition, the generations).
"""

from __future__ import annotations

import datetime
import hashlib
import random
from collections.abc import Mapping
from typing import Any

from compass import model

REGISTERED, CONFIGURED, READY = "Registered", "Configured", "Ready"
MESSAGE_LIMIT = 1000
_GOOD_REASONS = ("Registered", "TokenDelivered", "RuntimeConnected", "SecretKept")


def backoff_delay(
    failures: int, base: float, cap: float, rng: random.Random | None = None
) -> float:
    """Exponential backoff with jitter: between half and all of min(cap, base*2^(n-1))."""
    n = max(1, failures)
    ceiling = min(cap, base * (2.0 ** min(n - 1, 30)))
    r = float((rng or random).random())
    return ceiling / 2 + r * ceiling / 2


def digest(data: Mapping[str, str]) -> str:
    """SHA-256 over the Secret's keys and values (base64 strings as stored)."""
    h = hashlib.sha256()
    for k in sorted(data):
        h.update(k.encode() + b"\0" + str(data[k]).encode() + b"\0")
    return h.hexdigest()


def _set_condition(
    conds: list[dict[str, Any]],
    ctype: str,
    ok: bool,
    reason: str,
    message: str,
    now: datetime.datetime,
) -> list[dict[str, Any]]:
    out = [dict(c) for c in conds if c.get("type") != ctype]
    prev = next((c for c in conds if c.get("type") == ctype), None)
    status = "True" if ok else "False"
    changed = prev is None or prev.get("status") != status
    out.append(
        {
            "type": ctype,
            "status": status,
            "reason": reason or "Unknown",
            "message": message[:MESSAGE_LIMIT],
            "lastTransitionTime": model.format_time(now)
            if changed
            else prev.get("lastTransitionTime", model.format_time(now)),  # type: ignore[union-attr]
        }
    )
    return sorted(out, key=lambda c: str(c["type"]))


def _base(prev: Mapping[str, Any]) -> dict[str, Any]:
    st = dict(prev)
    st.setdefault("registered", False)
    st.setdefault("configured", False)
    st["conditions"] = list(prev.get("conditions") or [])
    return st


def _overall(st: dict[str, Any]) -> str:
    return "Ready" if st.get("registered") and st.get("configured") else "Processing"


def processing(
    prev: Mapping[str, Any], now: datetime.datetime, reason: str, message: str
) -> dict[str, Any]:
    st = _base(prev)
    st["state"] = "Processing"
    st["conditions"] = _set_condition(
        st["conditions"], REGISTERED, bool(st["registered"]), reason, message, now
    )
    return st


def invalid(
    prev: Mapping[str, Any], now: datetime.datetime, reason: str, message: str
) -> dict[str, Any]:
    st = _base(prev)
    st["state"] = "Failed"
    st["conditions"] = _set_condition(st["conditions"], REGISTERED, False, reason, message, now)
    return st


def registered(
    prev: Mapping[str, Any], now: datetime.datetime, runtime_id: str, adopted: bool
) -> dict[str, Any]:
    st = _base(prev)
    st["registered"] = True
    st["failures"], st["nextAttemptAt"] = 0, None
    how = "found in the Director (registered earlier)" if adopted else "registered in the Director"
    st["conditions"] = _set_condition(
        st["conditions"], REGISTERED, True, "Registered", f"runtime {runtime_id} {how}", now
    )
    st["state"] = _overall(st)
    return st


def forgotten(
    prev: Mapping[str, Any], now: datetime.datetime, reason: str, message: str
) -> dict[str, Any]:
    st = _base(prev)
    st.update(
        registered=False,
        configured=False,
        runtimeConnected=False,
        tokenExpiresAt=None,
        secretDigest=None,
        state="Processing",
    )
    st["conditions"] = _set_condition(st["conditions"], REGISTERED, False, reason, message, now)
    return st


def configured(
    prev: Mapping[str, Any],
    now: datetime.datetime,
    *,
    token_expires_at: str,
    secret_digest: str,
    reason: str,
) -> dict[str, Any]:
    why = f" ({reason})" if reason and reason != "NotConfigured" else ""
    return _token_held(
        prev,
        now,
        token_expires_at,
        secret_digest,
        "TokenDelivered",
        f"one-time token delivered to the runtime{why}",
    )


def kept(
    prev: Mapping[str, Any], now: datetime.datetime, token_expires_at: str, secret_digest: str
) -> dict[str, Any]:
    """An adopted runtime's working agent Secret, kept as it is (not written by Tether)."""
    return _token_held(
        prev,
        now,
        token_expires_at,
        secret_digest,
        "SecretKept",
        "the runtime's agent Secret works; kept as it is",
    )


def _token_held(
    prev: Mapping[str, Any],
    now: datetime.datetime,
    token_expires_at: str,
    secret_digest: str,
    reason: str,
    message: str,
) -> dict[str, Any]:
    """The runtime holds a working token (``reason``: how it came to)."""
    st = _base(prev)
    st.update(
        configured=True,
        tokenExpiresAt=token_expires_at,
        secretDigest=secret_digest,
        failures=0,
        nextAttemptAt=None,
    )
    st["conditions"] = _set_condition(st["conditions"], CONFIGURED, True, reason, message, now)
    st["state"] = _overall(st)
    return st


def connected(prev: Mapping[str, Any], now: datetime.datetime) -> dict[str, Any]:
    st = _base(prev)
    st.update(
        runtimeConnected=True, registered=True, configured=True, failures=0, nextAttemptAt=None
    )
    st["conditions"] = _set_condition(
        st["conditions"],
        CONFIGURED,
        True,
        "RuntimeConnected",
        "the runtime agent connected to Compass",
        now,
    )
    st["state"] = "Ready"
    return st


def ready(prev: Mapping[str, Any], now: datetime.datetime) -> dict[str, Any]:
    st = _base(prev)
    st.update(failures=0, nextAttemptAt=None)
    st["state"] = _overall(st)
    return st


def failure(
    prev: Mapping[str, Any],
    now: datetime.datetime,
    *,
    ctype: str,
    reason: str,
    message: str,
    permanent: bool,
    delay: float,
) -> dict[str, Any]:
    """A failed step: condition with the reason, backoff counted up. Transient failures
    (Director unavailable, runtime unreachable) keep ``Processing``; errors that need a
    person (invalid input, unauthorized) are ``Failed``; both are retried."""
    st = _base(prev)
    st["failures"] = int(prev.get("failures") or 0) + 1
    st["nextAttemptAt"] = model.format_time(now + datetime.timedelta(seconds=delay))
    ok = bool(st.get("registered")) if ctype == REGISTERED else False
    st["conditions"] = _set_condition(st["conditions"], ctype, ok, reason, message, now)
    st["state"] = "Failed" if permanent else "Processing"
    return st


def _ready_condition(st: Mapping[str, Any]) -> tuple[bool, str, str]:
    """(ok, reason, message) of the summary: True when ``state`` is Ready; else the reason
    of the first condition that is not True, or of one that reports a failure."""
    if st.get("state") == "Ready":
        how = (
            "the runtime agent connected to Compass"
            if st.get("runtimeConnected")
            else "registered in Compass, one-time token delivered to the runtime"
        )
        return True, "Ready", how
    conds = {c.get("type"): c for c in st.get("conditions") or [] if isinstance(c, Mapping)}
    ordered = [conds[t] for t in (REGISTERED, CONFIGURED) if t in conds]
    bad = next((c for c in ordered if c.get("status") != "True"), None) or next(
        (c for c in ordered if c.get("reason") not in _GOOD_REASONS), None
    )
    if bad is not None:
        return False, str(bad.get("reason") or "Processing"), str(bad.get("message") or "")
    if not st.get("registered"):
        return False, "Registering", "not registered in the Director yet"
    return False, "Configuring", "no one-time token delivered to the runtime yet"


def finish(prev: Mapping[str, Any], generation: int, now: datetime.datetime) -> dict[str, Any]:
    """The status as written: the ``Ready`` summary condition set from the others, and
    ``observedGeneration`` on the status and on every condition (each pass evaluates the
    whole mapping). Pure; idempotent."""
    st = _base(prev)
    ok, reason, message = _ready_condition(st)
    conds = _set_condition(
        [dict(c) for c in st["conditions"] if isinstance(c, Mapping)],
        READY,
        ok,
        reason,
        message,
        now,
    )
    st["conditions"] = [{**c, "observedGeneration": generation} for c in conds]
    st["observedGeneration"] = generation
    return st
