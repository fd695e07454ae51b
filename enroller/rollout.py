"""The staged rollout of the runtime bundle, decided on plain data (no API, no clock).

A bundle's identity is the digest of its text and the image override (``identity``). When
the enroller starts with a bundle whose identity is not the last good one, a rollout begins:
the runtimes, ordered by the SHA-256 of their runtime ID (stable: a runtime stays in its
wave when others come or go), are cut into waves by cumulative percentages (default 1 %,
10 %, the rest; at least one runtime per wave, ``waves``). Only the runtimes of the waves
begun so far get the new bundle (``assign``); every other runtime keeps the last good one.

After a wave was applied, its health gate (``gate``) waits, bounded by a timeout, until
every runtime of the wave (beyond ``max_unhealthy``) was applied without a failure, serves
its webhook (its Deployment rolled out), and sent a heartbeat after it was first seen holding
the new bundle (and after the wave began); refusals
the listener recorded for it since the wave began above a bound fail the gate at once. A
passing gate begins the next wave (the last one completes the rollout: the bundle becomes
the good one); a failing gate halts the rollout: every runtime is assigned the good bundle
again, later waves never see the new one, and once the failed wave's runtimes hold the good
bundle again the rollout is ``RolledBack``. Only a bundle of another identity starts a new
rollout.
"""

from __future__ import annotations

import dataclasses
import datetime
import hashlib
import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Literal

Phase = Literal["Progressing", "Halted", "RolledBack", "Complete"]
PHASES: tuple[Phase, ...] = ("Progressing", "Halted", "RolledBack", "Complete")
DEFAULT_WAVES = (1.0, 10.0, 100.0)


def identity(bundle_text: str, image: str | None) -> str:
    """The bundle's identity: what a runtime would be given apart from its own inputs."""
    h = hashlib.sha256(bundle_text.encode())
    h.update(b"\0" + (image or "").encode())
    return h.hexdigest()[:16]


def order(runtime_ids: Iterable[str]) -> list[str]:
    """The runtimes in rollout order: by the SHA-256 of their ID, then the ID."""
    return sorted(set(runtime_ids), key=lambda r: (hashlib.sha256(r.encode()).hexdigest(), r))


def parse_waves(text: str) -> tuple[float, ...]:
    """``"1,10,100"``: cumulative percentages, increasing, the last 100 (added when missing)."""
    try:
        values = [float(p) for p in text.replace(" ", "").split(",") if p]
    except ValueError:
        raise ValueError(f"not a list of percentages: {text!r}") from None
    if not values or any(not 0 < v <= 100 for v in values):
        raise ValueError("each wave is a percentage above 0 and at most 100")
    if any(b <= a for a, b in zip(values, values[1:], strict=False)):
        raise ValueError("the percentages are cumulative: each above the one before")
    return tuple(values) if values[-1] == 100 else (*values, 100.0)


def waves(runtime_ids: Iterable[str], percents: Sequence[float]) -> list[list[str]]:
    """The runtimes cut into waves: wave i ends at ceil(percents[i] % of them), and holds at
    least one runtime; no empty wave (fewer runtimes than waves: fewer waves)."""
    ids = order(runtime_ids)
    out: list[list[str]] = []
    end = 0
    for p in percents:
        if end >= len(ids):
            break
        new_end = min(len(ids), max(end + 1, math.ceil(len(ids) * p / 100 - 1e-9)))
        out.append(ids[end:new_end])
        end = new_end
    if end < len(ids):
        out.append(ids[end:])
    return out


@dataclasses.dataclass(frozen=True)
class State:
    """A rollout as recorded (the rollout ConfigMap's ``state.json``)."""

    target: str  # the bundle rolled out
    good: str | None  # the last good bundle (None: none known)
    phase: Phase
    wave: int  # index of the current (or failed) wave
    waves: tuple[tuple[str, ...], ...]
    started: datetime.datetime  # when the current wave began
    reason: str = ""
    unhealthy: tuple[tuple[str, str], ...] = ()  # (runtime ID, why) of the last gate

    def to_json(self) -> dict[str, Any]:
        return {
            "target": self.target,
            "good": self.good,
            "phase": self.phase,
            "wave": self.wave,
            "waves": [list(w) for w in self.waves],
            "started": _stamp(self.started),
            "reason": self.reason,
            "unhealthy": [list(u) for u in self.unhealthy],
        }

    @staticmethod
    def from_json(d: Mapping[str, Any]) -> State:
        phase = d["phase"]
        if phase not in PHASES:
            raise ValueError(f"unknown phase {phase!r}")
        return State(
            str(d["target"]),
            None if d.get("good") is None else str(d["good"]),
            phase,
            int(d["wave"]),
            tuple(tuple(str(r) for r in w) for w in d["waves"]),
            datetime.datetime.fromisoformat(str(d["started"]).replace("Z", "+00:00")),
            str(d.get("reason", "")),
            tuple((str(a), str(b)) for a, b in d.get("unhealthy", [])),
        )

    def wave_of(self, runtime_id: str) -> int | None:
        for i, w in enumerate(self.waves):
            if runtime_id in w:
                return i
        return None


