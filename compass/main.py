"""``tether compass``: the Compass registration scheduler on the KCP.

Builds settings (environment, ``tether compass --help``, docs/compass.md; a bad one, or a
kubeconfig that does not load, stops it with one line before anything starts), the KCP client, the service, a
paused scheduler and the Lease elector that resumes it; serves /healthz, /readyz and
/metrics; stops cleanly on SIGTERM (releasing the Lease).
"""

from __future__ import annotations

import logging
import threading

from werkzeug import serving

from common import elected, leader, logs
from compass import app as app_mod
from compass import metrics, service
from compass import settings as settings_mod

log = logging.getLogger("compass")


def main(argv: list[str]) -> int:
    s, args, kcp_api = elected.start(settings_mod.SPEC, argv, settings_mod.build,
                                     kubeconfig_variable="TETHER_COMPASS_KUBECONFIG",
                                     once="one full run, no election, then exit")
    audit = logs.audit_logger(s.audit_destination)
    stats = metrics.Metrics()
    svc = service.build(s, kcp_api, stats, audit)
    if args.once:
        summary = svc.job.run(full=True)
        svc.close()
        print(summary.states)
        return 0
    sched = service.scheduler(svc)
    elector = elected.elector(
        kcp_api, leader.LeaseSettings(namespace=s.lease_namespace, name=s.lease_name),
        sched, stats.leader)
    svc.job.active = lambda: elector.is_leader
    svc.notes.attach(elector.annotate)  # breaker and Director errors on the Lease
    host, _, port = s.bind.rpartition(":")
    http = serving.make_server(host, int(port),
                               app_mod.create_app(stats, ready=lambda: sched.running),
                               threaded=True)
    threading.Thread(target=http.serve_forever, name="http", daemon=True).start()

    def stop() -> None:
        http.shutdown()
        svc.close()

    elected.run(log, elector, sched, stop=stop, announce=lambda: log.info(
        "compass started: namespace %s, interval %.0fs, resync %r", s.namespace, s.interval,
        s.resync_cron))
    return 0
