"""The injector's domain object: ``Injector`` holds a ``worker.Worker`` for every Watch with
``inject`` (at most ``max_watches``, by name), started and stopped as the Watch list changes
(``refresh``), offered every runtime again by the periodic pass (``resync``), all stopped
when the Lease is lost (``stop_all``). ``injector.main`` wires it to the elected process."""

from __future__ import annotations

import logging
import threading

from injector import settings as settings_mod
from injector.metrics import Metrics
from injector.readbudget import ReadBudget
from injector.worker import Worker
from tether.base import logs
from tether.kube import apitypes, events, gateway
from tether.wire import watches

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
