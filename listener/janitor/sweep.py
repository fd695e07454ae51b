"""The listener's janitor: prunes tombstones and removes what runtimes left behind.

One run (``Janitor.run``, an APScheduler interval job of ``tether janitor``, only in the
holder of the janitor Lease; gunicorn workers never run it):

1. list every ``RuntimeConfigMap`` of the listener (metadata only, paginated): count the
   records of each runtime and collect the tombstones whose retention has passed
   (``rules.tombstone_due``, at most ``MAX_TOMBSTONES`` per run);
2. delete those tombstones, each only if unchanged since listed (``preconditions``: a
   newer record written meanwhile is never deleted), the same way the records of deleted
   Watches past the retention and the legacy records (``listener.janitor.legacy``);
3. list the heartbeat Leases and the Kyma CRs (metadata only) and decide per runtime
   (``rules.orphan_actions``): mark a runtime without a Kyma CR on its heartbeat Lease
   (``orphaned-since``, created when the runtime has records or a ``RuntimeDelivery`` but
   no Lease), clear the mark when the Kyma CR is back, and once the grace period has passed
   delete its records (deletecollection by label), its ``RuntimeStateSummary``, its
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
from collections.abc import Callable, Iterator
from typing import Any, NamedTuple

from listener import settings as settings_mod
from listener.edge import metrics as listener_metrics
from listener.fleet import heartbeat, statesummary
from listener.janitor import legacy
from listener.storage import records, rules
from tether import apitypes, changes, gateway, kyma, logs, statehash

log = logging.getLogger(__name__)
MAX_TOMBSTONES = 5000  # deletions per run; the rest waits for the next run
SUMMARY_FLUSH_SECONDS = 30.0  # merging what was pruned into the state summaries, per run
PAGE = 500
OWN_RECORDS = f"{apitypes.MANAGED_BY_LABEL}={records.MANAGED_BY}"
API_ERRORS = gateway.GatewayError


class LeaseFacts(NamedTuple):
    name: str
    runtime_id: str
    orphaned_since: str | None


class Summary(NamedTuple):
    ok: bool
    tombstones_deleted: int = 0
    orphan_records_deleted: int = 0
    orphan_leases_deleted: int = 0
    orphans_waiting: int = 0
    skipped: bool = False


class Kcp:
    """The janitor's calls to the KCP API (namespace-scoped, what the janitor's Roles allow:
    manifests/kcp/janitor/rbac.yaml): records, summaries and Kyma CRs in ``namespace``, the
    heartbeat Leases in ``heartbeat_namespace`` (by default the same)."""

    def __init__(self, kcp: gateway.Kube, namespace: str, timeout: float,
                 heartbeat_namespace: str | None = None) -> None:
        self._kcp = kcp
        self.namespace = namespace
        self.heartbeat_namespace = heartbeat_namespace or namespace
        self._timeout = timeout

    def _metadata_list(self, res: gateway.Resource, selector: str) -> Iterator[dict[str, Any]]:
        for obj in self._kcp.list_items(res, self.namespace, label_selector=selector,
                                        page_size=PAGE, metadata_only=True,
                                        timeout=self._timeout):
            yield obj.get("metadata") or {}

    def record_metadata(self) -> Iterator[dict[str, Any]]:
        """Metadata of every record the listener wrote in the namespace."""
        return self._metadata_list(apitypes.RUNTIME_CONFIGMAPS, OWN_RECORDS)

    def kyma_runtime_ids(self) -> set[str]:
        """The runtime IDs that have a Kyma CR (label ``kyma-project.io/runtime-id``)."""
        out: set[str] = set()
        for meta in self._metadata_list(apitypes.KYMAS, apitypes.RUNTIME_ID_LABEL):
            rid = (meta.get("labels") or {}).get(apitypes.RUNTIME_ID_LABEL)
            if isinstance(rid, str):
                out.add(rid)
        return out

    def has_kyma(self, runtime_id: str) -> bool:
        return bool(kyma.list_by_runtime_id(self._kcp, self.namespace, runtime_id,
                                            timeout=self._timeout))

    def watch_names(self) -> frozenset[str] | None:
        """The Watches' names; None without the Watch CRD (no Watch was deleted)."""
        try:
            return frozenset(str(m.get("name") or "") for m in self._metadata_list(
                apitypes.WATCHES, ""))
        except gateway.NotFound:
            return None

    def heartbeat_leases(self) -> dict[str, LeaseFacts]:
        out: dict[str, LeaseFacts] = {}
        for lease in self._kcp.list_items(gateway.LEASES, self.heartbeat_namespace,
                                          label_selector=f"{apitypes.HEARTBEAT_LABEL}=true",
                                          page_size=PAGE, timeout=self._timeout):
            meta = lease.get("metadata") or {}
            rid = (meta.get("labels") or {}).get(apitypes.RUNTIME_ID_LABEL) or (
                (lease.get("spec") or {}).get("holderIdentity"))
            if rid:
                out[rid] = LeaseFacts(str(meta.get("name") or ""), rid, (
                    meta.get("annotations") or {}).get(rules.ORPHANED_SINCE))
        return out

    def delete_tombstone(self, t: rules.Tombstone) -> bool:
        """Delete one tombstone if it is unchanged since listed; False when it changed or
        is gone already."""
        try:
            self._kcp.delete(apitypes.RUNTIME_CONFIGMAPS, self.namespace, t.name, preconditions={
                "resourceVersion": t.resource_version, "uid": t.uid}, timeout=self._timeout)
        except (gateway.NotFound, gateway.Conflict):
            return False
        return True

    def delete_runtime_records(self, runtime_id: str) -> int | None:
        """Delete every record of a runtime; how many when the API says."""
        resp = self._kcp.delete_collection(
            apitypes.RUNTIME_CONFIGMAPS, self.namespace,
            label_selector=f"{apitypes.RUNTIME_ID_LABEL}={runtime_id},{OWN_RECORDS}",
            timeout=self._timeout)
        items = resp.get("items")
        return len(items) if isinstance(items, list) else None

    def delivery_runtime_ids(self) -> set[str]:
        """The runtimes that have a ``RuntimeDelivery`` the listener wrote."""
        out: set[str] = set()
        for meta in self._metadata_list(apitypes.RUNTIME_DELIVERIES, OWN_RECORDS):
            rid = (meta.get("labels") or {}).get(apitypes.RUNTIME_ID_LABEL)
            if isinstance(rid, str):
                out.add(rid)
        return out

    def _delete(self, res: gateway.Resource, namespace: str, name: str) -> bool:
        """Delete one object; False when there is none."""
        try:
            self._kcp.delete(res, namespace, name, timeout=self._timeout)
        except gateway.NotFound:
            return False
        return True

    def delete_delivery(self, runtime_id: str) -> bool:
        """Delete the runtime's ``RuntimeDelivery``; False when there is none."""
        return self._delete(apitypes.RUNTIME_DELIVERIES, self.namespace,
                            heartbeat.lease_name(runtime_id))

    def delete_summary(self, runtime_id: str) -> bool:
        """Delete the runtime's ``RuntimeStateSummary``; False when there is none."""
        return self._delete(apitypes.RUNTIME_STATE_SUMMARIES, self.namespace,
                            statesummary.name_of(runtime_id))

    def has_records(self, runtime_id: str) -> bool:
        doc = self._kcp.list(apitypes.RUNTIME_CONFIGMAPS, self.namespace, limit=1, metadata_only=True,
                             label_selector=f"{apitypes.RUNTIME_ID_LABEL}={runtime_id},{OWN_RECORDS}",
                             timeout=self._timeout)
        return bool(doc.get("items"))

    def mark(self, runtime_id: str, lease: LeaseFacts | None, since: datetime.datetime) -> None:
        value = changes.format_time(since)
        if lease is not None:
            self._kcp.patch(gateway.LEASES, self.heartbeat_namespace, lease.name,
                            {"metadata": {"annotations": {rules.ORPHANED_SINCE: value}}},
                            strategic=True, timeout=self._timeout)
            return
        body = {  # records without a Lease: the mark needs a durable home
            "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {
                "name": heartbeat.lease_name(runtime_id),
                "namespace": self.heartbeat_namespace,
                "labels": {apitypes.HEARTBEAT_LABEL: "true", apitypes.RUNTIME_ID_LABEL: runtime_id,
                           apitypes.MANAGED_BY_LABEL: records.MANAGED_BY},
                "annotations": {rules.ORPHANED_SINCE: value}},
            "spec": {"holderIdentity": runtime_id}}
        try:
            self._kcp.create(gateway.LEASES, self.heartbeat_namespace, body,
                             timeout=self._timeout)
        except gateway.Conflict:  # the listener created it just now: marked next run
            pass

    def unmark(self, lease: LeaseFacts) -> None:
        self._kcp.patch(gateway.LEASES, self.heartbeat_namespace, lease.name,
                        {"metadata": {"annotations": {rules.ORPHANED_SINCE: None}}},
                        strategic=True, timeout=self._timeout)

    def delete_lease(self, runtime_id: str) -> bool:
        """Delete the runtime's heartbeat Lease; False when there is none."""
        return self._delete(gateway.LEASES, self.heartbeat_namespace,
                            heartbeat.lease_name(runtime_id))


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


