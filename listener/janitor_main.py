"""``tether janitor``: the listener's storage janitor on the KCP (``listener.janitor``).

Settings come from ``TETHER_LISTENER_*`` environment variables (``tether janitor --help``,
docs/listener.md); a bad one, or a kubeconfig that does not load, stops the process with one
line before anything starts (``--check`` only checks).
Builds the KCP client, a paused APScheduler interval job and the Lease elector that resumes
it (``common.leader``); serves /healthz, /readyz and /metrics on ``JANITOR_BIND``; stops
cleanly on SIGTERM (releasing the Lease).

A process of its own, not a gunicorn worker: APScheduler jobs cannot be shared between
processes, and workers must never run schedulers.
"""

from __future__ import annotations

import datetime
import logging
import signal
import sys
import threading
from collections.abc import Callable

import flask
from apscheduler.schedulers.background import BackgroundScheduler
from apscheduler.triggers.interval import IntervalTrigger

from common import config, gateway, leader, logs, ops
from listener import janitor
from listener import metrics as listener_metrics
from listener import settings as settings_mod

log = logging.getLogger("janitor")


def create_app(meters: listener_metrics.JanitorMetrics, ready: Callable[[], bool], *,
               cache_seconds: float = ops.READY_CACHE_SECONDS) -> flask.Flask:
    """The operations surface (``common.ops``): /healthz, /readyz (leading or standing by:
    the elector and the scheduler run), /metrics."""
    probes = ops.Probes(cache_seconds=cache_seconds).ready(
        "scheduler", lambda: None if ready() else "elector or scheduler not running")
    return ops.create_app("janitor", probes, ops.Exposition(meters.registry).render)


def scheduler(job: janitor.Janitor, interval: float) -> BackgroundScheduler:
    """A paused scheduler with the janitor's interval run (resumed while leading)."""
    sched = BackgroundScheduler(timezone=datetime.UTC, job_defaults={
        "coalesce": True, "max_instances": 1, "misfire_grace_time": None})
    sched.add_job(job.run, IntervalTrigger(seconds=interval), id="janitor",
                  next_run_time=datetime.datetime.now(datetime.UTC))
    sched.start(paused=True)
    return sched


def main(argv: list[str]) -> int:
    s, args = config.load(
        settings_mod.JANITOR_SPEC, argv, settings_mod.janitor_build,
        options=lambda p: p.add_argument("--once", action="store_true",
                                         help="one run, no election, then exit"))
    try:
        api = gateway.from_kubeconfig(s.kubeconfig)
    except gateway.KubeConfigError as e:
        config.fail("janitor", f"TETHER_LISTENER_KUBECONFIG: {e}")
    logs.configure(s.log_level, s.log_format)
    meters = listener_metrics.JanitorMetrics()
    job = janitor.Janitor(janitor.Kcp(api, s.namespace, s.kcp_timeout), s, meters,
                          logs.audit_logger(s.audit_log))
    if args.once:
        summary = job.run()
        print(summary)
        return 0 if summary.ok else 1
    sched = scheduler(job, s.interval)

    def started() -> None:
        meters.leader.set(1)
        sched.resume()

    def stopped() -> None:
        meters.leader.set(0)
        sched.pause()

    elector = leader.LeaderElector(
        api, leader.LeaseSettings(namespace=s.namespace, name=s.lease_name,
                                  lease_duration=s.lease_duration,
                                  renew_deadline=s.lease_duration * 2 / 3,
                                  retry_period=max(0.5, s.lease_duration / 7)),
        on_started=started, on_stopped=stopped)
    job.active = lambda: elector.is_leader
    http = ops.Server(create_app(meters, ready=lambda: elector.alive() and sched.running),
                      f"{s.http_host}:{s.http_port}").start()
    done = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: done.set())
    signal.signal(signal.SIGINT, lambda *_: done.set())
    elector.start()
    log.info("janitor started: namespace %s, interval %.0fs, tombstone retention %.0fs, "
             "orphan grace %.0fs", s.namespace, s.interval, s.storage.tombstone_retention,
             s.orphan_grace)
    done.wait()
    log.info("janitor stopping")
    elector.stop()
    sched.shutdown(wait=True)
    http.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
