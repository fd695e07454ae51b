"""The entry point of a leader-elected part (compass, the janitor, the poller), written once.

``start``: settings (with ``--once`` where the part has it), the KCP gateway from the
kubeconfig and the log configuration, before anything starts; a kubeconfig that does not
load stops the process with one line naming its variable (``config.fail``).
``elector``: a ``leader.LeaderElector`` that resumes a paused scheduler while this process
holds the Lease and pauses it when it loses it, with the part's leader gauge at 1 or 0.
``run``: start the elector, wait for SIGTERM or SIGINT, then release the Lease, stop the
scheduler and whatever else the part started.
"""

from __future__ import annotations

import argparse
import logging
import signal
import threading
from collections.abc import Callable, Sequence
from typing import Protocol, TypeVar

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
    """An elector that runs ``sched`` (started paused) only while leading."""
    def started() -> None:
        gauge.set(1)
        sched.resume()

    def stopped() -> None:
        gauge.set(0)
        sched.pause()

    return leader.LeaderElector(api, lease, on_started=started, on_stopped=stopped)


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
