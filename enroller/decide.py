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

- ``selected``: whether a Kyma CR is the enroller's at all (``KYMA_SELECTOR``).

And what one pass does with one runtime (``reconcile`` gathers its facts once, asks
``plan`` once and performs; ``install`` reads the runtime, asks ``renewal`` and ``apply``
once each and performs; ``dryrun`` prints the same plans instead):

- ``plan`` (of ``step``): remove Tether (its Kyma CR is being deleted) or only forget it
  (no finalizer), wait out its backoff, fail (the run's Watches unreadable), or enroll.
- ``renewal``: which certificates are replaced and why (client: ``pki.needs_renewal``, kept
  through a rollover's propagation time, reissued with a key that does not match; serving:
  its issuer and renewal time as the client Secret's annotations record them).
- ``apply``: whether the bundle is applied and why (installed, repaired, renewed, updated,
  resync; None: nothing is written), and what more is read for it.
- ``removal``: delete the runtime's objects, retry, or release the finalizer.
- ``ownership``: whether this KCP may write into the runtime (sharding: ours, take it over
  from the KCP its client Secret names when asked to, or another KCP's: refused).
"""

from __future__ import annotations

import base64
import datetime
import urllib.parse
from collections.abc import Iterable, Mapping
from typing import Literal, NamedTuple

from tether.wire import filters

FINALIZER = "tether.kyma-project.io/enroller"  # on a Kyma CR whose runtime the enroller wrote


# -- which Kyma CRs (a pilot before the fleet) -------------------------------------------------


def selected(
    selector: tuple[filters.Requirement, ...], labels: Mapping[str, str], finalizer: bool
) -> bool:
    """Whether the enroller works on a Kyma CR: its labels match ``KYMA_SELECTOR`` (empty:
    every one), or it carries the enroller's finalizer (``finalizer``: installed into
    before, so kept up to date and removed on deletion whatever the selector says now)."""
    return finalizer or filters.selector_matches(selector, labels)


# -- dispatch ---------------------------------------------------------------------------------

Running = Literal["no", "in_time", "overdue"]
DispatchKind = Literal["dispatch", "join", "wait", "busy", "no_worker"]


def dispatch(
    *,
    running: Running,
    in_flight: int,
    concurrency: int,
    workers_busy: int,
    workers: int,
    waited: bool,
) -> DispatchKind:
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
    due: str | None  # why the runtime's certificate must be replaced; None: it stays
    pending: bool  # one issued earlier, not yet applied to the runtime, still good
    issued_recently: int  # certificates issued for this runtime in the last ISSUANCE_WINDOW
    limit: int  # the most certificates per runtime per ISSUANCE_WINDOW


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


def recent(
    issued: Iterable[datetime.datetime],
    now: datetime.datetime,
    window: datetime.timedelta = ISSUANCE_WINDOW,
) -> tuple[datetime.datetime, ...]:
    """The issuance times still inside the window (oldest first), the others forgotten."""
    return tuple(sorted(t for t in issued if now - window < t <= now))


def next_issuance(
    issued: Iterable[datetime.datetime],
    now: datetime.datetime,
    limit: int,
    window: datetime.timedelta = ISSUANCE_WINDOW,
) -> datetime.datetime:
    """When a runtime at its limit may be issued a certificate again."""
    inside = recent(issued, now, window)
    if len(inside) < limit:
        return now
    return inside[len(inside) - limit] + window


# -- CA rollover and quarantine -----------------------------------------------------------------

RolloverKind = Literal["none", "wait", "finish"]


class RolloverFacts(NamedTuple):
    current: str  # serial (hex) of the current CA
    previous: str | None  # of the previous CA; None: no rollover in progress
    started: datetime.datetime | None  # when the rollover started (the CA Secret's annotation)
    now: datetime.datetime
    propagation: datetime.timedelta  # old certificates kept this long after the start
    deadline: datetime.timedelta  # the rollover ends this long after the start, at the latest
    held: Mapping[str, str | None]  # runtime (Kyma name) -> CA serial of the client certificate
    # it holds as last seen ("" none, None unknown)
    failing: frozenset[str]  # runtimes whose work failed in this run


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


# -- one runtime: enroll, wait or remove ---------------------------------------------------------

Step = Literal["remove", "wait", "enroll"]


def step(*, deleting: bool, backing_off: bool) -> Step:
    """A Kyma CR being deleted has Tether removed from its runtime (backoff or not); a failing
    runtime waits out its backoff (nothing is asked of it); any other is enrolled."""
    if deleting:
        return "remove"
    return "wait" if backing_off else "enroll"


PlanKind = Literal["forget", "remove", "wait", "fail", "enroll"]


class RuntimeFacts(NamedTuple):
    """What a run knows of one runtime before it asks the runtime anything (plain data,
    gathered once by ``Enroller.facts``)."""

    deleting: bool  # the Kyma CR has a deletionTimestamp
    finalizer: bool  # it carries the enroller's finalizer
    backing_off: bool  # it failed and its next attempt is not due yet
    failed_before: bool  # the failure of an earlier pass is remembered
    unreadable: tuple[str, str] | None = None  # the run's Watches unreadable: (reason, message)


class Plan(NamedTuple):
    kind: PlanKind
    status: bool = False  # ``wait``: its remembered failure written to its status again
    failure: tuple[str, str] | None = None  # ``fail``: why, without asking the runtime


def plan(f: RuntimeFacts) -> Plan:
    """The one plan of a pass over one runtime (``step``): a Kyma CR being deleted has Tether
    removed from its runtime (``remove``), or, without the finalizer (nothing was written
    there), only its RuntimeEnrollment deleted (``forget``); a failing runtime waits out its
    backoff, its remembered failure kept true in its status; with the run's Watches
    unreadable it fails and is left as it is (``fail``); any other is enrolled: its reads,
    renewals and apply (``renewal``, ``apply``)."""
    s = step(deleting=f.deleting, backing_off=f.backing_off)
    if s == "remove":
        return Plan("remove" if f.finalizer else "forget")
    if s == "wait":
        return Plan("wait", status=f.failed_before)
    if f.unreadable is not None:
        return Plan("fail", failure=f.unreadable)
    return Plan("enroll")


# -- one runtime: which certificates are renewed -------------------------------------------------


class CertFacts(NamedTuple):
    """What the runtime's client Secret holds, against the CAs (plain data)."""

    now: datetime.datetime
    current: str  # serial (hex) of the current CA
    previous: str | None  # of the previous CA; None: no rollover in progress
    settled: bool  # every verifier trusts the current CA (propagation time over)
    client_due: str | None  # pki.needs_renewal of the client certificate, against the current CA
    client_previous_ok: bool  # the client certificate is a good one of the previous CA
    client_key_matches: bool  # the client Secret holds the certificate's key
    serving_ca: str  # serial of the serving certificate's CA, as annotated ("" none)
    serving_renew_at: datetime.datetime | None  # its renewal time, as annotated (None: unknown)


class Renewal(NamedTuple):
    client: str | None  # why the client certificate is replaced (the issuance's cause); None: kept
    serving: str | None  # likewise the serving certificate


def renewal(f: CertFacts) -> Renewal:
    """Which certificates a pass replaces. During a rollover's propagation time a certificate
    of the previous CA stays (a runtime must not present one of the new CA before every
    listener trusts it); a client Secret whose key is not the certificate's (edited, half
    written) has the pair reissued; the serving certificate is replaced when its CA is not
    the current one or at its renewal time."""
    client = f.client_due
    if client == "foreign_issuer" and not f.settled and f.client_previous_ok:
        client = None
    if client is None and not f.client_key_matches:
        client = "key_mismatch"
    serving: str | None = None
    if f.serving_ca == f.previous and not f.settled:
        pass
    elif f.serving_ca != f.current:
        serving = "ca_changed" if f.serving_ca else "missing"
    elif f.serving_renew_at is None or f.now >= f.serving_renew_at:
        serving = "expiring"
    return Renewal(client, serving)


# -- one runtime: whether its bundle is applied --------------------------------------------------

ApplyCause = Literal["installed", "repaired", "renewed", "updated", "watches", "resync"]


class ApplyFacts(NamedTuple):
    client_secret: bool  # the runtime's client Secret exists
    webhook_config: bool  # its webhook configuration exists
    applied_before: bool  # this process applied the runtime's bundle before
    renewed: bool  # a certificate was issued (or reused) for it in this pass
    serving_renewed: bool  # the serving certificate is one of them
    installed_current: bool  # both annotations name the digest of what would be installed now
    resync_due: bool  # the last full apply is at least RESYNC_SECONDS old
    webhook_serving: bool | None  # as last seen (None: never)
    watches_current: bool = (
        True  # the webhook configuration names the digest of the Watches rendered now
    )
    watch_list_stale: bool = False  # no Watches rendered now (no Watch CRD), some installed


class Apply(NamedTuple):
    cause: ApplyCause | None  # why every object is applied (``watches``: the Watch list and the
    # webhook configuration only); None: nothing is written
    read_serving: bool  # the serving certificate is kept: its Secret is read for the apply
    check_webhook: bool  # the webhook Deployment's status is read
    delete_watch_list: bool = False  # after the full apply (the Watch CRD went)


def apply(f: ApplyFacts) -> Apply:
    """The steady state writes nothing: both objects there, nothing renewed, the installed
    digest current and the last full apply younger than RESYNC_SECONDS. Otherwise the cause,
    the first that holds: a first install, a repair (an object deleted), a renewal, an
    update (a new image or bundle, an edited webhook configuration), the Watches in force
    changed (only what they make is applied), the periodic resync. A full apply without
    Watches (the Watch CRD went) deletes a Watch list installed before. So a pass that writes
    nothing finds Tether in the runtime: every pass that gets this far puts the enroller's
    finalizer on the Kyma CR first (its deletion then waits for Tether's removal)."""
    cause: ApplyCause | None
    if not f.client_secret and not f.webhook_config and not f.applied_before:
        cause = "installed"
    elif not f.client_secret or not f.webhook_config:
        cause = "repaired"
    elif f.renewed:
        cause = "renewed"
    elif not f.installed_current:
        cause = "updated"
    elif not f.watches_current:
        cause = "watches"
    else:
        cause = "resync" if f.resync_due else None
    return Apply(
        cause,
        read_serving=cause not in (None, "watches") and not f.serving_renewed,
        check_webhook=cause is not None or f.webhook_serving is not True,
        delete_watch_list=cause not in (None, "watches") and f.watch_list_stale,
    )


def installed_current(
    *, want: str, webhook: str | None, secret: str | None, digest_key: bool
) -> bool:
    """Whether the runtime holds what would be installed now (``ApplyFacts.installed_current``):
    its webhook configuration and its client Secret both name ``want``, the digest of the
    bundle rendered now, and the Secret holds its digest key (one written without it, by
    hand, is applied whatever the digests say)."""
    return webhook == want == secret and digest_key


def kept_serving(has_pair: bool) -> str | None:
    """A kept serving certificate whose Secret lost its pair (deleted while the annotations
    call it current) is replaced: the cause; None: the Secret's pair is applied again."""
    return None if has_pair else "missing"


# -- one runtime: removal ------------------------------------------------------------------------

RemovalKind = Literal["forget", "delete", "retry", "release"]


class RemovalFacts(NamedTuple):
    finalizer: bool  # the Kyma CR still carries the enroller's finalizer
    attempted: bool  # the runtime's objects were deleted (or tried) in this pass
    problem: str | None  # why deleting them failed (None: done, or not attempted)
    waited: datetime.timedelta  # since the Kyma CR's deletion began
    timeout: datetime.timedelta  # REMOVAL_TIMEOUT_SECONDS
    installed: bool = True  # something was ever installed (False: known never)


class Removal(NamedTuple):
    kind: RemovalKind
    outcome: Literal["", "removed", "removal_timed_out", "nothing_installed"] = ""


def removal(f: RemovalFacts) -> Removal:
    """A Kyma CR without the finalizer has only its RuntimeEnrollment to go (``forget``);
    else the runtime's objects are deleted, retried while that fails until the timeout, and
    then (or once done) the finalizer is released: ``removed``, or ``removal_timed_out``; at
    once (``nothing_installed``) when the runtime cannot be reached and nothing was ever
    installed into it."""
    if not f.finalizer:
        return Removal("forget")
    if not f.attempted:
        return Removal("delete")
    if f.problem is not None and not f.installed:  # nothing to wait for (issue 42)
        return Removal("release", "nothing_installed")
    if f.problem is not None and f.waited < f.timeout:
        return Removal("retry")
    return Removal("release", "removed" if f.problem is None else "removal_timed_out")


# -- one runtime: which KCP owns it (sharding) -----------------------------------------------------

TAKE_OVER_ANNOTATION = "tether.kyma-project.io/take-over-from"
Ownership = Literal["ours", "take_over", "foreign"]


def installed_listener(data: Mapping[str, str]) -> str | None:
    """The listener URL the runtime's client Secret names (its ``data``, base64), None when
    it names none (no Secret, or not one of ours)."""
    raw = data.get("listener-url")
    if not raw:
        return None
    try:
        return base64.b64decode(raw, validate=True).decode() or None
    except (ValueError, UnicodeDecodeError):
        return None


def ownership(
    *, installed: str | None, own: str, take_over_from: str | None, issued_here: bool = False
) -> Ownership:
    """Whether this KCP's enroller may write into a runtime. ``installed``: the listener URL
    its client Secret names (None: nothing installed), ``own``: this KCP's. A runtime
    installed for another KCP's listener is taken over only when its Kyma CR here asks for
    the move from exactly that listener (``take_over_from``: the annotation's value);
    otherwise it is foreign: nothing is written into it and nothing deleted from it, so two
    KCPs never fight over one runtime. ``issued_here``: the runtime's client certificate was
    issued by this KCP's CA (current or previous): ours whatever URL it names, so a KCP whose
    listener URL changed (a new ingress name) still owns its fleet and re-renders it."""
    if installed is None or issued_here or same_listener(installed, own):
        return "ours"
    if take_over_from and same_listener(installed, take_over_from):
        return "take_over"
    return "foreign"


def same_listener(a: str, b: str) -> bool:
    """Whether two listener URLs name one listener: the scheme and host in any case, the
    default port (443) written or not, a trailing ``/`` or not."""

    def norm(url: str) -> tuple[str, str, str]:
        u = urllib.parse.urlsplit(url.strip())
        try:
            port = u.port
        except ValueError:
            return ("", url, "")
        netloc = (u.hostname or "") + ("" if port in (None, 443) else f":{port}")
        return u.scheme.lower(), netloc, u.path.rstrip("/")

    return norm(a) == norm(b)
