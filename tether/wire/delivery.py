"""Per-runtime delivery health: the ``RuntimeDelivery`` summary (pure, plain data).

The listener accumulates, per runtime, what happened to that runtime's requests (records
by source, delivery lag = persist time minus the record's ``observedAt``, refusals and
429s) in a ``Delta`` and merges it into the runtime's ``RuntimeDelivery`` object in the KCP
(``merge``); the admin pages and ``tether status`` read those objects (``summarize``).

Bounded by construction, whatever a runtime sends: one bucket per minute for the last
``WINDOW_MINUTES``, a fixed lag histogram (``LAG_BOUNDS``) per bucket, at most
``MAX_REASONS`` refusal reasons per bucket (the rest count as ``other``), the last
``RECENT`` records, the last refusal per reason (``tether.wire.lastrefused``), every string cut
to a fixed length. Counts from several workers and replicas add up: ``merge`` is a sum per
minute, so the order of merges does not matter.

Object (``tether.kyma-project.io/v1alpha1``, kind ``RuntimeDelivery``, one per runtime,
named like its heartbeat Lease)::

    status:
      runtimeId: 4a1f...
      updatedAt: 2026-12-02T01:05:07.000000Z
      lastChangeAt: 2026-12-02T01:05:03.120000Z     # newest persisted record
      stored: {records: 12, bytes: 40960, recordLimit: 10000, byteLimit: 52428800}
      minutes:
        - {start: 2026-12-02T01:05:00Z, webhook: 3, poller: 1,
           lag: [0, 2, 1, 0, 1, 0, 0, 0, 0, 0, 0, 0], refused: {quota: 1}, throttled: 0}
      recent:
        - {at: ..., namespace: team-a, name: app, source: webhook, lagSeconds: 0.04,
           outcome: persisted, traceId: 4bf92f3577b34da6a3ce929d0e0e4736}  # tether.base.tracing
      lastRefused: {quota_records: {at: ..., status: 413, namespace: team-a, name: app}}
"""

from __future__ import annotations

import datetime
import itertools
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, NamedTuple

from tether.kube import apitypes
from tether.wire import lastrefused

# Upper bounds (seconds) of the lag buckets; one more bucket counts everything above.
LAG_BOUNDS: tuple[float, ...] = (0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 300.0)
N_LAG = len(LAG_BOUNDS) + 1
WINDOW_MINUTES = 60
MAX_REASONS = 8
RECENT = 20
MAX_TEXT = 253
MAX_COUNT = 10**12

Source = Literal["webhook", "poller"]
Outcome = Literal["persisted", "duplicate", "stale", "refused"]
SOURCES: tuple[Source, ...] = ("webhook", "poller")


def minute_of(t: datetime.datetime) -> datetime.datetime:
    return t.astimezone(datetime.UTC).replace(second=0, microsecond=0)


def fmt(t: datetime.datetime) -> str:
    return t.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def parse(text: object) -> datetime.datetime | None:
    """A time this module wrote (or any RFC 3339 UTC time); None for anything else."""
    if not isinstance(text, str) or len(text) > 40:
        return None
    try:
        t = datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    return t.astimezone(datetime.UTC) if t.tzinfo else None


def lag_bucket(seconds: float) -> int:
    """Index of the bucket that counts a lag (negative lags, from clock skew, count as 0)."""
    for i, bound in enumerate(LAG_BOUNDS):
        if seconds <= bound:
            return i
    return len(LAG_BOUNDS)


def _cut(text: object, limit: int = MAX_TEXT) -> str:
    s = str(text)
    return s if len(s) <= limit else s[: limit - 1] + "…"


@dataclass
class Minute:
    webhook: int = 0
    poller: int = 0
    lag: list[int] = field(default_factory=lambda: [0] * N_LAG)
    refused: dict[str, int] = field(default_factory=dict)
    throttled: int = 0
    beats: int = 0  # authenticated requests of the runtime (heartbeats, deliveries, state)

    def refuse(self, reason: str) -> None:
        reason = _cut(reason, 40)
        if reason not in self.refused and len(self.refused) >= MAX_REASONS:
            reason = "other"
        self.refused[reason] = self.refused.get(reason, 0) + 1


