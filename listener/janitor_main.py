"""``tether janitor``: the listener's storage janitor on the KCP (``listener.janitor``).

Settings come from ``TETHER_LISTENER_*`` environment variables (docs/listener.md); a bad
one stops the process with one line before anything starts (``--check`` only validates).
Builds the KCP client, a paused APScheduler interval job and the Lease elector that resumes
it (``common.leader``); serves /healthz, /readyz and /metrics on ``JANITOR_BIND``; stops
cleanly on SIGTERM (releasing the Lease).

A process of its own, not a gunicorn worker: APScheduler jobs cannot be shared between
processes, and workers must never run schedulers.
"""

from __future__ import annotations

import argparse
import datetime
import logging
import signal
import sys
import threading
from collections.abc import Callable

import flask
import prometheus_client as prom
from apscheduler.schedulers.background import BackgroundScheduler
from apscheduler.triggers.interval import IntervalTrigger
from werkzeug import serving

from common import config, kube, leader, logs
from listener import janitor
from listener import metrics as listener_metrics
from listener import settings as settings_mod

log = logging.getLogger("janitor")


def create_app(meters: listener_metrics.JanitorMetrics, ready: Callable[[], bool]) -> flask.Flask:
    app = flask.Flask("janitor")

    @app.get("/healthz")
    def healthz() -> flask.Response:
        return flask.jsonify({"status": "ok"})

    @app.get("/readyz")
    def readyz() -> flask.Response:
        ok = ready()
        resp = flask.jsonify({"status": "ok" if ok else "starting"})
        resp.status_code = 200 if ok else 503
        return resp

    @app.get("/metrics")
    def metrics_endpoint() -> flask.Response:
        return flask.Response(prom.generate_latest(meters.registry),
                              mimetype=prom.CONTENT_TYPE_LATEST)

    return app


def scheduler(job: janitor.Janitor, interval: float) -> BackgroundScheduler:
    """A paused scheduler with the janitor's interval run (resumed while leading)."""
    sched = BackgroundScheduler(timezone=datetime.UTC, job_defaults={
        "coalesce": True, "max_instances": 1, "misfire_grace_time": None})
    sched.add_job(job.run, IntervalTrigger(seconds=interval), id="janitor",
                  next_run_time=datetime.datetime.now(datetime.UTC))
    sched.start(paused=True)
    return sched


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="tether janitor", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--check", action="store_true", help="validate the settings and exit")
    p.add_argument("--once", action="store_true", help="one run, no election, then exit")
    args = p.parse_args(argv)
    try:
        s = settings_mod.janitor_from_env()
    except config.SettingError as e:
        print(f"tether janitor: {e}", file=sys.stderr)
        return 2
    if args.check:
        print("settings ok")
        return 0
    logs.configure(s.log_level, s.log_format)
    try:
        api = kube.api_client(s.kubeconfig)
    except kube.KubeConfigError as e:
        print(f"tether janitor: {e}", file=sys.stderr)
        return 2
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
    http = serving.make_server(s.http_host, s.http_port,
                               create_app(meters, ready=lambda: elector.alive() and sched.running),
                               threaded=True)
    threading.Thread(target=http.serve_forever, name="http", daemon=True).start()
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
    http.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
