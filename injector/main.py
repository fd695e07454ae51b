"""``tether injector``: the configuration injector on the KCP (docs/injector.md).

Settings come from ``TETHER_INJECTOR_*`` environment variables (``tether injector --help``);
a bad one, or a kubeconfig that does not load, stops the process with one line before
anything starts (``--check`` only checks). Then ``tether.runtime.elected.run_elected``: while this
process holds the Lease, the Watch list is read every ``TETHER_INJECTOR_WATCH_LIST_SECONDS``
and every Watch with ``inject`` gets a ``worker.Worker`` (its consumer and applier threads;
the records read into memory at once, all Watches together, within one ``ReadBudget``);
the periodic pass (``TETHER_INJECTOR_RESYNC_SECONDS``) offers every runtime again. Losing the
Lease stops every worker. /healthz, /readyz and /metrics on ``TETHER_INJECTOR_BIND``.
"""

from __future__ import annotations

import datetime
import logging
import sys

from apscheduler.schedulers.background import BackgroundScheduler
from apscheduler.triggers.interval import IntervalTrigger

from injector import settings as settings_mod
from injector.app import create_app
from injector.injector import Injector
from injector.metrics import Metrics
from tether.kube import events
from tether.runtime import elected, leader

log = logging.getLogger("injector")


def leadership(sched: BackgroundScheduler, meters: Metrics, inj: Injector) -> elected.Leadership:
    """Leading: the jobs run, the Watch list is read at once; not leading: every worker stops."""

    def started() -> None:
        inj.active = True
        meters.leader.set(1)
        sched.resume()
        sched.modify_job("watches", next_run_time=datetime.datetime.now(datetime.UTC))

    def stopped() -> None:
        meters.leader.set(0)
        sched.pause()
        inj.stop_all()

    return elected.Leadership(started, stopped)


def main(argv: list[str]) -> int:
    s, _, api = elected.start(
        settings_mod.SPEC,
        argv,
        settings_mod.build,
        kubeconfig_variable="TETHER_INJECTOR_KUBECONFIG",
    )
    meters = Metrics()
    inj = Injector(api, s, meters, events.Recorder(api, "tether-injector", s.identity))
    sched = elected.scheduler(
        [
            elected.Job(
                "watches", inj.refresh, IntervalTrigger(seconds=s.watches_interval), at_once=True
            ),
            elected.Job("resync", inj.resync, IntervalTrigger(seconds=s.resync_interval)),
        ]
    )
    lease = leader.LeaseSettings(
        namespace=s.lease_namespace,
        name=s.lease_name,
        identity=s.identity,
        lease_duration=s.lease_duration,
        renew_deadline=s.lease_duration * 2 / 3,
        retry_period=max(0.5, s.lease_duration / 7),
    )
    return elected.run_elected(
        elected.ElectedPart(
            "injector",
            log,
            api,
            lease,
            sched,
            leadership(sched, meters, inj),
            s.bind,
            app=lambda rt: create_app(
                meters, ready=lambda: rt.elector.alive() and rt.scheduler.running
            ),
            close=[inj.stop_all],
            bind_variable="TETHER_INJECTOR_BIND",
            announce=lambda: log.info(
                "injector started: Watches in %s (read every %.0fs), periodic pass every %.0fs, "
                "Lease %s/%s",
                s.namespace,
                s.watches_interval,
                s.resync_interval,
                s.lease_namespace,
                s.lease_name,
            ),
        )
    )


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
