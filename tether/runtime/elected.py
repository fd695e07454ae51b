"""The entry point of a leader-elected part (the poller, compass, the enroller, the janitor),
written once.

``start``: settings (with ``--once`` where the part has it), the KCP gateway from the
kubeconfig and the log configuration, before anything starts; a kubeconfig that does not
load stops the process with one line naming its variable (``config.fail``).
``scheduler``: a started, paused scheduler with the part's ``Job``s.
``elector``: a ``leader.LeaderElector`` that resumes a paused scheduler while this process
holds the Lease and pauses it when it loses it, with the part's leader gauge at 1 or 0
(``resuming``; the poller brings its own ``Leadership``).
``run_elected``: one ``ElectedPart`` run: the operations surface and the elector until
SIGTERM or SIGINT; then the Lease released, the scheduler, the surface and whatever else
the part started stopped.
``record_runs``: after every scheduled run, its end, result and duration go on the Lease as
annotations (``apitypes.LAST_RUN_*_ANNOTATION``: its end, result, seconds; ``elector`` and
``run_elected`` do it). A job reports its result by what it returns: ``ok`` false means
``failed``, ``skipped`` true means no run (an overlap); an exception is ``failed`` (and
re-raised, for APScheduler to log as before).
Fencing: a scheduled run starts only while the elector's leadership is ``fresh()`` (a run
due when it is not, e.g. a process resuming from a pause past its Lease, is skipped, not
recorded), and a ``guarded`` job's ``active`` is ``fresh``: a run in progress stops taking
up work the moment this process's leadership is no longer fresh.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import functools
import logging
import signal
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from types import FrameType
from typing import Any, Literal, NamedTuple, Protocol, TypeVar

import flask
import prometheus_client as prom
from apscheduler.schedulers.background import BackgroundScheduler
from apscheduler.triggers.base import BaseTrigger

from tether.base import config, logs, ops
from tether.kube import apitypes, gateway
from tether.runtime import clockstep, leader


class Startable(Protocol):
    """What ``start`` reads of a part's settings."""

    @property
    def kubeconfig(self) -> str | None: ...
    @property
    def log_level(self) -> str: ...
    @property
    def log_format(self) -> str: ...


S = TypeVar("S", bound=Startable)

Result = Literal["ok", "failed"]

log = logging.getLogger(__name__)


def outcome(returned: object, raised: BaseException | None) -> Result | None:
    """A run's result from what its job returned or raised; None: not a run (skipped)."""
    if raised is not None:
        return "failed"
    if getattr(returned, "skipped", False) is True:
        return None
    return "failed" if getattr(returned, "ok", True) is False else "ok"


def last_run(ended: datetime.datetime, result: Result, seconds: float) -> dict[str, str]:
    """The Lease annotations of one run."""
    return {
        apitypes.LAST_RUN_AT_ANNOTATION: ended.astimezone(datetime.UTC).strftime(
            "%Y-%m-%dT%H:%M:%SZ"
        ),
        apitypes.LAST_RUN_RESULT_ANNOTATION: result,
        apitypes.LAST_RUN_SECONDS_ANNOTATION: f"{max(0.0, seconds):.3f}",
    }


def recorded(
    fn: Callable[..., Any], publish: Callable[[dict[str, str]], None]
) -> Callable[..., Any]:
    """``fn`` that hands its run's annotations to ``publish`` (which must not raise far:
    a failure to publish is logged, the job's own result and exception are kept)."""

    @functools.wraps(fn)
    def run(*args: Any, **kwargs: Any) -> Any:
        t0 = time.monotonic()
        raised: BaseException | None = None
        returned: Any = None
        try:
            returned = fn(*args, **kwargs)
            return returned
        except BaseException as e:
            raised = e
            raise
        finally:
            result = outcome(returned, raised)
            if result is not None:
                try:
                    publish(
                        last_run(datetime.datetime.now(datetime.UTC), result, time.monotonic() - t0)
                    )
                except Exception as e:  # noqa: BLE001 - publishing never stops a run
                    log.warning("last run not published: %s", logs.bounded(e, 200))

    return run


class NotStarted(NamedTuple):
    """What a fenced job returns when it did not start (``outcome``: not a run)."""

    skipped: bool = True


def fenced(fn: Callable[..., Any], fresh: Callable[[], bool]) -> Callable[..., Any]:
    """``fn`` that starts only while ``fresh()`` (this process's leadership is fresh)."""

    @functools.wraps(fn)
    def run(*args: Any, **kwargs: Any) -> Any:
        if not fresh():
            log.info("run of %s not started: leadership not fresh", getattr(fn, "__name__", "job"))
            return NotStarted()
        return fn(*args, **kwargs)

    return run


def record_runs(sched: BackgroundScheduler, elected: leader.LeaderElector) -> None:
    """Every job now in ``sched`` starts only while ``elected`` is fresh (``fenced``) and
    publishes its runs on ``elected``'s Lease."""
    for job in sched.get_jobs():
        job.modify(func=fenced(recorded(job.func, elected.annotate), elected.fresh))


