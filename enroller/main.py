"""``tether enroller``: certificates and Tether's installation in every runtime (KCP).

Builds settings (``tether enroller --help``, docs/enroller.md; a bad one stops it with one
line), the KCP client, the enroller, a paused scheduler (the interval run over every Kyma
CR, and a light list every ``REACT_SECONDS`` that runs the Kyma CRs that changed) and the
Lease elector that resumes it; serves /healthz, /readyz and /metrics; stops cleanly on
SIGTERM (releasing the Lease). ``--once``: one run, no election, the states printed.
"""

from __future__ import annotations

import dataclasses
import datetime
import logging
import threading

from apscheduler.schedulers.background import BackgroundScheduler
from apscheduler.triggers.interval import IntervalTrigger
from werkzeug import serving

from common import elected, leader, logs, ops, skr_clients
from enroller import metrics, reconcile
from enroller import settings as settings_mod

log = logging.getLogger("enroller")


def scheduler(e: reconcile.Enroller, s: settings_mod.Settings) -> BackgroundScheduler:
    sched = BackgroundScheduler(timezone=datetime.UTC, job_defaults={
        "coalesce": True, "max_instances": 1, "misfire_grace_time": None})
    sched.add_job(e.run, IntervalTrigger(seconds=s.interval), id="interval",
                  next_run_time=datetime.datetime.now(datetime.UTC))
    sched.add_job(e.react, IntervalTrigger(seconds=s.react_seconds), id="react")
    sched.start(paused=True)
    return sched


def main(argv: list[str]) -> int:
    s, args, kcp = elected.start(settings_mod.SPEC, argv, settings_mod.build,
                                 kubeconfig_variable="TETHER_ENROLLER_KUBECONFIG",
                                 once="one run over every Kyma CR, no election, then exit")
    audit = logs.audit_logger(s.audit_destination)
    stats = metrics.Metrics()
    skrs = skr_clients.SkrClients(kcp, s.kcp_namespace,
                                  dataclasses.replace(s.runtimes, timeout=s.skr_timeout))
    e = reconcile.Enroller(s, kcp, skrs, stats, audit)
    if args.once:
        print(e.run())
        skrs.close()
        return 0
    sched = scheduler(e, s)
    elector = elected.elector(kcp, leader.LeaseSettings(namespace=s.namespace, name=s.lease_name),
                              sched, stats.leader)
    e.active = lambda: elector.is_leader
    probes = ops.Probes().ready("scheduler", lambda: None if sched.running else "scheduler not started")
    app = ops.create_app("enroller", probes, ops.Exposition(stats.registry).render)
    host, _, port = s.bind.rpartition(":")
    http = serving.make_server(host, int(port), app, threaded=True)
    threading.Thread(target=http.serve_forever, name="http", daemon=True).start()

    def stop() -> None:
        http.shutdown()
        skrs.close()

    elected.run(log, elector, sched, stop=stop, announce=lambda: log.info(
        "enroller started: Kyma CRs in %s, interval %.0fs, certificates for %s", s.kcp_namespace,
        s.interval, s.cert_lifetime))
    return 0
