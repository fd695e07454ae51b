"""``tether janitor``: the listener's storage janitor on the KCP (``listener.janitor.sweep``).

Settings come from ``TETHER_LISTENER_*`` environment variables (``tether janitor --help``,
docs/listener.md); a bad one, or a kubeconfig that does not load, stops the process with one
line before anything starts (``--check`` only checks).
Builds the KCP client and the janitor; then ``tether.runtime.elected.run_elected``: its interval
run in the Lease holder, /healthz, /readyz and /metrics on ``JANITOR_BIND``, a clean stop on
SIGTERM (releasing the Lease). ``--once``: one run, no election, exit 1 if it failed.

A process of its own, not a gunicorn worker: APScheduler jobs cannot be shared between
processes, and workers must never run schedulers.
"""

from __future__ import annotations

import logging
import sys

from apscheduler.triggers.interval import IntervalTrigger

from listener.fleet import statesummary
from listener.janitor import app as app_mod
from listener.janitor import metrics as janitor_metrics
from listener.janitor import settings as settings_mod
from listener.janitor import sweep as janitor
from tether.base import auditwriter, logs
from tether.runtime import elected, leader

log = logging.getLogger("janitor")


def lease(s: settings_mod.JanitorSettings) -> leader.LeaseSettings:
    """The janitor's Lease: its duration set, renewed within two thirds of it."""
    return leader.LeaseSettings(
        namespace=s.lease_namespace,
        name=s.lease_name,
        lease_duration=s.lease_duration,
        renew_deadline=s.lease_duration * 2 / 3,
        retry_period=max(0.5, s.lease_duration / 7),
    )


def main(argv: list[str]) -> int:
    s, args, api = elected.start(
        settings_mod.SPEC,
        argv,
        settings_mod.build,
        kubeconfig_variable="TETHER_LISTENER_KUBECONFIG",
        once="one run, no election, then exit",
    )
    meters = janitor_metrics.JanitorMetrics()
    job = janitor.Janitor(
        janitor.Kcp(api, s.namespace, s.kcp_timeout, s.heartbeat_namespace),
        s,
        meters,
        logs.audit_logger(
            s.audit_log,
            on_lost=auditwriter.counting(meters.audit_lost),
            queue_lines=s.audit_queue_lines,
        ),
        summaries=statesummary.Summaries(api, s.namespace, s.kcp_timeout),
    )
    if args.once:
        summary = job.run()
        print(summary)
        return 0 if summary.ok else 1
    sched = elected.scheduler(
        [elected.Job("janitor", job.run, IntervalTrigger(seconds=s.interval), at_once=True)]
    )
    return elected.run_elected(
        elected.ElectedPart(
            "janitor",
            log,
            api,
            lease(s),
            sched,
            elected.resuming(sched, meters.leader),
            f"{s.http_host}:{s.http_port}",
            app=lambda rt: app_mod.create_app(
                meters, ready=lambda: rt.elector.alive() and rt.scheduler.running
            ),
            guarded=[job],
            announce=lambda: log.info(
                "janitor started: namespace %s, heartbeats in %s, Lease %s/%s, interval %.0fs, "
                "tombstone retention %.0fs, orphan grace %.0fs",
                s.namespace,
                s.heartbeat_namespace,
                s.lease_namespace,
                s.lease_name,
                s.interval,
                s.storage.tombstone_retention,
                s.orphan_grace,
            ),
        )
    )


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
