"""Tether's own parts, the Compass side and Events, as the admin pages show them (pure).

* ``parts_of``: each Deployment of Tether's namespace (ready/desired replicas, version = the
  image tag, Available) with its leader Lease, if it has one: the holder, when it renewed,
  and what the leader recorded of its last run (Lease annotations
  ``tether.kyma-project.io/last-run-at``, ``-result``, ``-seconds``).
* ``mappings_of`` / ``compass_of``: CompassMappings by state, and what compass
  publishes on its Lease (``tether.kyma-project.io/breaker``, ``.../director-errors``).
* ``events_of``: Events, newest first.
"""

from __future__ import annotations

import datetime
import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, NamedTuple

from tether.kube import apitypes
from tether.wire import delivery

# leader Lease name prefix -> the Deployment it belongs to
LEASE_OWNERS = (
    ("tether-compass", "tether-compass"),
    ("tether-enroller", "tether-enroller"),
    ("tether-janitor", "tether-janitor"),
)


class Leader(NamedTuple):
    lease: str
    holder: str
    renewed: datetime.datetime | None
    last_run: datetime.datetime | None
    last_result: str
    last_seconds: str


class Part(NamedTuple):
    name: str
    ready: int
    desired: int
    available: bool
    version: str
    leaders: tuple[Leader, ...]


class CompassMapping(NamedTuple):
    kyma: str
    runtime: str
    state: str
    reason: str
    message: str


class Compass(NamedTuple):
    breaker: str
    errors: tuple[dict[str, str], ...]
    leader: Leader | None


class Event(NamedTuple):
    at: datetime.datetime | None
    type: str
    reason: str
    kind: str
    message: str
    times: int


