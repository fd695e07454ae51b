"""The listener's janitor: prunes tombstones and removes what runtimes left behind.

One run (``Janitor.run``, an APScheduler interval job of ``tether janitor``, only in the
holder of the janitor Lease; gunicorn workers never run it):

1. list every ``RuntimeConfigMap`` of the listener in every namespace (metadata only,
   paginated, label-selected: a Watch stores its records in its storage namespace): count the
   records of each runtime and collect the tombstones whose retention has passed
   (``rules.tombstone_due``, at most ``MAX_TOMBSTONES`` per run);
2. delete those tombstones, each only if unchanged since listed (``preconditions``: a
   newer record written meanwhile is never deleted), the same way the records of deleted
   Watches past the retention and the legacy records (``listener.janitor.legacy``);
3. list the heartbeat Leases and the Kyma CRs (metadata only) and decide per runtime
   (``rules.orphan_actions``): mark a runtime without a Kyma CR on its heartbeat Lease
   (``orphaned-since``, created when the runtime has records or a ``RuntimeDelivery`` but
   no Lease), clear the mark when the Kyma CR is back, and once the grace period has passed
   delete its records (deletecollection by label in each namespace that holds some; records
   in the Kyma CR's namespace are owned by it and go with it already, by the API server's
   garbage collector), its ``RuntimeStateSummary``, its
   ``RuntimeDelivery`` and then its Lease, after asking for its Kyma CR once more.

The decisions are pure (``listener.storage.rules``); this module does the I/O. A run that
cannot list something does nothing it would need that list for; every step is idempotent,
so a run interrupted at any point is completed by the next.
"""

from __future__ import annotations

import collections
import datetime
import logging
import threading
import time
from collections.abc import Callable
from typing import Any, NamedTuple

from listener.fleet import statesummary
from listener.janitor import legacy
from listener.janitor import metrics as janitor_metrics
from listener.janitor import settings as settings_mod
from listener.janitor.calls import OWN_RECORDS as OWN_RECORDS
from listener.janitor.calls import PAGE as PAGE
from listener.janitor.calls import Kcp as Kcp
from listener.janitor.calls import LeaseFacts as LeaseFacts
from listener.storage import records, rules
from tether.base import logs, times
from tether.kube import apitypes, gateway
from tether.wire import statehash

log = logging.getLogger(__name__)
MAX_TOMBSTONES = 5000  # deletions per run; the rest waits for the next run
SUMMARY_FLUSH_SECONDS = 30.0  # merging what was pruned into the state summaries, per run
API_ERRORS = gateway.GatewayError


class Summary(NamedTuple):
    ok: bool
    tombstones_deleted: int = 0
    orphan_records_deleted: int = 0
    orphan_leases_deleted: int = 0
    orphans_waiting: int = 0
    skipped: bool = False


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


