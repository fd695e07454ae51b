"""``tether canary``: the delivery canary on the KCP (docs/canary.md).

Settings come from ``TETHER_CANARY_*`` environment variables (``tether canary --help``); a
bad one, or a kubeconfig that does not load, stops the process with one line before
anything starts. Then ``tether.runtime.elected.run_elected``: while this process holds the
Lease, one probe (``canary.Canary.run``) every ``TETHER_CANARY_INTERVAL_SECONDS``, the first
at once; ``--once`` runs one probe without an election, prints its result and exits (0 when
every stage is ok). /healthz, /readyz and /metrics on ``TETHER_CANARY_BIND``.
"""

from __future__ import annotations

import dataclasses
import logging
import sys

from apscheduler.triggers.interval import IntervalTrigger

from canary import settings as settings_mod
from canary.app import create_app
from canary.canary import Canary
from canary.metrics import Metrics
from tether.kube import skr_clients
from tether.runtime import elected, leader

log = logging.getLogger("canary")


def main(argv: list[str]) -> int:
    s, args, kcp = elected.start(
        settings_mod.SPEC,
        argv,
        settings_mod.build,
        kubeconfig_variable="TETHER_CANARY_KUBECONFIG",
        once="one probe, no election, then exit (0: every stage ok)",
    )
    meters = Metrics()
    skrs = skr_clients.SkrClients(
        kcp, s.kcp_namespace, dataclasses.replace(s.runtimes, timeout=s.skr_timeout)
    )
    can = Canary(kcp, skrs, s, meters)
    if args.once:
        report = can.run()
        print(report)
        skrs.close()
        return 0 if report.ok and not report.skipped else 1
    sched = elected.scheduler(
        [elected.Job("probe", can.run, IntervalTrigger(seconds=s.interval), at_once=True)]
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
            "canary",
            log,
            kcp,
            lease,
            sched,
            elected.resuming(sched, meters.leader),
            s.bind,
            app=lambda rt: create_app(
                meters, ready=lambda: rt.elector.alive() and rt.scheduler.running
            ),
            guarded=[can],
            close=[can.stopped.set, skrs.close],
            bind_variable="TETHER_CANARY_BIND",
            announce=lambda: log.info(
                "canary started: %s every %.0fs (Watch %s, ConfigMap %s/%s), Lease %s/%s",
                f"runtime {s.runtime}" if s.enabled else "no probe runtime (TETHER_CANARY_RUNTIME)",
                s.interval,
                s.watch,
                s.namespace,
                s.name,
                s.lease_namespace,
                s.lease_name,
            ),
        )
    )


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
