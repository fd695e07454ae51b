"""Each runtime's state summary in the KCP: the ``RuntimeStateSummary`` object (the I/O).

The summary folds a runtime's stored records into ``tether.wire.statehash.BUCKETS`` buckets (a
64-bit XOR and a count of live records each), so that a poll run of a runtime in sync
costs the KCP one read (``read``) instead of a listing of all of its records, and a
difference costs a listing of its bucket only (``bucket``). Each bucket also holds its
footprint (objects, tombstones included, and bytes by their size annotations), kept and
corrected the same way, so that the storage quota counts a runtime's usage at one read
(``footprint``) too. How it stays right:

* **Writes.** After every persisted record the store calls ``written`` (old and new
  metadata): the change of its bucket (``statehash.change_of``, with the write's KCP
  resourceVersion) is added to this worker's pending changes of the runtime (bounded:
  ``MAX_PENDING`` buckets over all runtimes; one over it is dropped and counted, and heals
  as below). ``flush_if_due`` (after the response, like ``listener.fleet.deliveries``) merges
  them into the object at most once per ``interval`` per runtime and worker: GET, merge
  (``statehash.merge``), PUT of the status subresource with the object's resourceVersion;
  409: read and merge again. A failed merge keeps the changes for the next one. A
  ``summary-flush`` thread per worker merges what is due every second, so no change waits
  for the runtime's next request to this worker. The janitor's pruning of a tombstone is a
  change too (``removed``: at an unknown revision, so its bucket is listed again before its
  footprint is trusted).
* **Healing.** A pending change lost (a worker killed, the cap, a failed merge dropped)
  leaves the summary with a state the runtime has left behind, so the poller's hash of
  that bucket differs and it asks for the bucket; listing a bucket recomputes its hash
  from the records, and a summary that disagrees is corrected (``statehash.corrected``,
  the bucket's revision set to the listing's KCP resourceVersion). A change pending while
  its bucket is corrected is skipped at its merge when the listing already held its
  writes, or applied and the bucket marked unknown when it straddles the listing (the
  next run lists it again). Records deleted or edited outside the listener (by hand) are
  found by the daily full resync rather than by the buckets; docs/listener.md says so. A
  full digest (the daily resync, or a run with too many differing buckets) lists every
  record anyway and sets every bucket that disagrees from that listing (``listed_all``),
  so a summary damaged in many buckets does not send every later run to the full digest.
* **Bootstrap.** A runtime without a summary (new, or stored before summaries) gets one
  built from a full metadata listing of its records at its first ``read`` (the cost of one
  old-style state digest, once), then kept by its writes.
* **Migration.** Records carry their bucket as a label (``records.BUCKET_LABEL``) since
  this version; older ones get it at their next write, or from the labelling that runs
  after a bootstrap or bucket listing answered (``label``, within ``LABEL_SECONDS``). A
  bucket listing also lists the runtime's records without the label (empty once migrated:
  one request, no object), so the answer is exact during the migration too.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from listener.fleet import flushing, summaryobject
from listener.fleet import viewclient as view_client
from listener.fleet.summaryobject import Bucket as Bucket
from listener.fleet.summaryobject import Hooks as Hooks
from listener.fleet.summaryobject import name_of as name_of
from listener.storage import records, rules
from tether.base import numbers
from tether.kube import apitypes, gateway
from tether.wire import statehash

FLUSH_SECONDS = 1.0
MAX_PENDING = 100_000  # pending bucket changes per worker, over all runtimes
MAX_REMEMBERED = 50_000
DISTRUST_SECONDS = 900.0  # after lost changes: the quota counts from listings this long


class Summaries(summaryobject.SummaryObjects):
    def __init__(
        self,
        kcp: gateway.Kube,
        namespace: str,
        timeout: float,
        *,
        interval: float = FLUSH_SECONDS,
        hooks: Hooks | None = None,
        max_pending: int = MAX_PENDING,
        clock: Callable[[], float] = time.monotonic,
        view: view_client.ViewClient | None = None,
    ) -> None:
        super().__init__(kcp, namespace, timeout, hooks or Hooks(), clock)
        self._view = view  # the pod's view: the summary as the watch last brought it
        self._interval, self._max = interval, max_pending
        self._idle = threading.Condition(self._lock)  # a runtime's merge ended
        self._pending: dict[str, dict[int, statehash.Pending]] = {}
        self._size = 0
        self._flushed: dict[str, float] = {}
        self._busy: set[str] = set()
        # runtimes whose changes this worker lost or could not merge lately: their
        # footprint is not used for the quota until then (monotonic time)
        self._distrusted: dict[str, float] = {}
        self._unmerged: set[str] = set()  # runtimes whose last merge here failed (kept)

    # -- recording (the store's hook; cheap) ----------------------------------------------------

    def written(
        self,
        runtime_id: str,
        old: Mapping[str, Any] | None,
        new: Mapping[str, Any] | None,
        record: Mapping[str, Any],
    ) -> None:
        """A record was persisted: ``old`` the metadata of the object it replaced (None: a
        new key), ``new`` the written object's metadata (None when unknown)."""
        old_item = None if old is None else records.digest_item(old)
        new_item: Mapping[str, Any] | None = None if new is None else records.digest_item(new)
        if new_item is None:
            new_item = record
        change = statehash.change_of(
            old_item,
            new_item,
            numbers.revision_of(new),
            0 if old is None else rules.stored_size(old),
            0 if new is None else rules.stored_size(new),
        )
        if change is not None:
            self._add(runtime_id, change)

    def removed(self, runtime_id: str, meta: Mapping[str, Any]) -> None:
        """A stored object was deleted (the janitor's pruning): its footprint leaves the
        summary (at an unknown revision: its bucket is listed again before the footprint
        is trusted)."""
        item = records.digest_item(meta)
        if item is not None:
            self._add(runtime_id, statehash.removal_of(item, rules.stored_size(meta)))

    def _add(self, runtime_id: str, change: statehash.Change) -> None:
        with self._lock:
            buckets = self._pending.get(runtime_id)
            if buckets is None or change.bucket not in buckets:
                if self._size >= self._max:
                    self._hooks.dropped()
                    self._distrust(runtime_id)
                    return
                self._size += 1
            p = self._pending.setdefault(runtime_id, {}).setdefault(
                change.bucket, statehash.Pending()
            )
            p.add(change)

    def _distrust(self, runtime_id: str) -> None:
        """(Under the lock.) Changes of the runtime were lost, or not merged yet after a
        failed merge: its footprint is not used for the quota for a while
        (``DISTRUST_SECONDS``; the summary heals when the buckets are listed)."""
        self._distrusted[runtime_id] = self._clock() + DISTRUST_SECONDS
        if len(self._distrusted) > MAX_REMEMBERED:
            self._distrusted.pop(next(iter(self._distrusted)))

    def pending(self, runtime_id: str) -> int:
        with self._lock:
            return len(self._pending.get(runtime_id, {}))

    # -- merging -----------------------------------------------------------------------------

    def _take(
        self, runtime_id: str, due_only: bool, wait: float = 0.0
    ) -> dict[int, statehash.Pending] | None:
        """The runtime's pending changes to merge (marked busy); None when there are none,
        the merge is not due, or another thread is merging them (after waiting up to
        ``wait`` seconds for it to end)."""
        with self._lock:
            if wait > 0 and runtime_id in self._busy:
                self._idle.wait_for(lambda: runtime_id not in self._busy, timeout=wait)
            if runtime_id in self._busy or runtime_id not in self._pending:
                return None
            mono = self._clock()
            last = self._flushed.get(runtime_id)
            if due_only and last is not None and mono - last < self._interval:
                return None
            self._busy.add(runtime_id)
            self._flushed[runtime_id] = mono
            if len(self._flushed) > MAX_REMEMBERED:
                self._flushed.pop(next(iter(self._flushed)))
            taken = self._pending.pop(runtime_id)
            self._size -= len(taken)
            return taken

    def _give_back(self, runtime_id: str, taken: dict[int, statehash.Pending]) -> None:
        with self._lock:
            into = self._pending.setdefault(runtime_id, {})
            for b, p in taken.items():
                if b in into:
                    p.combine(into[b])
                elif self._size >= self._max:
                    self._hooks.dropped()
                    self._distrust(runtime_id)
                    continue
                else:
                    self._size += 1
                into[b] = p

    def flush_if_due(self, runtime_id: str) -> bool:
        """Merge the runtime's pending changes if its last merge in this worker is
        ``interval`` ago; never raises (runs after the response)."""
        return self._flush(runtime_id, due_only=True) is not None

    def flush(self, runtime_id: str, wait: float = 0.0) -> dict[str, Any] | None:
        """Merge the runtime's pending changes now (after waiting up to ``wait`` seconds for
        a merge of another thread to end); the object written (None: nothing pending, no
        object, or the merge failed)."""
        return self._flush(runtime_id, due_only=False, wait=wait)

    def flush_due(self) -> int:
        """Merge every runtime whose merge is due (``flush_if_due`` for each); how many
        were written. Never raises."""
        with self._lock:
            waiting = list(self._pending)
        return sum(1 for rid in waiting if self.flush_if_due(rid))

    def start(self) -> threading.Thread:
        """A daemon thread of the worker calling ``flush_due`` every interval (at least
        every second): a runtime's next request may go to another worker or replica, and
        the summary (the poller's comparison, the quota's count) must not wait for it."""
        return flushing.every(self._interval, self.flush_due, "summary-flush")

    def flush_all(self, budget: float) -> int:
        deadline = self._clock() + budget
        with self._lock:
            waiting = list(self._pending)
        done = 0
        for runtime_id in waiting:
            if self._clock() >= deadline:
                break
            done += self._flush(runtime_id, due_only=False) is not None
        return done

    def _flush(self, runtime_id: str, due_only: bool, wait: float = 0.0) -> dict[str, Any] | None:
        taken = self._take(runtime_id, due_only, wait)
        if taken is None:
            return None
        keep = False
        try:
            written = self._merge(runtime_id, taken)
            with self._lock:
                self._unmerged.discard(runtime_id)
            return written
        except gateway.GatewayError as e:
            keep = not isinstance(e, gateway.Rejected)
            self._failed(e, keep)
            with self._lock:
                if keep:  # until a merge of the runtime succeeds
                    self._unmerged.add(runtime_id)
                else:
                    self._distrust(runtime_id)
        except Exception as e:  # noqa: BLE001 - runs after the response; never break the worker
            self._failed(e, False)
            with self._lock:
                self._distrust(runtime_id)
        finally:
            if keep:
                self._give_back(runtime_id, taken)
            with self._lock:
                self._busy.discard(runtime_id)
                self._idle.notify_all()
        return None

    def _merge(
        self, runtime_id: str, taken: Mapping[int, statehash.Pending]
    ) -> dict[str, Any] | None:
        for attempt in range(summaryobject.MAX_ATTEMPTS):
            # the first attempt starts from the pod's view when it holds this worker's last
            # write (no KCP read; another writer's newer version: a Conflict, then a GET)
            obj = (self._from_view(runtime_id) if attempt == 0 else None) or self._get(runtime_id)
            stored = None if obj is None else statehash.stored_of(obj.get("status"))
            if obj is None or stored is None:
                return None  # built from a listing at its next read, which holds these writes
            try:
                return self._put(runtime_id, obj, statehash.merge(stored, taken))
            except gateway.Conflict:
                self._conflicted(attempt)
        raise gateway.Unavailable(
            f"{apitypes.RUNTIME_STATE_SUMMARIES.plural}: "
            f"{summaryobject.MAX_ATTEMPTS} conflicts in a row"
        )

    # -- reading -----------------------------------------------------------------------------

    def read(self, runtime_id: str) -> tuple[statehash.Stored, list[tuple[str, int]]]:
        """The runtime's summary (one KCP read, after merging this worker's pending changes
        of the runtime, also those another thread is merging at the time: waited for, at
        most the KCP timeout); built from a full listing when there is none. Also the records
        found without their bucket label (for ``label``, after the answer)."""
        obj = self.flush(runtime_id, wait=self._timeout) or self._viewed(runtime_id)
        stored = None if obj is None else statehash.stored_of(obj.get("status"))
        if obj is not None and stored is not None:
            return stored, []
        return self._bootstrap(runtime_id, obj)

    def _from_view(self, runtime_id: str) -> dict[str, Any] | None:
        """The summary as the pod's view holds it, as an object a status PUT takes (None:
        no view, not held, or older than this worker's last write)."""
        told = None if self._view is None else self._view.ask("summary", runtime_id)
        obj = None if told is None else told.get("summary")
        if (
            not isinstance(obj, dict)
            or (obj.get("metadata") or {}).get("name") != name_of(runtime_id)
            or statehash.stored_of(obj.get("status")) is None
            or not self.newer_than_wrote(runtime_id, obj)
        ):
            return None
        res = apitypes.RUNTIME_STATE_SUMMARIES
        return {
            **obj,
            "apiVersion": f"{res.group}/{res.version}",
            "kind": apitypes.RUNTIME_STATE_SUMMARY_KIND,
            "metadata": {**obj["metadata"], "namespace": self._namespace},
        }

    def _viewed(self, runtime_id: str) -> dict[str, Any] | None:
        """The summary from the pod's view (a watch's latency behind the KCP: the poller's
        next run finds a change it misses), else read from the KCP."""
        return self._from_view(runtime_id) or self._get(runtime_id)

    def footprint(self, runtime_id: str) -> rules.Used | None:
        """Objects and bytes the runtime stores, for the storage quota, at the cost of at
        most one KCP read (none when the pod's view holds the summary): this worker's
        pending changes of the runtime are merged first (also those another thread is
        merging: waited for), so the summary holds every write of this
        worker acknowledged before the call (a write acknowledged during it may be counted
        twice until the next count, never zero times). A runtime without a usable summary
        (none yet, or written before footprints) gets one built from a listing first. None
        when the summary cannot say (a bucket's footprint unknown until it is listed, or
        this worker lost or could not merge changes of the runtime lately): the quota then
        counts from a listing."""
        if self._distrusted_now(runtime_id):
            return None
        # nothing of this worker's to merge: the pod's view's copy when it holds this
        # worker's last write (another worker's writes reach the summary only at its own
        # flush, a second later at most, so the view's few milliseconds add nothing)
        obj = self.flush(runtime_id, wait=self._timeout) or self._viewed(runtime_id)
        if self._distrusted_now(runtime_id):
            return None  # the merge just failed: its changes are not in the object
        stored = None if obj is None else statehash.stored_of(obj.get("status"))
        if stored is None:  # built now (one listing, as the quota's own would be), then kept
            stored, _ = self._bootstrap(runtime_id, obj)
        total = statehash.footprint_of(stored)
        return None if total is None else rules.Used(*total)

    def _distrusted_now(self, runtime_id: str) -> bool:
        with self._lock:
            if runtime_id in self._unmerged:
                return True
            until = self._distrusted.get(runtime_id)
            if until is not None and self._clock() >= until:
                del self._distrusted[runtime_id]
                until = None
            return until is not None