def start(
    spec: config.Spec,
    argv: Sequence[str],
    build: Callable[[config.Values], S],
    *,
    kubeconfig_variable: str,
    once: str | None = None,
    flags: Mapping[str, str] | None = None,
) -> tuple[S, argparse.Namespace, gateway.Kube]:
    """Settings, flags and the KCP gateway; logs configured. ``once``: the help of the
    part's ``--once`` flag (``None``: the part has none); ``flags``: more boolean flags of
    the part (``--name`` -> help)."""

    def options(parser: argparse.ArgumentParser) -> None:
        if once is not None:
            parser.add_argument("--once", action="store_true", help=once)
        for flag, text in (flags or {}).items():
            parser.add_argument(flag, action="store_true", help=text)

    s, args = config.load(spec, argv, build, options=options)
    gateway.identify(spec.part)
    try:
        api = gateway.from_kubeconfig(s.kubeconfig)
    except gateway.KubeConfigError as e:
        config.fail(spec.part, f"{kubeconfig_variable}: {e}")
    logs.configure(s.log_level, s.log_format)
    return s, args, api


@dataclasses.dataclass(frozen=True)
class Job:
    """One scheduled job: ``func(**kwargs)`` on ``trigger``; ``at_once``: its first run as
    soon as the scheduler runs (for a paused scheduler: when this process leads)."""

    id: str
    func: Callable[..., Any]
    trigger: BaseTrigger
    kwargs: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    at_once: bool = False


def scheduler(jobs: Sequence[Job]) -> BackgroundScheduler:
    """A started, paused scheduler with ``jobs`` (UTC; late runs coalesced, one at a time)."""
    sched = BackgroundScheduler(
        timezone=datetime.UTC,
        job_defaults={"coalesce": True, "max_instances": 1, "misfire_grace_time": None},
    )
    for job in jobs:
        first = {"next_run_time": datetime.datetime.now(datetime.UTC)} if job.at_once else {}
        sched.add_job(job.func, job.trigger, kwargs=dict(job.kwargs), id=job.id, **first)
    sched.start(paused=True)
    return sched


class Leadership(NamedTuple):
    """What this process does when it gains the Lease and when it loses it."""

    started: Callable[[], None]
    stopped: Callable[[], None]


def resuming(sched: BackgroundScheduler, gauge: prom.Gauge) -> Leadership:
    """``sched`` runs, and ``gauge`` is 1, only while this process leads."""

    def started() -> None:
        gauge.set(1)
        sched.resume()

    def stopped() -> None:
        gauge.set(0)
        sched.pause()

    return Leadership(started, stopped)


def elector(
    api: gateway.Kube, lease: leader.LeaseSettings, sched: BackgroundScheduler, gauge: prom.Gauge
) -> leader.LeaderElector:
    """An elector that runs ``sched`` (started paused, its jobs added) only while leading,
    and publishes each run of its jobs on the Lease (``record_runs``)."""
    lead = resuming(sched, gauge)
    elected = leader.LeaderElector(api, lease, on_started=lead.started, on_stopped=lead.stopped)
    record_runs(sched, elected)
    return elected


class Runtime(NamedTuple):
    """What a part's probes and hooks may look at, built by ``run_elected``."""

    scheduler: BackgroundScheduler
    elector: leader.LeaderElector


class Guarded(Protocol):
    """A job that stops early once ``active()`` is false (this process lost the Lease)."""

    active: Callable[[], bool]


def _nothing(_: Runtime) -> None:
    return None


@dataclasses.dataclass(frozen=True)
class ElectedPart:
    """One leader-elected part, as ``run_elected`` runs it."""

    name: str  # as in ``tether <name>``
    log: logging.Logger  # its start and stop lines
    api: gateway.Kube  # where its Lease is
    lease: leader.LeaseSettings
    scheduler: BackgroundScheduler  # started paused, its jobs added (``scheduler``)
    leadership: Leadership  # ``resuming(scheduler, gauge)`` unless it brings its own
    bind: str  # host:port of the operations surface
    app: Callable[[Runtime], flask.Flask]  # that surface (its probes look at the runtime)
    announce: Callable[[], None]  # the start line, once the elector runs
    guarded: Sequence[Guarded] = ()  # their ``active`` follows the Lease
    attach: Callable[[Runtime], None] = _nothing  # anything else that needs the elector
    close: Sequence[Callable[[], None]] = ()  # in order, after the scheduler and the surface
    bind_variable: str | None = None  # a bind that fails: one line naming it, exit 2
    stopping: str = "%(log)s stopping"  # the stop line (%(log)s: the log's name; %(signal)d)


def run_elected(part: ElectedPart) -> int:
    """The operations surface and the elector (each run of the scheduler's jobs recorded on
    the Lease) until SIGTERM or SIGINT; then the Lease released, the scheduler shut down (a
    run in progress finishes), the surface stopped and ``close`` called. Returns 0."""
    elected = leader.LeaderElector(
        part.api, part.lease, on_started=part.leadership.started, on_stopped=part.leadership.stopped
    )
    record_runs(part.scheduler, elected)
    rt = Runtime(part.scheduler, elected)
    for job in part.guarded:
        job.active = elected.fresh
    part.attach(rt)
    try:
        server = ops.Server(part.app(rt), part.bind)
    except OSError as e:
        if part.bind_variable is None:
            raise
        config.fail(
            part.name, f"{part.bind_variable}: cannot listen on {part.bind}: {e.strerror or e}"
        )
    done = threading.Event()
    received: list[int] = []

    def stop(signum: int, _: FrameType | None) -> None:
        received.append(signum)
        done.set()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    server.start()
    elected.start()
    guard = clockstep.Guard([part.scheduler]).start()  # a clock stepped back pauses no run
    part.announce()
    done.wait()
    part.log.info(part.stopping, {"log": part.log.name, "signal": received[0]})
    elected.stop()
    guard.stop()
    if part.scheduler.running:
        part.scheduler.shutdown(wait=True)
    server.stop()
    for close in part.close:
        close()
    return 0
