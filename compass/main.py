"""``tether compass``: the Compass registration scheduler on the KCP.

Builds settings (environment, see docs/compass.md), the KCP client, the service, a
paused scheduler and the Lease elector that resumes it; serves /healthz, /readyz and
/metrics; stops cleanly on SIGTERM (releasing the Lease).
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading

from werkzeug import serving

from common import config, kube, leader, logs
from compass import app as app_mod
from compass import metrics, service
from compass import settings as settings_mod

log = logging.getLogger("compass")


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="tether compass", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--kubeconfig", help="KCP kubeconfig (default: $KUBECONFIG, else in-cluster)")
    p.add_argument("--once", action="store_true", help="one full run, no election, then exit")
    args = p.parse_args(argv)
    try:
        s = settings_mod.from_env()
    except config.SettingError as e:
        print(f"tether compass: {e}", file=sys.stderr)
        return 2
    logs.configure(s.log_level, s.log_format)
    audit = logs.audit_logger(s.audit_destination)
    try:
        kcp_api = kube.api_client(args.kubeconfig)
    except kube.KubeConfigError as e:
        print(f"tether compass: {e}", file=sys.stderr)
        return 2
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