def _stamp(t: datetime.datetime) -> str:
    return t.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def begin(
    recorded: State | None,
    target: str,
    runtime_ids: Iterable[str],
    percents: Sequence[float],
    now: datetime.datetime,
) -> State:
    """The rollout for this bundle: the recorded one when it is this bundle's; else a new
    one (none recorded: this bundle is taken as good, nothing to roll out against)."""
    if recorded is not None and recorded.target == target:
        return recorded
    if recorded is None:
        return State(target, target, "Complete", 0, (), now, "no rollout recorded: taken as good")
    good = recorded.good if recorded.phase != "Complete" else recorded.target
    if good == target:  # back to the good bundle (a bad one replaced): nothing to roll out
        return State(target, target, "Complete", 0, (), now, "the last good bundle")
    return State(
        target, good, "Progressing", 0, tuple(tuple(w) for w in waves(runtime_ids, percents)), now
    )


def assign(state: State, runtime_id: str) -> Literal["target", "good"]:
    """Which bundle a runtime is given."""
    if state.good is None or state.phase == "Complete":
        return "target"
    if state.phase in ("Halted", "RolledBack"):
        return "good"
    w = state.wave_of(runtime_id)
    return "target" if w is not None and w <= state.wave else "good"


@dataclasses.dataclass(frozen=True)
class Health:
    """What the KCP knows of one runtime of the wave after this run."""

    applied: bool  # enrolled in this run with the wave's bundle, no failure
    failure: str | None  # the enroller's failure reason, if any
    serving: bool | None  # its webhook Deployment available
    beat: datetime.datetime | None  # its heartbeat Lease's renewTime
    refusals: int  # refusals the listener recorded since the wave began
    since: datetime.datetime | None = None  # when it was first seen holding the wave's bundle


@dataclasses.dataclass(frozen=True)
class Gate:
    timeout: datetime.timedelta
    max_refusals: int
    heartbeat: bool
    max_unhealthy: int


@dataclasses.dataclass(frozen=True)
class Verdict:
    kind: Literal["pass", "wait", "fail"]
    reason: str
    unhealthy: tuple[tuple[str, str], ...]


def problem(h: Health | None, started: datetime.datetime, g: Gate) -> str | None:
    """Why one runtime does not pass the gate (None: it does)."""
    if h is None:
        return "not enrolled in this run"
    if h.refusals > g.max_refusals:
        return f"{h.refusals} refusals since the wave began (bound {g.max_refusals})"
    if h.failure is not None:
        return f"enrollment failed: {h.failure}"
    if not h.applied:
        return "not applied yet"
    if h.serving is not True:
        return "webhook not serving (Deployment not available)"
    if g.heartbeat and (h.beat is None or h.beat <= max(started, h.since or started)):
        return "no heartbeat since the bundle was applied"
    return None


def gate(
    wave: Sequence[str],
    health: Mapping[str, Health],
    started: datetime.datetime,
    now: datetime.datetime,
    g: Gate,
) -> Verdict:
    """The wave's gate: pass, wait (within the timeout) or fail."""
    bad = tuple((r, p) for r in wave if (p := problem(health.get(r), started, g)) is not None)
    if len(bad) <= g.max_unhealthy:
        return Verdict("pass", "", bad)
    refused = [r for r in wave if (h := health.get(r)) is not None and h.refusals > g.max_refusals]
    if refused:
        return Verdict("fail", f"{len(refused)} runtime(s) over the refusal bound", bad)
    if now - started >= g.timeout:
        return Verdict(
            "fail",
            f"{len(bad)} of {len(wave)} runtime(s) unhealthy after "
            f"{g.timeout.total_seconds():.0f}s: {_first(bad)}",
            bad,
        )
    return Verdict("wait", f"{len(bad)} of {len(wave)} runtime(s) not healthy yet", bad)


def _first(bad: Sequence[tuple[str, str]]) -> str:
    return "; ".join(f"{r}: {p}" for r, p in bad[:3]) + (" ..." if len(bad) > 3 else "")


def advance(state: State, v: Verdict, now: datetime.datetime) -> State:
    """The rollout after its current wave's gate."""
    if state.phase != "Progressing" or v.kind == "wait":
        return (
            dataclasses.replace(state, unhealthy=v.unhealthy)
            if state.phase == "Progressing"
            else state
        )
    if v.kind == "fail":
        return dataclasses.replace(
            state,
            phase="Halted",
            unhealthy=v.unhealthy,
            reason=f"wave {state.wave + 1} failed its gate: {v.reason}",
        )
    if state.wave + 1 >= len(state.waves):
        return dataclasses.replace(
            state,
            phase="Complete",
            good=state.target,
            started=now,
            unhealthy=(),
            reason=f"all {len(state.waves)} waves passed",
        )
    return dataclasses.replace(state, wave=state.wave + 1, started=now, unhealthy=(), reason="")


def restored(state: State, holding_good: Iterable[str]) -> State:
    """A halted rollout is RolledBack once every runtime of its failed wave holds the good
    bundle again (``holding_good``: runtimes enrolled with it in this run)."""
    if state.phase != "Halted" or not state.waves:
        return state
    if set(state.waves[state.wave]) <= set(holding_good):
        return dataclasses.replace(
            state,
            phase="RolledBack",
            reason=state.reason + "; its runtimes hold the previous bundle again",
        )
    return state
