"""``tether compass``: the Compass registration scheduler on the KCP.

Builds settings (environment, ``tether compass --help``, docs/compass.md; a bad one, or a
kubeconfig that does not load, stops it with one line before anything starts), the KCP
client and the service; then ``tether.runtime.elected.run_elected``: the interval run and the cron
resync in the Lease holder, /healthz, /readyz and /metrics, a clean stop on SIGTERM
(releasing the Lease). ``--once``: one full run, no election, the states printed.
"""

from __future__ import annotations

import logging

from compass import app as app_mod
from compass import metrics, service
from compass import settings as settings_mod
from tether.base import auditwriter, logs
from tether.runtime import elected, leader

log = logging.getLogger("compass")


def attach(svc: service.Service, rt: elected.Runtime) -> None:
    """The breaker and Director errors go on the Lease; Director writes only while this
    process's leadership is fresh (``DirectorClient.fence``)."""
    svc.notes.attach(rt.elector.annotate)
    svc.director.fence = rt.elector.fresh


def main(argv: list[str]) -> int:
    s, args, kcp_api = elected.start(
        settings_mod.SPEC,
        argv,
        settings_mod.build,
        kubeconfig_variable="TETHER_COMPASS_KUBECONFIG",
        once="one full run, no election, then exit",
    )
    stats = metrics.Metrics()
    svc = service.build(
        s,
        kcp_api,
        stats,
        logs.audit_logger(
            s.audit_destination,
            on_lost=auditwriter.counting(stats.audit_lost),
            queue_lines=s.audit_queue_lines,
        ),
    )
    if args.once:
        summary = svc.job.run(full=True)
        svc.close()
        print(summary.states)
        return 0
    sched = service.scheduler(svc)
    return elected.run_elected(
        elected.ElectedPart(
            "compass",
            log,
            kcp_api,
            leader.LeaseSettings(namespace=s.lease_namespace, name=s.lease_name),
            sched,
            elected.resuming(sched, stats.leader),
            s.bind,
            app=lambda rt: app_mod.create_app(stats, ready=lambda: rt.scheduler.running),
            guarded=[svc.job],
            attach=lambda rt: attach(svc, rt),
            close=[svc.close],
            announce=lambda: log.info(
                "compass started: namespace %s, interval %.0fs, resync %r",
                s.namespace,
                s.interval,
                s.resync_cron,
            ),
        )
    )
