"""The entry point of a leader-elected part (compass, the janitor, the enroller), written once.

``start``: settings (with ``--once`` where the part has it), the KCP gateway from the
kubeconfig and the log configuration, before anything starts; a kubeconfig that does not
load stops the process with one line naming its variable (``config.fail``).
``elector``: a ``leader.LeaderElector`` that resumes a paused scheduler while this process
holds the Lease and pauses it when it loses it, with the part's leader gauge at 1 or 0.
``run``: start the elector, wait for SIGTERM or SIGINT, then release the Lease, stop the
scheduler and whatever else the part started.
``record_runs``: after every scheduled run, its end, result and duration go on the Lease as
annotations (``LAST_RUN_AT``, ``LAST_RUN_RESULT``, ``LAST_RUN_SECONDS``; ``elector`` does it
for the parts that use it, the poller calls it itself). A job reports its result by what it
returns: ``ok`` false means ``failed``, ``skipped`` true means no run (an overlap); an
exception is ``failed`` (and re-raised, for APScheduler to log as before).
"""

from __future__ import annotations

import argparse
import datetime
import functools
import logging
import signal
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, Literal, Protocol, TypeVar

import prometheus_client as prom
from apscheduler.schedulers.background import BackgroundScheduler

from common import config, gateway, leader, logs


class Startable(Protocol):
    """What ``start`` reads of a part's settings."""

    @property
    def kubeconfig(self) -> str | None: ...
    @property
    def log_level(self) -> str: ...
    @property
    def log_format(self) -> str: ...


S = TypeVar("S", bound=Startable)

LAST_RUN_AT = "tether.kyma-project.io/last-run-at"            # RFC 3339, UTC, seconds
LAST_RUN_RESULT = "tether.kyma-project.io/last-run-result"    # ok | failed
LAST_RUN_SECONDS = "tether.kyma-project.io/last-run-seconds"  # decimal, 3 places
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
    return {LAST_RUN_AT: ended.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
            LAST_RUN_RESULT: result, LAST_RUN_SECONDS: f"{max(0.0, seconds):.3f}"}


def recorded(fn: Callable[..., Any], publish: Callable[[dict[str, str]], None]) -> Callable[..., Any]:
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
                    publish(last_run(datetime.datetime.now(datetime.UTC), result,
                                     time.monotonic() - t0))
                except Exception as e:  # noqa: BLE001 - publishing never stops a run
                    log.warning("last run not published: %s", logs.bounded(e, 200))
    return run


def record_runs(sched: BackgroundScheduler, elected: leader.LeaderElector) -> None:
    """Every job now in ``sched`` publishes its runs on ``elected``'s Lease."""
    for job in sched.get_jobs():
        job.modify(func=recorded(job.func, elected.annotate))


def start(spec: config.Spec, argv: Sequence[str], build: Callable[[config.Values], S], *,
          kubeconfig_variable: str, once: str | None = None,
          ) -> tuple[S, argparse.Namespace, gateway.Kube]:
    """Settings, flags and the KCP gateway; logs configured. ``once``: the help of the
    part's ``--once`` flag (``None``: the part has none)."""
    def options(parser: argparse.ArgumentParser) -> None:
        if once is not None:
            parser.add_argument("--once", action="store_true", help=once)

    s, args = config.load(spec, argv, build, options=options)
    try:
        api = gateway.from_kubeconfig(s.kubeconfig)
    except gateway.KubeConfigError as e:
        config.fail(spec.part, f"{kubeconfig_variable}: {e}")
    logs.configure(s.log_level, s.log_format)
    return s, args, api


def elector(api: gateway.Kube, lease: leader.LeaseSettings, sched: BackgroundScheduler,
            gauge: prom.Gauge) -> leader.LeaderElector:
    """An elector that runs ``sched`` (started paused, its jobs added) only while leading,
    and publishes each run of its jobs on the Lease (``record_runs``)."""
    def started() -> None:
        gauge.set(1)
        sched.resume()

    def stopped() -> None:
        gauge.set(0)
        sched.pause()

    elected = leader.LeaderElector(api, lease, on_started=started, on_stopped=stopped)
    record_runs(sched, elected)
    return elected


def run(log: logging.Logger, elected: leader.LeaderElector, sched: BackgroundScheduler, *,
        announce: Callable[[], None], stop: Callable[[], None]) -> None:
    """Until SIGTERM or SIGINT: ``announce`` once the elector runs; on the signal release
    the Lease, shut the scheduler down, then ``stop`` the rest."""
    done = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: done.set())
    signal.signal(signal.SIGINT, lambda *_: done.set())
    elected.start()
    announce()
    done.wait()
    log.info("%s stopping", log.name)
    elected.stop()
    sched.shutdown(wait=True)
    stop()
