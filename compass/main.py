"""``tether compass``: the Compass registration scheduler on the KCP.

Builds settings (environment, ``tether compass --help``, docs/compass.md; a bad one, or a
kubeconfig that does not load, stops it with one line before anything starts), the KCP client, the service, a
paused scheduler and the Lease elector that resumes it; serves /healthz, /readyz and
/metrics; stops cleanly on SIGTERM (releasing the Lease).
"""

from __future__ import annotations

import logging
import signal
import threading

from werkzeug import serving

from common import config, gateway, leader, logs
from compass import app as app_mod
from compass import metrics, service
from compass import settings as settings_mod

log = logging.getLogger("compass")


def main(argv: list[str]) -> int:
    s, args = config.load(
        settings_mod.SPEC, argv, settings_mod.build,
        options=lambda p: p.add_argument("--once", action="store_true",
                                         help="one full run, no election, then exit"))
    try:
        kcp_api = gateway.from_kubeconfig(s.kubeconfig)
    except gateway.KubeConfigError as e:
        config.fail("compass", f"TETHER_COMPASS_KUBECONFIG: {e}")
    logs.configure(s.log_level, s.log_format)
    audit = logs.audit_logger(s.audit_destination)
    stats = metrics.Metrics()
    svc = service.build(s, kcp_api, stats, audit)
    if args.once:
        summary = svc.job.run(full=True)
        svc.close()
        print(summary.states)
        return 0
    sched = service.scheduler(svc)

    def started() -> None:
        stats.leader.set(1)
        sched.resume()

    def stopped() -> None:
        stats.leader.set(0)
        sched.pause()

    elector = leader.LeaderElector(
        kcp_api, leader.LeaseSettings(namespace=s.lease_namespace, name=s.lease_name),
        on_started=started, on_stopped=stopped)
    svc.job.active = lambda: elector.is_leader
    http = serving.make_server("0.0.0.0", s.metrics_port,  # noqa: S104 - probes and scrapes
                               app_mod.create_app(stats, ready=lambda: sched.running),
                               threaded=True)
    threading.Thread(target=http.serve_forever, name="http", daemon=True).start()
    done = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: done.set())
    signal.signal(signal.SIGINT, lambda *_: done.set())
    elector.start()
    log.info("compass started: namespace %s, interval %.0fs, resync %r", s.namespace, s.interval,
             s.resync_cron)
    done.wait()
    log.info("compass stopping")
    elector.stop()
    sched.shutdown(wait=True)
    http.shutdown()
    svc.close()
    return 0
