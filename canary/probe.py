"""One probe's decisions, as plain data (``canary.canary`` does the I/O).

A probe writes a fresh nonce into the canary ConfigMap, then reads each of its stages
(``stored``: the KCP record; ``injected``: the injector's target CR) until it carries the
nonce or the deadline passes. ``start`` opens a probe, ``observe`` takes one read of a
stage (``seen`` True/False, or None when the read failed), ``expire`` ends the stages still
pending at the deadline: ``timeout`` when the last read of the stage worked (the value did
not arrive), ``read_failed`` when it failed (the canary could not look). A failed write ends
every stage at once (``write_failed``). ``ok`` carries the seconds from the write (taken
just before the write request) to the read that saw the nonce (taken when it returned: an
upper bound, within one poll).

The value readers (``record_nonce``, ``target_nonce``) are pure too: they take the objects
as served and never trust their shape (a record or a target is tenant-influenced data).
"""

from __future__ import annotations

import dataclasses
import secrets
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Literal, NamedTuple

Stage = Literal["stored", "injected"]
Outcome = Literal["ok", "timeout", "write_failed", "read_failed"]
MAX_NONCE = 64  # a value longer than this is never the canary's


class Result(NamedTuple):
    stage: Stage
    outcome: Outcome
    seconds: float | None  # set for ok only


@dataclasses.dataclass(frozen=True)
class Probe:
    nonce: str
    written_at: float  # monotonic, just before the write
    deadline: float
    pending: tuple[Stage, ...]
    results: tuple[Result, ...] = ()
    read_failing: frozenset[Stage] = frozenset()  # the stage's last read failed

    @property
    def finished(self) -> bool:
        return not self.pending


def nonce() -> str:
    return secrets.token_hex(8)


def start(value: str, written_at: float, timeout: float, stages: Sequence[Stage]) -> Probe:
    return Probe(value, written_at, written_at + timeout, tuple(stages))


def write_failed(stages: Sequence[Stage]) -> tuple[Result, ...]:
    return tuple(Result(s, "write_failed", None) for s in stages)


def read_failed(stages: Sequence[Stage]) -> tuple[Result, ...]:
    """Nothing written: what the probe needed from the KCP first was not readable."""
    return tuple(Result(s, "read_failed", None) for s in stages)


def observe(p: Probe, stage: Stage, seen: bool | None, at: float) -> Probe:
    """One read of ``stage`` that returned at ``at``; a read after the deadline counts only
    when it saw the nonce within it (a late answer is not a success)."""
    if stage not in p.pending:
        return p
    if seen and at <= p.deadline:
        return dataclasses.replace(
            p,
            pending=tuple(s for s in p.pending if s != stage),
            results=p.results + (Result(stage, "ok", max(0.0, at - p.written_at)),),
            read_failing=p.read_failing - {stage},
        )
    failing = p.read_failing | {stage} if seen is None else p.read_failing - {stage}
    return expire(dataclasses.replace(p, read_failing=failing), at)


def expire(p: Probe, now: float) -> Probe:
    """At or past the deadline every pending stage ends: timeout, or read_failed."""
    if now < p.deadline or not p.pending:
        return p
    ended = tuple(
        Result(s, "read_failed" if s in p.read_failing else "timeout", None) for s in p.pending
    )
    return dataclasses.replace(p, pending=(), results=p.results + ended)


def next_read(p: Probe, now: float, poll: float) -> float:
    """Seconds to wait before the next round of reads (never past the deadline)."""
    return max(0.0, min(poll, p.deadline - now))


# -- what the KCP shows --------------------------------------------------------------------


def _text(value: object) -> str | None:
    return value if isinstance(value, str) and len(value) <= MAX_NONCE else None


def record_nonce(items: Iterable[object], namespace: str, name: str, key: str) -> str | None:
    """The nonce in the live record of the canary ConfigMap among ``items`` (the listed
    RuntimeConfigMaps), or None (no such record, a tombstone, no such key)."""
    for item in items:
        spec = item.get("spec") if isinstance(item, Mapping) else None
        if not isinstance(spec, Mapping):
            continue
        if spec.get("namespace") != namespace or spec.get("name") != name:
            continue
        if spec.get("deleted") is True:
            return None
        data = spec.get("data")
        return _text(data.get(key)) if isinstance(data, Mapping) else None
    return None


def target_nonce(obj: Mapping[str, Any], field: Sequence[str], key: str) -> str | None:
    """The value under ``key`` of the map at ``field`` of the target CR, or None."""
    node: object = obj
    for part in field:
        node = node.get(part) if isinstance(node, Mapping) else None
    return _text(node.get(key)) if isinstance(node, Mapping) else None