class Janitor:
    def __init__(
        self,
        kcp: Kcp,
        settings: settings_mod.JanitorSettings,
        meters: janitor_metrics.JanitorMetrics,
        audit: logging.Logger,
        *,
        active: Callable[[], bool] = lambda: True,
        now: Callable[[], datetime.datetime] = _now,
        summaries: statesummary.Summaries | None = None,
    ) -> None:
        self.kcp = kcp
        # the state summaries' footprints (the quota's count) lose what is pruned
        self.summaries = summaries
        self._pruned: dict[str, set[int]] = {}  # runtime -> buckets pruned in this run
        self.settings = settings
        self.metrics = meters
        self.audit = audit
        self.active = active  # False once the Lease is lost: stop between deletions
        self._now = now
        self._lock = threading.Lock()
        self._where: dict[str, set[str]] = {}  # runtime -> namespaces of its records (listed)

    def run(self) -> Summary:
        if not self._lock.acquire(blocking=False):
            log.info("a janitor run is still in progress; skipping this one")
            return Summary(True, skipped=True)
        t0 = time.monotonic()
        try:
            summary = self._run()
        except Exception as e:  # noqa: BLE001 - the scheduler must keep running
            log.error("janitor run failed: %s", logs.bounded(e, 300), exc_info=True)
            summary = Summary(False)
        finally:
            self._lock.release()
        self.metrics.run_seconds.observe(time.monotonic() - t0)
        self.metrics.runs.labels("ok" if summary.ok else "failed").inc()
        if summary.ok:
            self.metrics.last_success.set(time.time())
        return summary

    def _listing(
        self, now: datetime.datetime, homes: dict[str, str] | None
    ) -> tuple[
        collections.Counter[str], list[rules.Tombstone], dict[str, dict[str, Any]], legacy.Legacy
    ]:
        """One listing of every record in every namespace: the count per runtime (and in
        ``_where`` its namespaces), what is due (tombstones past the retention, then records
        of deleted Watches past it) and the legacy records. Only records where their Watch
        stores count (``records.placed``; a RuntimeConfigMap elsewhere is not this
        installation's), but those of a deleted Watch, whose namespace is unknown: wherever
        they are, they go after the retention."""
        retention = self.settings.storage.tombstone_retention
        watch_names = None if homes is None else frozenset(homes)
        counts: collections.Counter[str] = collections.Counter()
        due: list[rules.Tombstone] = []
        metas: dict[str, dict[str, Any]] = {}
        old = legacy.Legacy(MAX_TOMBSTONES)
        self._where = {}
        for meta in self.kcp.record_metadata():
            if not records.placed(meta, homes or {}, self.kcp.namespace):
                t = legacy.of_gone_watch(meta, watch_names, now, retention)
                if t is not None and len(due) < MAX_TOMBSTONES:
                    due.append(t)
                    metas[t.name] = meta
                continue
            old.add(meta)
            rid = (meta.get("labels") or {}).get(apitypes.RUNTIME_ID_LABEL)
            if isinstance(rid, str):
                counts[rid] += 1
                self._where.setdefault(rid, set()).add(str(meta.get("namespace")))
            if len(due) < MAX_TOMBSTONES:
                t = rules.tombstone_due(
                    meta, now, retention, records.ANN_DELETED, records.ANN_OBSERVED
                ) or legacy.of_gone_watch(meta, watch_names, now, retention)
                if t is not None:
                    due.append(t)
                    metas[t.name] = meta
        return counts, due, metas, old

    def _run(self) -> Summary:
        s = self.settings
        now = self._now()
        try:
            homes = self.kcp.watch_homes()
        except API_ERRORS as e:  # the records of deleted Watches wait for the next run
            self._failed("list_watches", e)
            homes = None
        if self.summaries is not None and homes is not None:
            self.summaries.homes = lambda: homes  # its listings: where each Watch stores
        try:
            counts, due, metas, old = self._listing(now, homes)
        except API_ERRORS as e:
            return self._failed("list_records", e)
        pruned = self._prune(due, metas)
        self._prune_legacy(old)
        try:
            leases = self.kcp.heartbeat_leases()
            with_delivery = self.kcp.delivery_runtime_ids()
            with_kyma = self.kcp.kyma_runtime_ids()
        except API_ERRORS as e:
            self._failed("list_runtimes", e)
            return Summary(False, pruned)
        steps = rules.orphan_actions(
            set(counts) | set(leases) | with_delivery,
            {r: lf.orphaned_since for r, lf in leases.items()},
            with_kyma,
            now,
            s.orphan_grace,
        )
        ok, records_deleted, leases_deleted, waiting = True, 0, 0, 0
        for step in steps:
            if not self.active():
                log.info("janitor Lease lost; the run stops")
                break
            try:
                if step.step == "mark":
                    self.kcp.mark(step.runtime_id, leases.get(step.runtime_id), now)
                    waiting += 1
                    logs.audit(
                        self.audit,
                        "orphan_marked",
                        runtime=step.runtime_id,
                        since=times.format_time(now),
                        records=counts[step.runtime_id],
                    )
                    log.info(
                        "runtime %s has no Kyma CR; its %d records are removed after %.0fs",
                        step.runtime_id,
                        counts[step.runtime_id],
                        s.orphan_grace,
                    )
                elif step.step == "unmark":
                    self.kcp.unmark(leases[step.runtime_id])
                    logs.audit(self.audit, "orphan_unmarked", runtime=step.runtime_id)
                elif step.step == "wait":
                    waiting += 1
                else:
                    n, gone = self._remove(step, counts[step.runtime_id], leases)
                    records_deleted += n
                    leases_deleted += gone
            except API_ERRORS as e:
                self._failed(f"orphan_{step.step}", e)
                ok = False
        self.metrics.orphans.set(waiting)
        return Summary(ok, pruned, records_deleted, leases_deleted, waiting)

    def _prune_legacy(self, old: legacy.Legacy) -> int:
        due = old.due()
        return self._prune(
            [t for t, _ in due], {t.name: dict(m) for t, m in due}, "legacy_records_deleted"
        )

    def _prune(
        self,
        due: list[rules.Tombstone],
        metas: dict[str, dict[str, Any]],
        what: str = "tombstones_pruned",
    ) -> int:
        """Delete ``due`` (tombstones, or legacy records: ``what`` names the audit event)."""
        deleted = 0
        for t in due:
            if not self.active():
                break
            try:
                if self.kcp.delete_tombstone(t):
                    deleted += 1
                    (
                        self.metrics.tombstones_deleted
                        if what == "tombstones_pruned"
                        else self.metrics.legacy_records_deleted
                    ).inc()
                    self._removed(metas.get(t.name) or {})
            except API_ERRORS as e:
                self._failed("delete_tombstone", e)
                break
        if self.summaries is not None and deleted:
            # merged (their buckets unknown: a deletion's revision is not known), then
            # those buckets listed and set, so the quota's count is exact again at once
            self.summaries.flush_all(SUMMARY_FLUSH_SECONDS)
            for rid, buckets in sorted(self._pruned.items()):
                if not self.active():
                    break
                self.summaries.heal(rid, buckets)
        self._pruned.clear()
        if deleted:
            logs.audit(
                self.audit,
                what,
                count=deleted,
                **(
                    {"retention_seconds": self.settings.storage.tombstone_retention}
                    if what == "tombstones_pruned"
                    else {}
                ),
            )
            log.info("%s: %d records deleted", what, deleted)
        return deleted

    def _removed(self, meta: dict[str, Any]) -> None:
        rid = (meta.get("labels") or {}).get(apitypes.RUNTIME_ID_LABEL)
        item = records.digest_item(meta)
        if self.summaries is not None and isinstance(rid, str) and item is not None:
            self.summaries.removed(rid, meta)
            self._pruned.setdefault(rid, set()).add(
                statehash.bucket_of(item["namespace"], item["name"])
            )

    def _remove(
        self, step: rules.Orphan, listed: int, leases: dict[str, LeaseFacts]
    ) -> tuple[int, int]:
        """Delete an orphan's records, then its Lease; (records, leases) deleted."""
        rid = step.runtime_id
        if self.kcp.has_kyma(rid):  # back since the list: keep everything
            lease = leases.get(rid)
            if lease is not None:
                self.kcp.unmark(lease)
            return 0, 0
        n = 0
        if listed:
            got = self.kcp.delete_runtime_records(rid, self._where.get(rid, set()))
            n = listed if got is None else got
            self.metrics.orphan_records_deleted.inc(n)
        if self.kcp.has_records(rid, self._where.get(rid, set())):
            return n, 0  # not all gone yet: the Lease (and its mark) stays for the next run
        summary = self.kcp.delete_summary(rid)  # its records are gone: it folds nothing
        if self.kcp.delete_delivery(rid):  # before the Lease, which holds the mark
            self.metrics.orphan_deliveries_deleted.inc()
        gone = 1 if self.kcp.delete_lease(rid) else 0
        self.metrics.orphan_leases_deleted.inc(gone)
        since = times.format_time(step.since) if step.since else ""
        logs.audit(
            self.audit,
            "orphan_removed",
            runtime=rid,
            records=n,
            lease=bool(gone),
            summary=summary,
            orphaned_since=since,
        )
        log.info(
            "runtime %s: no Kyma CR since %s; deleted %d records, its RuntimeStateSummary, "
            "its RuntimeDelivery and its heartbeat Lease",
            rid,
            since,
            n,
        )
        return n, gone

    def _failed(self, step: str, e: BaseException) -> Summary:
        self.metrics.errors.labels(step).inc()
        reason = (
            f"HTTP {e.status}"
            if isinstance(e, gateway.GatewayError) and e.status
            else type(e).__name__
        )
        log.warning("janitor %s failed: %s", step, reason)
        return Summary(False)