@dataclass
class Delta:
    """What one worker saw of one runtime since its last merge. Bounded: a minute bucket per
    minute (at most ``WINDOW_MINUTES`` kept), the last ``RECENT`` records."""

    minutes: dict[datetime.datetime, Minute] = field(default_factory=dict)
    recent: list[dict[str, Any]] = field(default_factory=list)
    last_change: datetime.datetime | None = None
    stored: dict[str, int] | None = None
    last_refused: dict[str, dict[str, Any]] = field(default_factory=dict)

    def _minute(self, now: datetime.datetime) -> Minute:
        m = minute_of(now)
        bucket = self.minutes.get(m)
        if bucket is None:
            bucket = self.minutes[m] = Minute()
            while len(self.minutes) > WINDOW_MINUTES:
                del self.minutes[min(self.minutes)]
        return bucket

    def record(
        self,
        now: datetime.datetime,
        source: str,
        observed_at: datetime.datetime | None,
        outcome: Outcome,
        namespace: str,
        name: str,
        trace_id: str = "",
    ) -> float | None:
        """One record handled; returns its lag in seconds (None without a usable
        ``observedAt``). Only persisted records count towards lag and source shares."""
        lag = None if observed_at is None else max(0.0, (now - observed_at).total_seconds())
        bucket = self._minute(now)
        if outcome == "persisted":
            if source == "poller":
                bucket.poller += 1
            else:
                bucket.webhook += 1
            if lag is not None:
                bucket.lag[lag_bucket(lag)] += 1
            if self.last_change is None or now > self.last_change:
                self.last_change = now
        self.recent.append(
            _traced(
                {
                    "at": fmt(now),
                    "namespace": _cut(namespace),
                    "name": _cut(name),
                    "source": "poller" if source == "poller" else "webhook",
                    "lagSeconds": None if lag is None else round(lag, 6),
                    "outcome": outcome,
                },
                trace_id,
            )
        )
        del self.recent[:-RECENT]
        return lag

    def refuse(
        self, now: datetime.datetime, reason: str, status: int, namespace: str = "", name: str = ""
    ) -> None:
        """A refusal (429: throttled); else also its reason's last (``tether.wire.lastrefused``)."""
        bucket = self._minute(now)
        if status == 429:
            bucket.throttled += 1
        else:
            bucket.refuse(reason)
            lastrefused.note(
                self.last_refused, reason, lastrefused.entry(fmt(now), status, namespace, name)
            )

    def seen(self, now: datetime.datetime, n: int = 1) -> None:
        """``n`` authenticated requests of the runtime in ``now``'s minute (its heartbeat
        history; ``listener.fleet.beatcounts`` holds them compactly until a merge)."""
        bucket = self._minute(now)
        bucket.beats = _add(bucket.beats, n)

    def empty(self) -> bool:
        return not self.minutes and not self.recent and self.stored is None


def _int(v: object) -> int:
    return v if isinstance(v, int) and not isinstance(v, bool) and 0 <= v <= MAX_COUNT else 0


def _add(a: int, b: int) -> int:
    """A sum of counts, saturated at ``MAX_COUNT`` (a larger stored value would read as 0)."""
    return min(MAX_COUNT, a + b)


def _fold(into: dict[str, int], reason: str, n: int) -> None:
    """Add ``n`` refusals of ``reason``: at most ``MAX_REASONS`` reasons, the rest ``other``
    (so a bucket holds at most ``MAX_REASONS`` + 1 keys, however often it is merged)."""
    if reason not in into and len(into) >= MAX_REASONS:
        reason = "other"
    into[reason] = _add(into.get(reason, 0), n)


_SCAN = 64  # entries of a stored map or list looked at (the CRD allows far fewer)


def _minute_from(raw: Mapping[str, Any]) -> Minute:
    lag = raw.get("lag")
    lags = [_int(x) for x in lag[:N_LAG]] if isinstance(lag, list) else []
    refused = raw.get("refused")
    m = Minute(
        webhook=_int(raw.get("webhook")),
        poller=_int(raw.get("poller")),
        lag=lags + [0] * (N_LAG - len(lags)),
        throttled=_int(raw.get("throttled")),
        beats=_int(raw.get("beats")),
    )
    if isinstance(refused, Mapping):
        for reason, n in itertools.islice(refused.items(), _SCAN):
            _fold(m.refused, _cut(reason, 40), _int(n))
    return m


