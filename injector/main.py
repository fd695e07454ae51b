"""``tether injector``: the configuration injector on the KCP (docs/injector.md).

Settings come from ``TETHER_INJECTOR_*`` environment variables (``tether injector --help``);
a bad one, or a kubeconfig that does not load, stops the process with one line before
anything starts (``--check`` only checks). Then ``tether.elected.run_elected``: while this
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
import threading
from collections.abc import Callable

import flask
from apscheduler.schedulers.background import BackgroundScheduler
from apscheduler.triggers.interval import IntervalTrigger

from injector import settings as settings_mod
from injector.metrics import Metrics
from injector.readbudget import ReadBudget
from injector.worker import Worker
from tether import apitypes, elected, events, gateway, leader, logs, ops, watches

log = logging.getLogger("injector")


class Injector:
    """The workers of the Watches with ``inject`` (at most ``max_watches``, by name)."""

    def __init__(
        self,
        kcp: gateway.Kube,
        s: settings_mod.Settings,
        meters: Metrics,
        recorder: events.Recorder,
    ) -> None:
        self.kcp, self.s, self.meters, self.recorder = kcp, s, meters, recorder
        self.workers: dict[str, Worker] = {}
        self.budget = ReadBudget(s.read_bytes)  # the records in memory, all Watches together
        meters.read_bytes_limit.set(s.read_bytes)
        self._lock = threading.Lock()
        self._unusable: dict[str, str] = {}
        self.active = False  # this process leads (a run of refresh racing the loss starts nothing)

    def _watches(self) -> list[watches.Watch]:
        found: list[watches.Watch] = []
        unusable: dict[str, str] = {}
        for obj in self.kcp.list_items(
            apitypes.WATCHES, self.s.namespace, timeout=self.s.kcp_timeout
        ):
            name = str((obj.get("metadata") or {}).get("name", ""))
            try:
                w = watches.parse(obj)
            except ValueError as e:
                unusable[name] = logs.bounded(e, 200)
                continue
            if w.inject is not None:
                found.append(w)
        for name, why in unusable.items():
            if self._unusable.get(name) != why:
                log.warning("Watch %s not usable: %s", name, why)
        self._unusable = unusable
        return sorted(found, key=lambda w: w.name)

    def refresh(self) -> None:
        """Workers for the Watches with inject now; a changed Watch's worker starts again."""
        try:
            current = self._watches()
        except gateway.GatewayError as e:
            log.warning("Watches not listed: %s", logs.bounded(e, 200))
            return
        kept, skipped = current[: self.s.max_watches], current[self.s.max_watches :]
        if skipped:
            log.warning(
                "%d Watches with inject over TETHER_INJECTOR_MAX_WATCHES (%d) not followed: %s",
                len(skipped),
                self.s.max_watches,
                ", ".join(w.name for w in skipped[:10]),
            )
        wanted = {w.name: w for w in kept}
        with self._lock:
            if not self.active:
                return
            for name, worker in list(self.workers.items()):
                w = wanted.get(name)
                if w is None or _shape(w) != _shape(worker.watch):
                    log.info("watch %s: %s", name, "no longer injected" if w is None else "changed")
                    worker.stop()
                    del self.workers[name]
            for name, w in wanted.items():
                if name not in self.workers:
                    worker = self.workers[name] = Worker(
                        self.kcp, w, self.s, self.meters, self.recorder, self.budget
                    )
                    worker.start()
                    log.info(
                        "watch %s: injecting into %s %s in %s (records in %s)",
                        name,
                        w.inject.resource.plural if w.inject else "",
                        w.inject.field_text if w.inject else "",
                        w.inject.namespace if w.inject else "",
                        worker.records_namespace,
                    )
            self.meters.watches.set(len(self.workers))
            self.meters.watches_skipped.set(len(skipped))
            self.meters.unsynced.set_function(self._unsynced)

    def _unsynced(self) -> int:
        """Followed Watches whose first list has not completed (scraped, not stored)."""
        return sum(1 for w in list(self.workers.values()) if not w.synced)

    def resync(self) -> None:
        """The periodic pass: every runtime of every Watch offered again."""
        with self._lock:
            workers = list(self.workers.values())
        for worker in workers:
            worker.resync()

    def stop_all(self) -> None:
        with self._lock:
            self.active = False
            for worker in self.workers.values():
                worker.stop()
            self.workers.clear()
            self.meters.watches.set(0)


def _shape(w: watches.Watch) -> tuple[object, ...]:
    return (w.storage_namespace, w.inject)


def create_app(
    meters: Metrics, ready: Callable[[], bool], *, cache_seconds: float = ops.READY_CACHE_SECONDS
) -> flask.Flask:
    """/healthz, /readyz (leading or standing by: the elector and the scheduler run),
    /metrics."""
    probes = ops.Probes(cache_seconds=cache_seconds).ready(
        "scheduler", lambda: None if ready() else "elector or scheduler not running"
    )
    return ops.create_app("injector", probes, ops.Exposition(meters.registry).render)


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
