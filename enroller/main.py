"""``tether enroller``: certificates and Tether's installation in every runtime (KCP).

Builds settings (``tether enroller --help``, docs/enroller.md; a bad one stops it with one
line), the KCP client and the enroller; then ``tether.runtime.elected.run_elected``: in the Lease
holder the interval run over every Kyma CR and a light list every ``REACT_SECONDS`` that
runs the Kyma CRs that changed; /healthz, /readyz and /metrics; a clean stop on SIGTERM
(releasing the Lease). ``--once``: one run, no election, the states printed.
``--uninstall``: Tether removed from every runtime it works on (``enroller.removal.uninstall``).
``--dry-run``: what ``--once`` would do, per runtime, with reads only (``enroller.dryrun``).
"""

from __future__ import annotations

import dataclasses
import logging

from apscheduler.triggers.interval import IntervalTrigger

from enroller import app as app_mod
from enroller import dryrun, metrics, reconcile, removal
from enroller import settings as settings_mod
from tether.base import auditwriter, logs
from tether.kube import skr_clients
from tether.runtime import elected, leader

log = logging.getLogger("enroller")


def jobs(e: reconcile.Enroller, s: settings_mod.Settings) -> list[elected.Job]:
    """The interval run (the first at once) and the react list."""
    return [
        elected.Job("interval", e.run, IntervalTrigger(seconds=s.interval), at_once=True),
        elected.Job("react", e.react, IntervalTrigger(seconds=s.react_seconds)),
    ]


def main(argv: list[str]) -> int:
    s, args, kcp = elected.start(
        settings_mod.SPEC,
        argv,
        settings_mod.build,
        kubeconfig_variable="TETHER_ENROLLER_KUBECONFIG",
        once="one run over every Kyma CR, no election, then exit",
        flags={
            "--dry-run": "print what one run would install or change in each runtime (and "
            "where); reads only, writes nothing to the KCP or to any runtime; then exit",
            "--uninstall": "remove Tether from every runtime the enroller works on (its "
            "selector's and those carrying its finalizer), release the finalizers, delete the "
            "RuntimeEnrollments, print the counts and exit (stop the enroller Deployment "
            "first; docs/enroller.md)",
        },
    )
    stats = metrics.Metrics()
    skrs = skr_clients.SkrClients(
        kcp, s.kcp_namespace, dataclasses.replace(s.runtimes, timeout=s.skr_timeout)
    )
    audit = logs.audit_logger(
        s.audit_destination,
        on_lost=auditwriter.counting(stats.audit_lost),
        queue_lines=s.audit_queue_lines,
    )
    if args.dry_run:  # nothing happens: no audit line says it did
        audit = logging.getLogger("tether.enroller.dry-run")
        audit.disabled = True
    e = reconcile.Enroller(s, kcp, skrs, stats, audit)
    if args.dry_run:
        print("\n".join(dryrun.dry_run(e)))
        skrs.close()
        return 0
    if args.uninstall:
        done = removal.uninstall(e)
        print(done)
        skrs.close()
        return 1 if done.get("Failed") else 0
    if args.once:
        print(e.run())
        skrs.close()
        return 0
    sched = elected.scheduler(jobs(e, s))
    return elected.run_elected(
        elected.ElectedPart(
            "enroller",
            log,
            kcp,
            leader.LeaseSettings(namespace=s.namespace, name=s.lease_name),
            sched,
            elected.resuming(sched, stats.leader),
            s.bind,
            app=lambda rt: app_mod.create_app(stats, ready=lambda: rt.scheduler.running),
            guarded=[e],
            close=[skrs.close],
            announce=lambda: log.info(
                "enroller started: Kyma CRs in %s, interval %.0fs, certificates for %s",
                s.kcp_namespace,
                s.interval,
                s.cert_lifetime,
            ),
        )
    )