def _add_minute(into: Minute, m: Minute) -> None:
    into.webhook = _add(into.webhook, m.webhook)
    into.poller = _add(into.poller, m.poller)
    into.lag = [_add(a, b) for a, b in zip(into.lag, m.lag, strict=True)]
    into.throttled = _add(into.throttled, m.throttled)
    into.beats = _add(into.beats, m.beats)
    for reason, n in m.refused.items():
        _fold(into.refused, reason, n)


_OUTCOMES = ("persisted", "duplicate", "stale", "refused")
_TRACE_ID = re.compile(r"[0-9a-f]{32}")


def _traced(entry: dict[str, Any], trace_id: object) -> dict[str, Any]:
    """A recent entry with its request's trace ID (``tether.base.tracing``) when it has one."""
    if isinstance(trace_id, str) and _TRACE_ID.fullmatch(trace_id):
        entry["traceId"] = trace_id
    return entry


def _recent_from(raw: object) -> list[dict[str, Any]]:
    """The stored ``recent`` list, each entry reduced to its known fields with bounded
    values (an entry written by hand or by an older version cannot grow the object)."""
    out: list[dict[str, Any]] = []
    for r in itertools.islice(raw if isinstance(raw, list) else [], _SCAN):
        if not isinstance(r, Mapping) or (at := parse(r.get("at"))) is None:
            continue
        lag = r.get("lagSeconds")
        if not isinstance(lag, int | float) or isinstance(lag, bool) or not 0 <= lag < 1e12:
            lag = None  # also NaN
        outcome = r.get("outcome")
        out.append(
            _traced(
                {
                    "at": fmt(at),
                    "namespace": _cut(r.get("namespace", "")),
                    "name": _cut(r.get("name", "")),
                    "source": "poller" if r.get("source") == "poller" else "webhook",
                    "lagSeconds": None if lag is None else round(float(lag), 6),
                    "outcome": outcome if outcome in _OUTCOMES else "refused",
                },
                r.get("traceId"),
            )
        )
    return out[-RECENT:]


def _stored_from(raw: object) -> dict[str, int] | None:
    if not isinstance(raw, Mapping):
        return None
    return {k: _int(raw.get(k)) for k in ("records", "bytes", "recordLimit", "byteLimit")}


def _mapping(status: object) -> Mapping[str, Any]:
    return status if isinstance(status, Mapping) else {}


def _minute_to(start: datetime.datetime, m: Minute) -> dict[str, Any]:
    return {
        "start": start.strftime("%Y-%m-%dT%H:%M:%SZ"),
        "webhook": m.webhook,
        "poller": m.poller,
        "lag": list(m.lag),
        "refused": dict(m.refused),
        "throttled": m.throttled,
        "beats": m.beats,
    }


def minutes_of(status: Mapping[str, Any] | None) -> dict[datetime.datetime, Minute]:
    out: dict[datetime.datetime, Minute] = {}
    raw = _mapping(status).get("minutes")
    for item in itertools.islice(raw if isinstance(raw, list) else [], WINDOW_MINUTES * 2):
        if isinstance(item, Mapping) and (start := parse(item.get("start"))) is not None:
            _add_minute(out.setdefault(minute_of(start), Minute()), _minute_from(item))
    return out


def merge(
    status: Mapping[str, Any] | None, delta: Delta, runtime_id: str, now: datetime.datetime
) -> dict[str, Any]:
    """The new status: ``status`` (what the KCP holds, maybe written by an older version or by
    hand: anything unusable is dropped) plus ``delta``, minutes outside the window dropped."""
    old = _mapping(status)
    minutes = minutes_of(old)
    for start, m in delta.minutes.items():
        _add_minute(minutes.setdefault(minute_of(start), Minute()), m)
    horizon = minute_of(now) - datetime.timedelta(minutes=WINDOW_MINUTES - 1)
    kept = sorted(((s, m) for s, m in minutes.items() if s >= horizon), key=lambda sm: sm[0])
    recent = _recent_from(old.get("recent")) + _recent_from(delta.recent)
    recent.sort(key=lambda r: str(r["at"]))
    last = parse(old.get("lastChangeAt"))
    if delta.last_change is not None and (last is None or delta.last_change > last):
        last = delta.last_change
    out: dict[str, Any] = {
        "runtimeId": runtime_id,
        "updatedAt": fmt(now),
        "minutes": [_minute_to(s, m) for s, m in kept],
        "recent": recent[-RECENT:],
    }
    if last is not None:
        out["lastChangeAt"] = fmt(last)
    stored = _stored_from(delta.stored if delta.stored is not None else old.get("stored"))
    if stored is not None:
        out["stored"] = stored
    last_refused = lastrefused.merged(lastrefused.from_status(old), delta.last_refused)
    if last_refused:
        out["lastRefused"] = last_refused
    return out