def _m(obj: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    v = obj.get(key)
    return v if isinstance(v, Mapping) else {}


def _cut(v: object, n: int) -> str:
    s = "" if v is None else str(v)
    return s if len(s) <= n else s[: n - 1] + "…"


def leader_of(lease: Mapping[str, Any]) -> Leader:
    meta, spec = _m(lease, "metadata"), _m(lease, "spec")
    ann = _m(meta, "annotations")
    return Leader(
        lease=_cut(meta.get("name"), 253),
        holder=_cut(spec.get("holderIdentity"), 253),
        renewed=delivery.parse(spec.get("renewTime")),
        last_run=delivery.parse(ann.get(apitypes.LAST_RUN_AT_ANNOTATION)),
        last_result=_cut(ann.get(apitypes.LAST_RUN_RESULT_ANNOTATION), 20),
        last_seconds=_cut(ann.get(apitypes.LAST_RUN_SECONDS_ANNOTATION), 20),
    )


def _owner(lease_name: str) -> str | None:
    for prefix, owner in LEASE_OWNERS:
        if lease_name == prefix or lease_name.startswith(prefix + "-"):
            return owner
    return None


def parts_of(
    deployments: Iterable[Mapping[str, Any]], leases: Iterable[Mapping[str, Any]]
) -> list[Part]:
    leaders: dict[str, list[Leader]] = {}
    for lease in leases:
        view = leader_of(lease)
        owner = _owner(view.lease)
        if owner is not None:
            leaders.setdefault(owner, []).append(view)
    out: list[Part] = []
    for d in deployments:
        meta, spec, status = _m(d, "metadata"), _m(d, "spec"), _m(d, "status")
        name = _cut(meta.get("name"), 253)
        containers = _m(_m(spec, "template"), "spec").get("containers") or []
        image = (
            str(containers[0].get("image", ""))
            if containers and isinstance(containers[0], Mapping)
            else ""
        )
        version = image.rpartition(":")[2] if ":" in image.rpartition("/")[2] else image
        conds = status.get("conditions") or []
        available = any(
            isinstance(c, Mapping) and c.get("type") == "Available" and c.get("status") == "True"
            for c in conds
        )
        replicas = spec.get("replicas", 1)
        out.append(
            Part(
                name=name,
                ready=int(status.get("readyReplicas") or 0),
                desired=int(replicas) if isinstance(replicas, int) else 1,
                available=available,
                version=_cut(version, 80),
                leaders=tuple(sorted(leaders.get(name, []), key=lambda x: x.lease)),
            )
        )
    out.sort(key=lambda p: (p.available and p.ready >= p.desired, p.name))
    return out


def mapping_of(o: Mapping[str, Any]) -> CompassMapping:
    meta, status = _m(o, "metadata"), _m(o, "status")
    labels = _m(meta, "labels")
    conds = status.get("conditions") or []
    ready = next((c for c in conds if isinstance(c, Mapping) and c.get("type") == "Ready"), None)
    worst = (
        ready
        or next((c for c in conds if isinstance(c, Mapping) and c.get("status") != "True"), None)
        or {}
    )
    return CompassMapping(
        kyma=_cut(labels.get(apitypes.KYMA_NAME_LABEL) or meta.get("name"), 253),
        runtime=_cut(labels.get(apitypes.COMPASS_RUNTIME_ID_LABEL), 64),
        state=_cut(status.get("state") or "Unknown", 40),
        reason=_cut(worst.get("reason"), 80),
        message=_cut(worst.get("message"), 300),
    )


def ordered_mappings(mappings: list[CompassMapping]) -> list[CompassMapping]:
    order = {"Failed": 0, "Processing": 1, "Unknown": 2, "Ready": 3}
    mappings.sort(key=lambda m: (order.get(m.state, 2), m.kyma))
    return mappings


def mappings_of(objs: Iterable[Mapping[str, Any]]) -> list[CompassMapping]:
    return ordered_mappings([mapping_of(o) for o in objs])


def states(mappings: Sequence[CompassMapping]) -> dict[str, int]:
    out: dict[str, int] = {}
    for m in mappings:
        out[m.state] = out.get(m.state, 0) + 1
    return out


def compass_of(leases: Iterable[Mapping[str, Any]]) -> Compass:
    for lease in leases:
        view = leader_of(lease)
        if _owner(view.lease) != "tether-compass":
            continue
        ann = _m(_m(lease, "metadata"), "annotations")
        errors: list[dict[str, str]] = []
        try:
            raw = json.loads(str(ann.get(apitypes.DIRECTOR_ERRORS_ANNOTATION) or "[]"))
        except ValueError:
            raw = []
        for e in raw[:5] if isinstance(raw, list) else []:
            if isinstance(e, Mapping):
                errors.append({k: _cut(e.get(k), 200) for k in ("at", "operation", "message")})
        return Compass(
            breaker=_cut(ann.get(apitypes.BREAKER_ANNOTATION) or "unknown", 20),
            errors=tuple(errors),
            leader=view,
        )
    return Compass(breaker="unknown", errors=(), leader=None)


def event_json(e: Event) -> dict[str, object]:
    """An Event as ``tether status -o json`` shows it."""
    return {
        "lastSeen": e.at.strftime("%Y-%m-%dT%H:%M:%SZ") if e.at else None,
        "type": e.type,
        "object": e.kind,
        "reason": e.reason,
        "message": e.message,
        "count": e.times,
    }


def events_of(items: Iterable[Mapping[str, Any]]) -> list[Event]:
    out: list[Event] = []
    for e in items:
        when = (
            delivery.parse(e.get("lastTimestamp"))
            or delivery.parse(e.get("eventTime"))
            or delivery.parse(_m(e, "metadata").get("creationTimestamp"))
        )
        count = e.get("count")
        out.append(
            Event(
                at=when,
                type=_cut(e.get("type"), 20),
                reason=_cut(e.get("reason"), 80),
                kind=_cut(_m(e, "involvedObject").get("kind"), 60),
                message=_cut(e.get("message"), 500),
                times=count if isinstance(count, int) else 1,
            )
        )
    epoch = datetime.datetime.min.replace(tzinfo=datetime.UTC)
    out.sort(key=lambda ev: ev.at or epoch, reverse=True)
    return out
