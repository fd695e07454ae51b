"""The fleet as rows: every runtime's facts and problems, from the KCP's objects (pure).

``build(objects, thresholds, now)`` turns what ``admin.snapshot`` listed (plain dicts: Kyma
CRs, RuntimeEnrollments, heartbeat Leases, RuntimeDeliveries, CompassMappings) into
one ``Row`` per runtime, sorted worst first; ``select`` searches and pages them. The admin
pages, ``tether status`` and the fleet metrics all read these rows, so the three agree.

A runtime is a Kyma CR (its ``kyma-project.io/runtime-id`` label); a RuntimeDelivery or
heartbeat Lease without a Kyma CR (a deleted runtime the janitor has not removed yet) is not
part of the fleet.
"""

from __future__ import annotations

import datetime
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, NamedTuple

from tether.kube import apitypes, kyma
from tether.wire import delivery

# Problems, most severe first (their weight orders the fleet page).
PROBLEMS: tuple[str, ...] = (
    "not_enrolled",
    "silent",
    "webhook_path_failing",
    "certificate_expiring",
    "refusing",
    "compass_failed",
)
_WEIGHT = {p: 2 ** (len(PROBLEMS) - i) for i, p in enumerate(PROBLEMS)}
PROBLEM_TEXT = {
    "not_enrolled": "enrollment not Ready",
    "silent": "no heartbeat",
    "webhook_path_failing": "most changes only delivered by the poller",
    "certificate_expiring": "client certificate expiring",
    "refusing": "the listener refuses its records",
    "compass_failed": "Compass registration failed",
}


class Thresholds(NamedTuple):
    silent_seconds: float = 300.0
    certificate_warning_seconds: float = 86_400.0
    poller_share: float = 0.5  # webhook path failing when at least this share ...
    poller_min_records: int = 5  # ... of at least this many records of the last hour
    refusals: int = 5  # refusals (not 429) in the last hour


class Objects(NamedTuple):
    """What the snapshot listed (plain dicts as the API served them)."""

    kymas: Sequence[Mapping[str, Any]]
    enrollments: Sequence[Mapping[str, Any]] = ()
    heartbeats: Sequence[Mapping[str, Any]] = ()
    deliveries: Sequence[Mapping[str, Any]] = ()
    mappings: Sequence[Mapping[str, Any]] = ()


class Row(NamedTuple):
    runtime_id: str
    kyma: str  # namespace/name of the Kyma CR
    created: datetime.datetime | None
    deleting: bool
    enrolled: str  # "True", "False", "Unknown" (no RuntimeEnrollment)
    enrollment_reason: str
    enrollment_message: str
    certificate_not_after: datetime.datetime | None
    heartbeat: datetime.datetime | None
    compass_state: str  # the mapping's state, "" without a mapping
    compass_reason: str
    delivery: delivery.Summary
    problems: tuple[str, ...]
    delivery_object: str = ""  # name of its RuntimeDelivery ("" without one)
    muted: str | None = None  # why an operator muted it (``tether mute``), None: not muted

    @property
    def score(self) -> int:
        return sum(_WEIGHT[p] for p in self.problems)

    @property
    def stored_records(self) -> int:
        return self.delivery.stored.get("records", 0)

    @property
    def stored_bytes(self) -> int:
        return self.delivery.stored.get("bytes", 0)


def _meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    m = obj.get("metadata")
    return m if isinstance(m, Mapping) else {}


