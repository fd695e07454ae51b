"""The runtime bundle's rollout as the admin page ``/rollout`` shows it: read per request from
the enroller's ConfigMap (``apitypes.BUNDLE_ROLLOUT_CONFIGMAP`` in Tether's namespace, its
``state.json`` as ``enroller.rollouts`` writes it), made plain data for the template. A
record that does not parse is shown as such, never a 500."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, NamedTuple

from tether.base import logs
from tether.kube import apitypes, gateway

PHASES = ("Progressing", "Halted", "RolledBack", "Complete")
MAX_SHOWN = 200  # runtime IDs shown per wave; the rest counted


class Wave(NamedTuple):
    number: int
    status: str  # passed, gating, failed, pending
    runtimes: tuple[str, ...]  # at most MAX_SHOWN
    size: int


class Rollout(NamedTuple):
    phase: str
    target: str
    good: str
    started: str
    reason: str
    waves: tuple[Wave, ...]
    unhealthy: tuple[tuple[str, str], ...]


def read(kcp: gateway.Kube, namespace: str, timeout: float) -> tuple[Rollout | None, str]:
    """The rollout (None: none recorded or not readable) and what is wrong ("" nothing)."""
    try:
        cm = kcp.get_or_none(
            gateway.CONFIGMAPS, namespace, apitypes.BUNDLE_ROLLOUT_CONFIGMAP, timeout=timeout
        )
    except gateway.GatewayError as e:
        return None, "the rollout's ConfigMap could not be read: " + logs.bounded(e, 160)
    raw = ((cm or {}).get("data") or {}).get("state.json")
    if raw is None:
        return None, ""
    try:
        return of(json.loads(raw)), ""
    except (ValueError, TypeError, KeyError, AttributeError):
        return None, "the rollout's record (state.json) does not parse"


def _status(i: int, current: int, phase: str) -> str:
    if phase == "Complete" or i < current:
        return "passed"
    if i > current:
        return "pending"
    return "gating" if phase == "Progressing" else "failed"


def of(d: Mapping[str, Any]) -> Rollout:
    phase = str(d["phase"])
    if phase not in PHASES:
        raise ValueError(phase)
    current = int(d["wave"])
    waves = tuple(
        Wave(i + 1, _status(i, current, phase), tuple(str(r) for r in w[:MAX_SHOWN]), len(w))
        for i, w in enumerate(d["waves"])
    )
    unhealthy = tuple((str(a), str(b)) for a, b in (d.get("unhealthy") or [])[:MAX_SHOWN])
    return Rollout(
        phase,
        str(d["target"]),
        str(d.get("good") or ""),
        str(d.get("started", "")),
        str(d.get("reason", ""))[:2000],
        waves,
        unhealthy,
    )