class Janitor:
    def __init__(self, kcp: Kcp, settings: settings_mod.JanitorSettings,
                 meters: listener_metrics.JanitorMetrics, audit: logging.Logger, *,
                 active: Callable[[], bool] = lambda: True,
                 now: Callable[[], datetime.datetime] = _now,
                 summaries: statesummary.Summaries | None = None) -> None:
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

    def _listing(self, now: datetime.datetime, watch_names: frozenset[str] | None
                 ) -> tuple[collections.Counter[str], list[rules.Tombstone],
                            dict[str, dict[str, Any]], legacy.Legacy]:
        """One listing of every record: the count per runtime, what is due (tombstones past
        the retention, then records of deleted Watches past it) and the legacy records."""
        retention = self.settings.storage.tombstone_retention
        counts: collections.Counter[str] = collections.Counter()
        due: list[rules.Tombstone] = []
        metas: dict[str, dict[str, Any]] = {}
        old = legacy.Legacy(MAX_TOMBSTONES)
        for meta in self.kcp.record_metadata():
            old.add(meta)
            rid = (meta.get("labels") or {}).get(apitypes.RUNTIME_ID_LABEL)
            if isinstance(rid, str):
                counts[rid] += 1
            if len(due) < MAX_TOMBSTONES:
                t = (rules.tombstone_due(meta, now, retention, records.ANN_DELETED,
                                         records.ANN_OBSERVED)
                     or legacy.of_gone_watch(meta, watch_names, now, retention))
                if t is not None:
                    due.append(t)
                    metas[t.name] = meta
        return counts, due, metas, old

    def _run(self) -> Summary:
        s = self.settings
        now = self._now()
        try:
            watch_names = self.kcp.watch_names()
        except API_ERRORS as e:  # the records of deleted Watches wait for the next run
            self._failed("list_watches", e)
            watch_names = None
        try:
            counts, due, metas, old = self._listing(now, watch_names)
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
            {r: lf.orphaned_since for r, lf in leases.items()}, with_kyma, now, s.orphan_grace)
        ok, records_deleted, leases_deleted, waiting = True, 0, 0, 0
        for step in steps:
            if not self.active():
                log.info("janitor Lease lost; the run stops")
                break
            try:
                if step.step == "mark":
                    self.kcp.mark(step.runtime_id, leases.get(step.runtime_id), now)
                    waiting += 1
                    logs.audit(self.audit, "orphan_marked", runtime=step.runtime_id,
                               since=changes.format_time(now), records=counts[step.runtime_id])
                    log.info("runtime %s has no Kyma CR; its %d records are removed after %.0fs",
                             step.runtime_id, counts[step.runtime_id], s.orphan_grace)
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
        return self._prune([t for t, _ in due], {t.name: dict(m) for t, m in due},
                           "legacy_records_deleted")

    def _prune(self, due: list[rules.Tombstone], metas: dict[str, dict[str, Any]],
               what: str = "tombstones_pruned") -> int:
        """Delete ``due`` (tombstones, or legacy records: ``what`` names the audit event)."""
        deleted = 0
        for t in due:
            if not self.active():
                break
            try:
                if self.kcp.delete_tombstone(t):
                    deleted += 1
                    (self.metrics.tombstones_deleted if what == "tombstones_pruned"
                     else self.metrics.legacy_records_deleted).inc()
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
            logs.audit(self.audit, what, count=deleted, **(
                {"retention_seconds": self.settings.storage.tombstone_retention}
                if what == "tombstones_pruned" else {}))
            log.info("%s: %d records deleted", what, deleted)
        return deleted

    def _removed(self, meta: dict[str, Any]) -> None:
        rid = (meta.get("labels") or {}).get(apitypes.RUNTIME_ID_LABEL)
        item = records.digest_item(meta)
        if self.summaries is not None and isinstance(rid, str) and item is not None:
            self.summaries.removed(rid, meta)
            self._pruned.setdefault(rid, set()).add(
                statehash.bucket_of(item["namespace"], item["name"]))

    def _remove(self, step: rules.Orphan, listed: int,
                leases: dict[str, LeaseFacts]) -> tuple[int, int]:
        """Delete an orphan's records, then its Lease; (records, leases) deleted."""
        rid = step.runtime_id
        if self.kcp.has_kyma(rid):  # back since the list: keep everything
            lease = leases.get(rid)
            if lease is not None:
                self.kcp.unmark(lease)
            return 0, 0
        n = 0
        if listed:
            got = self.kcp.delete_runtime_records(rid)
            n = listed if got is None else got
            self.metrics.orphan_records_deleted.inc(n)
        if self.kcp.has_records(rid):
            return n, 0  # not all gone yet: the Lease (and its mark) stays for the next run
        summary = self.kcp.delete_summary(rid)  # its records are gone: it folds nothing
        if self.kcp.delete_delivery(rid):  # before the Lease, which holds the mark
            self.metrics.orphan_deliveries_deleted.inc()
        gone = 1 if self.kcp.delete_lease(rid) else 0
        self.metrics.orphan_leases_deleted.inc(gone)
        since = changes.format_time(step.since) if step.since else ""
        logs.audit(self.audit, "orphan_removed", runtime=rid, records=n, lease=bool(gone),
                   summary=summary, orphaned_since=since)
        log.info("runtime %s: no Kyma CR since %s; deleted %d records, its RuntimeStateSummary, "
                 "its RuntimeDelivery and its heartbeat Lease",
                 rid, since, n)
        return n, gone

    def _failed(self, step: str, e: BaseException) -> Summary:
        self.metrics.errors.labels(step).inc()
        reason = (f"HTTP {e.status}" if isinstance(e, gateway.GatewayError) and e.status
                  else type(e).__name__)
        log.warning("janitor %s failed: %s", step, reason)
        return Summary(False)