def quantile(counts: Sequence[int], q: float) -> float | None:
    """The q-quantile of a lag histogram, linearly interpolated inside its bucket (as
    Prometheus' ``histogram_quantile``); the overflow bucket answers its lower bound."""
    total = sum(counts)
    if total == 0:
        return None
    rank = q * total
    seen = 0
    for i, n in enumerate(counts):
        if n and seen + n >= rank:
            if i >= len(LAG_BOUNDS):
                return LAG_BOUNDS[-1]
            lo = 0.0 if i == 0 else LAG_BOUNDS[i - 1]
            return lo + (LAG_BOUNDS[i] - lo) * (rank - seen) / n
        seen += n
    return LAG_BOUNDS[-1]


class Point(NamedTuple):
    start: datetime.datetime
    records: int
    p50: float | None
    p99: float | None
    webhook: int = 0
    poller: int = 0
    beats: int = 0


class Summary(NamedTuple):
    webhook: int
    poller: int
    lag_p50: float | None
    lag_p99: float | None
    refused: dict[str, int]
    throttled: int
    last_change: datetime.datetime | None
    stored: dict[str, int]
    recent: list[dict[str, Any]]
    series: list[Point]
    updated: datetime.datetime | None
    last_refused: Mapping[str, Mapping[str, Any]] = {}  # tether.wire.lastrefused, maybe older

    @property
    def records(self) -> int:
        return self.webhook + self.poller

    @property
    def poller_share(self) -> float | None:
        """Share of the persisted records that only the poller delivered (None: none)."""
        return None if self.records == 0 else self.poller / self.records

    @property
    def refusals(self) -> int:
        return sum(self.refused.values())


def summarize(status: Mapping[str, Any] | None, now: datetime.datetime) -> Summary:
    """The last hour of a runtime's delivery, from its object's status (never raises)."""
    status = _mapping(status)
    horizon = minute_of(now) - datetime.timedelta(minutes=WINDOW_MINUTES - 1)
    minutes = sorted(
        ((s, m) for s, m in minutes_of(status).items() if s >= horizon), key=lambda sm: sm[0]
    )
    lag = [0] * N_LAG
    refused: dict[str, int] = {}
    series: list[Point] = []
    for start, m in minutes:
        lag = [_add(a, b) for a, b in zip(lag, m.lag, strict=True)]
        for reason, n in m.refused.items():
            _fold(refused, reason, n)
        series.append(
            Point(
                start,
                m.webhook + m.poller,
                quantile(m.lag, 0.5),
                quantile(m.lag, 0.99),
                m.webhook,
                m.poller,
                m.beats,
            )
        )
    recent = _recent_from(status.get("recent"))
    stored = _stored_from(status.get("stored")) or {}
    return Summary(
        webhook=sum(m.webhook for _, m in minutes),
        poller=sum(m.poller for _, m in minutes),
        lag_p50=quantile(lag, 0.5),
        lag_p99=quantile(lag, 0.99),
        refused=refused,
        throttled=sum(m.throttled for _, m in minutes),
        last_change=parse(status.get("lastChangeAt")),
        stored=stored,
        recent=list(reversed(recent)),
        series=series,
        updated=parse(status.get("updatedAt")),
        last_refused=lastrefused.from_status(status),
    )


def body(name: str, namespace: str, runtime_id: str, labels: Mapping[str, str]) -> dict[str, Any]:
    """A new, empty ``RuntimeDelivery`` object (its status is written with ``merge``)."""
    return {
        "apiVersion": apitypes.RUNTIME_DELIVERIES.api_version,
        "kind": apitypes.RUNTIME_DELIVERY_KIND,
        "metadata": {"name": name, "namespace": namespace, "labels": dict(labels)},
        "spec": {"runtimeId": runtime_id},
    }


def totals(summaries: Iterable[Summary]) -> tuple[int, int]:
    """Records delivered by the webhook and by the poller over many runtimes."""
    w = p = 0
    for s in summaries:
        w, p = w + s.webhook, p + s.poller
    return w, p
