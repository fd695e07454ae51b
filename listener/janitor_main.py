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
import sys
from collections.abc import Callable

import flask
from apscheduler.schedulers.background import BackgroundScheduler
from apscheduler.triggers.interval import IntervalTrigger

from common import elected, leader, logs, ops
from listener import janitor, statesummary
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
    s, args, api = elected.start(settings_mod.JANITOR_SPEC, argv, settings_mod.janitor_build,
                                 kubeconfig_variable="TETHER_LISTENER_KUBECONFIG",
                                 once="one run, no election, then exit")
    meters = listener_metrics.JanitorMetrics()
    job = janitor.Janitor(janitor.Kcp(api, s.namespace, s.kcp_timeout, s.heartbeat_namespace),
                          s, meters,
                          logs.audit_logger(s.audit_log),
                          summaries=statesummary.Summaries(api, s.namespace, s.kcp_timeout))
    if args.once:
        summary = job.run()
        print(summary)
        return 0 if summary.ok else 1
    sched = scheduler(job, s.interval)
    elector = elected.elector(
        api, leader.LeaseSettings(namespace=s.lease_namespace, name=s.lease_name,
                                  lease_duration=s.lease_duration,
                                  renew_deadline=s.lease_duration * 2 / 3,
                                  retry_period=max(0.5, s.lease_duration / 7)),
        sched, meters.leader)
    job.active = lambda: elector.is_leader
    http = ops.Server(create_app(meters, ready=lambda: elector.alive() and sched.running),
                      f"{s.http_host}:{s.http_port}").start()
    elected.run(log, elector, sched, stop=http.stop, announce=lambda: log.info(
        "janitor started: namespace %s, heartbeats in %s, Lease %s/%s, interval %.0fs, "
        "tombstone retention %.0fs, orphan grace %.0fs", s.namespace, s.heartbeat_namespace,
        s.lease_namespace, s.lease_name, s.interval, s.storage.tombstone_retention,
        s.orphan_grace))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
