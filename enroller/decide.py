"""The enroller's decisions that bound what one runtime can cost the fleet: pure functions of
plain data (facts in, the next action out), tested without servers
(tests/enroller/test_decide.py). ``enroller.reconcile`` and ``enroller.dispatch`` gather
the facts and perform; nothing here does I/O or reads a clock.

- ``dispatch``: whether a runtime's work starts now, joins work another run started, waits
  for a free slot, or is skipped (its earlier work outlived its deadline and still runs, or
  every worker thread is held).
- ``backoff``: when a failing runtime is tried again.
- ``certificate``: keep the runtime's certificate, reuse one issued earlier that never
  reached the runtime, issue a new one, or refuse (the per-runtime issuance limit).
- ``rollover``: whether a CA rollover ends now (every runtime renewed, or its deadline
  passed) and which runtimes are then quarantined.
- ``quarantined``: whether the certificate a runtime holds is from a CA no longer trusted.
"""

from __future__ import annotations

import datetime
from collections.abc import Iterable, Mapping
from typing import Literal, NamedTuple

# -- dispatch ---------------------------------------------------------------------------------

Running = Literal["no", "in_time", "overdue"]
DispatchKind = Literal["dispatch", "join", "wait", "busy", "no_worker"]


def dispatch(*, running: Running, in_flight: int, concurrency: int, workers_busy: int, workers: int,
             waited: bool) -> DispatchKind:
    """What a run does with the next runtime.

    ``running``: whether work for this runtime is still running (started by this or another
    run) and whether it is past its deadline; ``in_flight``: this run's runtimes not finished
    nor given up; ``workers_busy``/``workers``: threads held (stragglers included) and the
    most there may be; ``waited``: the run already waited one deadline for a free worker.

    A straggler (work past its deadline) is never started again while it runs: ``busy``.
    Work another run started in time is joined (its result is this run's too), so a runtime
    is never worked on twice at once. With every thread held by stragglers the run waits for
    one once, then gives the rest up as ``no_worker`` rather than wait on them."""
    if running == "overdue":
        return "busy"
    if in_flight >= concurrency:
        return "wait"
    if running == "in_time":
        return "join"
    if workers_busy >= workers:
        return "no_worker" if waited and not in_flight else "wait"
    return "dispatch"


def backoff(failures: int, base: float, cap: float) -> float:
    """Seconds until a runtime that failed ``failures`` times in a row is tried again:
    ``base`` doubling up to ``cap``."""
    if failures <= 0:
        return 0.0
    return float(min(cap, base * 2 ** min(failures - 1, 62)))


# -- certificate issuance ---------------------------------------------------------------------

ISSUANCE_WINDOW = datetime.timedelta(hours=1)
CertificateAction = Literal["keep", "reuse", "issue", "rate_limited"]


class CertificateFacts(NamedTuple):
    due: str | None        # why the runtime's certificate must be replaced; None: it stays
    pending: bool          # one issued earlier, not yet applied to the runtime, still good
    issued_recently: int   # certificates issued for this runtime in the last ISSUANCE_WINDOW
    limit: int             # the most certificates per runtime per ISSUANCE_WINDOW


def certificate(f: CertificateFacts) -> CertificateAction:
    """A certificate is issued only when the runtime needs one, none issued earlier can be
    used, and the runtime is under its limit: an apply that keeps failing (an API server
    that answers 404) reuses the certificate it failed to apply instead of minting more."""
    if f.due is None:
        return "keep"
    if f.pending:
        return "reuse"
    if f.issued_recently >= f.limit:
        return "rate_limited"
    return "issue"


def recent(issued: Iterable[datetime.datetime], now: datetime.datetime,
           window: datetime.timedelta = ISSUANCE_WINDOW) -> tuple[datetime.datetime, ...]:
    """The issuance times still inside the window (oldest first), the others forgotten."""
    return tuple(sorted(t for t in issued if now - window < t <= now))


def next_issuance(issued: Iterable[datetime.datetime], now: datetime.datetime, limit: int,
                  window: datetime.timedelta = ISSUANCE_WINDOW) -> datetime.datetime:
    """When a runtime at its limit may be issued a certificate again."""
    inside = recent(issued, now, window)
    if len(inside) < limit:
        return now
    return inside[len(inside) - limit] + window


# -- CA rollover and quarantine -----------------------------------------------------------------

RolloverKind = Literal["none", "wait", "finish"]


class RolloverFacts(NamedTuple):
    current: str                       # serial (hex) of the current CA
    previous: str | None               # of the previous CA; None: no rollover in progress
    started: datetime.datetime | None  # when the rollover started (the CA Secret's annotation)
    now: datetime.datetime
    propagation: datetime.timedelta    # old certificates kept this long after the start
    deadline: datetime.timedelta       # the rollover ends this long after the start, at the latest
    held: Mapping[str, str | None]     # runtime (Kyma name) -> CA serial of the client certificate
                                       # it holds as last seen ("" none, None unknown)
    failing: frozenset[str]            # runtimes whose work failed in this run


class Rollover(NamedTuple):
    kind: RolloverKind
    cause: Literal["", "complete", "deadline"] = ""
    quarantined: tuple[str, ...] = ()  # runtimes still holding a certificate of the dropped CA


def rollover(f: RolloverFacts) -> Rollover:
    """The previous CA is dropped once every runtime holds a certificate of the current one
    and none is failing, or, whatever the runtimes do, once the deadline has passed since the
    rollover started; never before the propagation time (the listeners may not trust the new
    CA yet). At the deadline the runtimes that still hold a certificate of the previous CA are
    quarantined: no verifier trusts it any more, and they are renewed when they are reachable."""
    if f.previous is None:
        return Rollover("none")
    if f.started is None or f.now < f.started + f.propagation:
        return Rollover("wait")
    behind = tuple(sorted(n for n, serial in f.held.items() if serial == f.previous))
    if not behind and not f.failing:
        return Rollover("finish", "complete")
    if f.now >= f.started + max(f.deadline, f.propagation):
        return Rollover("finish", "deadline", behind)
    return Rollover("wait")


def quarantined(held: str | None, current: str, previous: str | None) -> bool:
    """Whether a runtime is quarantined: the client certificate it holds (as last seen, its
    issuer's serial) is from a CA that is neither the current one nor, during a rollover, the
    previous one. Derived, never stored: it ends when the runtime is renewed. Unknown (None)
    or no certificate ("") is not quarantine."""
    return bool(held) and held != current and held != previous