def _labels(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    lab = _meta(obj).get("labels")
    return lab if isinstance(lab, Mapping) else {}


def _annotations(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    ann = _meta(obj).get("annotations")
    return ann if isinstance(ann, Mapping) else {}


def _status(obj: Mapping[str, Any] | None) -> Mapping[str, Any]:
    s = (obj or {}).get("status")
    return s if isinstance(s, Mapping) else {}


def condition(obj: Mapping[str, Any] | None, kind: str) -> Mapping[str, Any] | None:
    conds = _status(obj).get("conditions")
    for c in conds if isinstance(conds, list) else []:
        if isinstance(c, Mapping) and c.get("type") == kind:
            return c
    return None


def problems_of(row: Row, t: Thresholds, now: datetime.datetime) -> tuple[str, ...]:
    """Which problems a runtime has (pure; the order of ``PROBLEMS``)."""
    if row.deleting:
        return ()
    found: list[str] = []
    if row.enrolled != "True":
        found.append("not_enrolled")
    since = row.heartbeat or row.created
    # a muted runtime is refused on purpose (``tether mute``): its silence is no problem
    if row.muted is None and since is not None and (now - since).total_seconds() > t.silent_seconds:
        found.append("silent")
    d = row.delivery
    if d.records >= t.poller_min_records and (d.poller_share or 0.0) >= t.poller_share:
        found.append("webhook_path_failing")
    if (
        row.certificate_not_after is not None
        and (row.certificate_not_after - now).total_seconds() < t.certificate_warning_seconds
    ):
        found.append("certificate_expiring")
    if d.refusals >= t.refusals:
        found.append("refusing")
    if row.compass_state == "Failed":
        found.append("compass_failed")
    return tuple(found)


class EnrollmentView(NamedTuple):
    ready: str
    reason: str
    message: str
    not_after: datetime.datetime | None


class Index:
    """What the rows need of each kind, kept small and added one object at a time, so a
    listing of thousands of runtimes never holds more than one page of raw objects."""

    def __init__(self, now: datetime.datetime) -> None:
        self.now = now
        self.enrollments: dict[str, EnrollmentView] = {}
        self.beats: dict[str, datetime.datetime | None] = {}
        self.deliveries: dict[str, tuple[delivery.Summary, str]] = {}
        self.mappings: dict[str, tuple[str, str]] = {}

    def add_enrollment(self, o: Mapping[str, Any]) -> None:
        spec = o.get("spec")
        name = spec.get("kymaName") if isinstance(spec, Mapping) else None
        name = name or _meta(o).get("name")
        if not isinstance(name, str) or not name:
            return
        ready = condition(o, "Ready")
        cert = _status(o).get("certificate")
        self.enrollments[name] = EnrollmentView(
            ready=str(ready.get("status", "Unknown")) if ready else "Unknown",
            reason=str(ready.get("reason", ""))[:80] if ready else "NoCondition",
            message=str(ready.get("message", ""))[:300] if ready else "",
            not_after=delivery.parse(cert.get("notAfter")) if isinstance(cert, Mapping) else None,
        )

    def add_heartbeat(self, o: Mapping[str, Any]) -> None:
        rid = _labels(o).get(apitypes.RUNTIME_ID_LABEL)
        if isinstance(rid, str) and rid:
            spec = o.get("spec")
            self.beats[rid] = (
                delivery.parse(spec.get("renewTime")) if isinstance(spec, Mapping) else None
            )

    def add_delivery(self, o: Mapping[str, Any], lean: bool = False) -> None:
        """``lean``: the per-minute series, recent records and last refusals are dropped
        (the runtime page reads them fresh); the totals of the hour are kept."""
        rid = _labels(o).get(apitypes.RUNTIME_ID_LABEL)
        if not isinstance(rid, str) or not rid:
            return
        summary = delivery.summarize(_status(o), self.now)
        if lean:
            summary = summary._replace(series=[], recent=[], last_refused={})
        self.deliveries[rid] = (summary, str(_meta(o).get("name", ""))[:253])

    def add_mapping(self, o: Mapping[str, Any]) -> None:
        name = _labels(o).get(apitypes.KYMA_NAME_LABEL)
        if isinstance(name, str) and name:
            ready = condition(o, "Ready")
            self.mappings[name] = (
                str(_status(o).get("state", ""))[:40],
                str((ready or {}).get("reason", ""))[:80],
            )

    def row(self, k: Mapping[str, Any], t: Thresholds) -> Row | None:
        meta = _meta(k)
        rid = _labels(k).get(apitypes.RUNTIME_ID_LABEL)
        name = meta.get("name")
        if not isinstance(rid, str) or not rid or not isinstance(name, str):
            return None
        enr = self.enrollments.get(name)
        summary, object_name = self.deliveries.get(rid, (EMPTY, ""))
        state, reason = self.mappings.get(name, ("", ""))
        row = Row(
            runtime_id=rid,
            kyma=f"{meta.get('namespace', '')}/{name}",
            created=delivery.parse(meta.get("creationTimestamp")),
            deleting=bool(meta.get("deletionTimestamp")),
            enrolled=enr.ready if enr else "Unknown",
            enrollment_reason=enr.reason if enr else "NoEnrollment",
            enrollment_message=enr.message if enr else "",
            certificate_not_after=enr.not_after if enr else None,
            heartbeat=self.beats.get(rid),
            compass_state=state,
            compass_reason=reason,
            delivery=summary,
            problems=(),
            delivery_object=object_name,
            muted=kyma.muted_reason(_annotations(k).get(apitypes.MUTED_ANNOTATION)),
        )
        return row._replace(problems=problems_of(row, t, self.now))


EMPTY = delivery.summarize(None, datetime.datetime(2000, 1, 1, tzinfo=datetime.UTC))


def ordered(rows: list[Row]) -> list[Row]:
    """Worst first, then by the share of poller-only records, then by runtime ID."""
    rows.sort(key=lambda r: (-r.score, -(r.delivery.poller_share or 0.0), r.runtime_id))
    return rows


def build(objs: Objects, t: Thresholds, now: datetime.datetime) -> list[Row]:
    """One row per Kyma CR with a runtime ID, worst first (then by runtime ID)."""
    index = Index(now)
    for o in objs.enrollments:
        index.add_enrollment(o)
    for o in objs.heartbeats:
        index.add_heartbeat(o)
    for o in objs.deliveries:
        index.add_delivery(o)
    for o in objs.mappings:
        index.add_mapping(o)
    return ordered([r for k in objs.kymas if (r := index.row(k, t)) is not None])


class Page(NamedTuple):
    rows: list[Row]
    number: int  # 1-based
    pages: int
    total: int  # rows matching the query


def select(
    rows: Sequence[Row], query: str = "", problem: str = "", page: int = 1, size: int = 50
) -> Page:
    """Rows whose runtime ID or Kyma name contains ``query`` (case-insensitive) and that
    have ``problem`` (when given), page ``page`` of ``size``."""
    q = query.strip().lower()
    hits = [
        r
        for r in rows
        if (not q or q in r.runtime_id.lower() or q in r.kyma.lower())
        and (not problem or problem in r.problems)
    ]
    pages = max(1, -(-len(hits) // size))
    number = min(max(1, page), pages)
    return Page(hits[(number - 1) * size : number * size], number, pages, len(hits))


def counts(rows: Iterable[Row]) -> dict[str, int]:
    """How many runtimes have each problem (every problem named, zeros included)."""
    out = dict.fromkeys(PROBLEMS, 0)
    for r in rows:
        for p in r.problems:
            out[p] += 1
    return out


def problem_series(rows: Sequence[Row], cap: int) -> tuple[list[tuple[str, str]], int]:
    """(runtime ID, problem) pairs for the per-runtime metric, worst runtimes first, at most
    ``cap``; and how many pairs were left out."""
    pairs = [(r.runtime_id, p) for r in rows for p in r.problems]
    return pairs[:cap], max(0, len(pairs) - cap)


def as_json(row: Row) -> dict[str, Any]:
    """A row as plain JSON (``tether status -o json``)."""
    d = row.delivery

    def t(v: datetime.datetime | None) -> str | None:
        return None if v is None else delivery.fmt(v)

    return {
        "runtimeId": row.runtime_id,
        "kyma": row.kyma,
        "deleting": row.deleting,
        "muted": row.muted,
        "problems": list(row.problems),
        "enrollment": {
            "ready": row.enrolled,
            "reason": row.enrollment_reason,
            "message": row.enrollment_message,
            "certificateNotAfter": t(row.certificate_not_after),
        },
        "lastHeartbeat": t(row.heartbeat),
        "lastChange": t(d.last_change),
        "lastHour": {
            "records": d.records,
            "webhook": d.webhook,
            "poller": d.poller,
            "pollerShare": d.poller_share,
            "lagP50Seconds": d.lag_p50,
            "lagP99Seconds": d.lag_p99,
            "refusals": d.refused,
            "throttled": d.throttled,
        },
        "stored": d.stored,
        "compass": {"state": row.compass_state, "reason": row.compass_reason},
    }
