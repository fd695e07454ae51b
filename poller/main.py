"""``tether poller``: build settings and clients, elect a leader, schedule runs, serve probes.

Wiring only: the decisions live in ``poller.diff``/``poller.pacing``, one run in
``poller.run``, scheduling and leadership in ``poller.service``, the HTTP endpoints in
``poller.app``, the election and the stop in ``tether.runtime.elected.run_elected``. SIGTERM/SIGINT:
stop the elector (releasing the Lease so the other replica takes over at once), let a run
in progress stop at its next page, exit 0.
"""

from __future__ import annotations

import logging
import sys

from poller import app, metrics, run, scan, service, watchrun
from poller import settings as settings_mod
from tether.base import tracing
from tether.runtime import elected, sender
from tether.wire import watchset

log = logging.getLogger(__name__)


def main(argv: list[str]) -> int:
    s, _, api = elected.start(
        settings_mod.SPEC, argv, settings_mod.build, kubeconfig_variable="TETHER_KUBECONFIG"
    )
    logging.getLogger("werkzeug").setLevel(logging.WARNING)
    logging.getLogger("apscheduler").setLevel(logging.WARNING)
    m = metrics.Metrics()
    # each POST of a run starts a change's trace (tether.base.tracing; spans only with an OTLP
    # endpoint)
    client = sender.ListenerClient(s.listener, tracing.from_environment("tether-poller"))
    lister = scan.Lister(
        api,
        s.filter,
        page_size=s.run.page_size,
        timeout=s.list_timeout,
        on_request=m.apiserver_requests.inc,
    )
    # the runtime's Watches (tether-watches ConfigMap); while it is absent: the env's scope
    ns, name = s.watches_configmap
    source = watchset.WatchSet(
        api,
        ns,
        name=name,
        timeout=s.list_timeout,
        digest_key=watchset.read_digest_key(s.digest_key_file),
    )
    runner = run.Runner(
        s.runtime_id,
        s.run,
        s.filter,
        lister,
        client,
        m,
        identity=lister.identity,
        watches=watchrun.Watching(source, lister),
    )
    svc = service.Service(s.schedule, runner, m)
    sched = svc.start()  # paused; its leadership reschedules the runs from the moment it leads
    return elected.run_elected(
        elected.ElectedPart(
            "poller",
            log,
            api,
            s.lease,
            sched,
            elected.Leadership(svc.on_started, svc.on_stopped),
            s.bind,
            app=lambda rt: app.create_app(s, app.Running(svc, rt.elector, client, m)),
            bind_variable="TETHER_POLLER_BIND",
            stopping="signal %(signal)d: stopping",
            close=[svc.shutdown, client.close, api.close],
            announce=lambda: log.info(
                "poller for runtime %s: lease %s/%s as %s, probes on %s",
                s.runtime_id,
                s.lease.namespace,
                s.lease.name,
                s.lease.identity,
                s.bind,
            ),
        )
    )


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
