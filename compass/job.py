"""A run over every Kyma CR and mapping in the namespace, with bounded concurrency.

``Job.run(full=False)`` is what the scheduler calls: the interval run (cheap: a Kyma CR
that is Ready and connected costs no request outside the KCP) and, with ``full=True``,
the cron full resync (asks the Director about every runtime). Runs never overlap: a run that finds
one in progress returns at once.
"""

from __future__ import annotations

import collections
import concurrent.futures
import hashlib
import logging
import threading
import time
import typing
from collections.abc import Callable
from typing import NamedTuple

from compass import adoption, decide, metrics, model
from compass import mappings as mappings_mod
from compass import reconcile as reconcile_mod
from tether.kube import gateway, skr_clients

log = logging.getLogger(__name__)
STATES = ("Ready", "Processing", "Failed", "Deleting", "None")


def in_shard(name: str, index: int, count: int) -> bool:
    """Whether the Kyma CR ``name`` (lifecycle-manager names it by the runtime ID) belongs
    to shard ``index`` of ``count``: a stable hash, the same in every process."""
    if count <= 1:
        return True
    digest = hashlib.sha256(name.encode()).digest()
    return int.from_bytes(digest[:8], "big") % count == index


class Summary(NamedTuple):
    kymas: int
    states: dict[str, int]
    seconds: float
    skipped: bool = False  # another run was in progress: not a run
    ok: bool = True  # False: the run could not list the KCP (last-run-result failed)
    plan: tuple[adoption.Entry, ...] = ()  # dry-run: what the run would have done


def state_of(f: decide.Facts) -> str:
    if f.mapping is None:
        return "None"
    if f.kyma is None or f.kyma.deleting or f.mapping.deleting:
        return "Deleting"
    st = f.mapping.status.get("state")
    return st if st in ("Ready", "Processing", "Failed") else "Processing"


class Job:
    def __init__(
        self,
        reconciler: reconcile_mod.Reconciler,
        kcp: mappings_mod.Kcp,
        skr: skr_clients.SkrClients,
        stats: metrics.Metrics,
        *,
        concurrency: int,
        active: Callable[[], bool] = lambda: True,
        shard: tuple[int, int] = (0, 1),
        after_run: Callable[[], None] = lambda: None,
        before_end: Callable[[], None] = lambda: None,
    ) -> None:
        self.reconciler = reconciler
        self.shard = shard
        # False once this process lost the Lease: the run stops taking up runtimes, so
        # that it does not overlap with the new holder's runs (beyond those in flight).
        self.active = active
        self.kcp = kcp
        self.skr = skr
        self.metrics = stats
        self.after_run = after_run  # e.g. send the breaker's queued Events
        self.before_end = before_end  # e.g. wait for the runtimes' Events sent in the background
        self._pool = concurrent.futures.ThreadPoolExecutor(
            concurrency, thread_name_prefix="compass"
        )
        self._lock = threading.Lock()

    def close(self) -> None:
        self._pool.shutdown(wait=True)

    def run(self, full: bool = False) -> Summary:
        if not self._lock.acquire(blocking=False):
            log.info("a run is still in progress; skipping this one")
            return Summary(0, {}, 0.0, skipped=True)
        try:
            return self._run(full)
        finally:
            self._lock.release()
            try:
                self.after_run()
            except Exception as e:  # noqa: BLE001 - never fails the run
                log.warning("after the run: %s", type(e).__name__)

    def _run(self, full: bool) -> Summary:
        kind = "full" if full else "interval"
        t0 = time.monotonic()
        try:
            kymas = {k.name: k for k in self.kcp.kymas()}
            maps = {m.name: m for m in self.kcp.mappings()}
        except gateway.GatewayError as e:
            log.warning("%s run: listing in the KCP failed: %s", kind, e)
            return Summary(0, {}, time.monotonic() - t0, ok=False)
        names = sorted(n for n in set(kymas) | set(maps) if in_shard(n, *self.shard))
        kymas = {n: k for n, k in kymas.items() if in_shard(n, *self.shard)}
        states: collections.Counter[str] = collections.Counter()
        self.reconciler.registrations.begin()  # the run's labelled runtimes (compass.regindex)
        self.reconciler.holders.begin(maps.values())  # every shard's: who holds which ID
        self.metrics.duplicates.set(self.reconciler.holders.duplicates())
        try:
            futures = [self._pool.submit(self._one, kymas.get(n), maps.get(n), full) for n in names]
            for fut in futures:
                states[fut.result()] += 1
        finally:
            self.reconciler.registrations.end()
            self.reconciler.holders.end()
        self.before_end()
        for s in STATES:
            self.metrics.runtimes.labels(s).set(states.get(s, 0))
        seconds = time.monotonic() - t0
        self.metrics.run_seconds.labels(kind).observe(seconds)
        self.metrics.last_run.labels(kind).set(time.time())
        log.info("%s run over %d Kyma CRs in %.1fs: %s", kind, len(kymas), seconds, dict(states))
        return Summary(len(kymas), dict(states), seconds, plan=self._report_plan(kind))

    def _report_plan(self, kind: str) -> tuple[adoption.Entry, ...]:
        """Dry-run: each runtime's planned actions logged, their counts as a metric and in
        one summary line."""
        plan = self.reconciler.plan
        if plan is None:
            return ()
        entries = tuple(plan.take())
        for e in entries:
            log.info(
                "dry-run: %s: would %s%s%s",
                e.kyma,
                e.action,
                f" ({e.reason})" if e.reason else "",
                f" runtime {e.runtime_id}" if e.runtime_id else "",
            )
        counts = adoption.counts(entries)
        for action in typing.get_args(decide.ActionKind):
            self.metrics.planned.labels(action).set(counts.get(action, 0))
        log.info("dry-run %s run: nothing changed; would do %s", kind, counts or "nothing")
        return entries

    def _one(self, kyma: model.Kyma | None, mapping: model.MappingView | None, full: bool) -> str:
        if not self.active():
            return "None"
        try:
            return state_of(self.reconciler.reconcile(kyma, mapping, full=full))
        except Exception as e:  # noqa: BLE001 - one runtime's bug must not stop the others
            name = kyma.name if kyma else mapping.name if mapping else "?"
            log.error("reconciling %s: unexpected %s", name, type(e).__name__, exc_info=True)
            self.metrics.actions.labels("reconcile", "error").inc()
            return "Processing"
