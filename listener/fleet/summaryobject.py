"""The ``RuntimeStateSummary`` object of a runtime and what is read from its records (the
I/O): the object's read, write and creation, and the listings that build it (bootstrap),
set every bucket that disagrees (``listed_all``, ``heal``) or one bucket (``bucket``), and the
bucket labels of records written before them (``label``). ``listener.fleet.statesummary``
(``Summaries``, built on ``SummaryObjects``) keeps it by the listener's writes; its module
docstring says how the summary stays right.
"""

from __future__ import annotations

import datetime
import logging
import random
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any, NamedTuple

from listener.fleet import heartbeat
from listener.storage import listing, namespaces, records, rules
from tether.base import logs, numbers
from tether.kube import apitypes, gateway
from tether.wire import changes, statehash

log = logging.getLogger("listener.fleet.statesummary")  # one logger for the state summary
MAX_ATTEMPTS = 6
HEAL_BUCKETS = 16  # buckets listed one by one by ``heal``; more: one full listing
MAX_UNLABELLED = 100_000  # records to label kept from one listing
LABEL_SECONDS = 10.0  # labelling after one answer
LOG_EVERY = 30.0
MAX_WROTE = 50_000  # runtimes whose last summary write a worker remembers


def name_of(runtime_id: str) -> str:
    """Named like the runtime's heartbeat Lease and RuntimeDelivery."""
    return heartbeat.lease_name(runtime_id)


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class Bucket(NamedTuple):
    """One bucket as listed from the records."""

    items: list[changes.DigestItem]
    hash: int
    live: int
    revision: int
    corrected: bool


class Hooks(NamedTuple):
    """Metric hooks (``listener.metrics``)."""

    conflict: Callable[[], None] = lambda: None
    corrected: Callable[[int], None] = lambda n: None
    flush_error: Callable[[str], None] = lambda reason: None
    dropped: Callable[[], None] = lambda: None


class SummaryObjects:
    """A runtime's ``RuntimeStateSummary`` in the KCP, and the listings that set it."""

    def __init__(
        self,
        kcp: gateway.Kube,
        namespace: str,
        timeout: float,
        hooks: Hooks,
        clock: Callable[[], float],
    ) -> None:
        self._kcp, self._namespace, self._timeout = kcp, namespace, timeout
        self._hooks, self._clock = hooks, clock
        self._lock = threading.Lock()
        self._last_log = -LOG_EVERY
        # where each Watch stores (namespaces.Homes); None: every record in ``namespace``
        self.homes: namespaces.Homes | None = None
        # the resourceVersion of the summary this worker last wrote, per runtime (bounded):
        # a view that holds an older one has not seen this worker's own write yet
        self._wrote: dict[str, int] = {}

    def _conflicted(self, attempt: int) -> None:
        """Another writer won: count it and back off a little (jittered)."""
        self._hooks.conflict()
        time.sleep(random.uniform(0, 0.005 * (attempt + 1)))

    def _failed(self, e: BaseException, kept: bool) -> None:
        reason = type(e).__name__.lower() if isinstance(e, gateway.GatewayError) else "other"
        self._hooks.flush_error(reason)
        now = self._clock()
        with self._lock:
            if now - self._last_log < LOG_EVERY:
                return
            self._last_log = now
        log.warning(
            "cannot merge into a RuntimeStateSummary: %s; %s",
            logs.bounded(e, 300),
            "kept for the next merge"
            if kept
            else "dropped (the summary heals when the bucket is listed)",
        )

    # -- the object --------------------------------------------------------------------------

    def _get(self, runtime_id: str) -> dict[str, Any] | None:
        obj = self._kcp.get_or_none(
            apitypes.RUNTIME_STATE_SUMMARIES,
            self._namespace,
            name_of(runtime_id),
            timeout=self._timeout,
        )
        if obj is not None and (obj.get("spec") or {}).get("runtimeId") != runtime_id:
            raise gateway.Rejected(
                f"{apitypes.RUNTIME_STATE_SUMMARIES.plural}/{name_of(runtime_id)} "
                "belongs to another runtime"
            )
        return obj

    def _put(self, runtime_id: str, obj: dict[str, Any], s: statehash.Stored) -> dict[str, Any]:
        obj = dict(obj)
        obj["status"] = {"runtimeId": runtime_id, "updatedAt": _now(), **statehash.status_of(s)}
        written = self._kcp.request(
            "PUT",
            apitypes.RUNTIME_STATE_SUMMARIES.path(self._namespace, name_of(runtime_id), "status"),
            body=obj,
            timeout=self._timeout,
            what=f"update {apitypes.RUNTIME_STATE_SUMMARIES.plural}/status",
        )
        rv = numbers.revision_of(written.get("metadata"))
        if rv is not None:
            with self._lock:
                self._wrote.pop(runtime_id, None)
                self._wrote[runtime_id] = rv
                if len(self._wrote) > MAX_WROTE:
                    self._wrote.pop(next(iter(self._wrote)))
        return written

    def newer_than_wrote(self, runtime_id: str, obj: Mapping[str, Any]) -> bool:
        """Whether ``obj`` (a summary from the pod's view) holds at least the last write
        of this worker to the runtime's summary (read-your-writes within a worker; another
        worker's write shows within the watch's latency)."""
        with self._lock:
            wrote = self._wrote.get(runtime_id)
        if wrote is None:
            return True
        rv = numbers.revision_of(obj.get("metadata"))
        return rv is not None and rv >= wrote

    def _create(self, runtime_id: str) -> dict[str, Any]:
        body = {
            "apiVersion": (
                f"{apitypes.RUNTIME_STATE_SUMMARIES.group}/"
                f"{apitypes.RUNTIME_STATE_SUMMARIES.version}"
            ),
            "kind": apitypes.RUNTIME_STATE_SUMMARY_KIND,
            "metadata": {
                "name": name_of(runtime_id),
                "namespace": self._namespace,
                "labels": {
                    apitypes.RUNTIME_ID_LABEL: runtime_id,
                    apitypes.MANAGED_BY_LABEL: records.MANAGED_BY,
                },
            },
            "spec": {"runtimeId": runtime_id},
        }
        try:
            return self._kcp.create(
                apitypes.RUNTIME_STATE_SUMMARIES, self._namespace, body, timeout=self._timeout
            )
        except gateway.Conflict:  # another worker created it just now
            obj = self._get(runtime_id)
            if obj is None:
                raise gateway.Unavailable(
                    f"{apitypes.RUNTIME_STATE_SUMMARIES.plural}: created and gone"
                ) from None
            return obj

    # -- listings ----------------------------------------------------------------------------

    def _bootstrap(
        self,
        runtime_id: str,
        obj: dict[str, Any] | None,
    ) -> tuple[statehash.Stored, list[tuple[str, int]]]:
        survey = listing.Surveying()
        unlabelled: list[tuple[str, int]] = []
        for metas, rev in self._pages(f"{apitypes.RUNTIME_ID_LABEL}={runtime_id}"):
            survey.page(rev)
            for meta in metas:
                item = survey.add(meta)
                if item is not None:
                    self._note_unlabelled(meta, item, unlabelled)
        built = statehash.Stored.listed(survey.folded, survey.revision, survey.held)
        for attempt in range(MAX_ATTEMPTS):
            if obj is None:
                obj = self._create(runtime_id)
            current = statehash.stored_of(obj.get("status"))
            if current is not None:
                return current, unlabelled  # another worker built it meanwhile
            try:
                self._put(runtime_id, obj, built)
                log.info(
                    "built the state summary of runtime %s from %d records",
                    logs.bounded(runtime_id, 80),
                    sum(built.counts),
                )
                return built, unlabelled
            except gateway.Conflict:
                self._conflicted(attempt)
                obj = self._get(runtime_id)
        raise gateway.Unavailable(
            f"{apitypes.RUNTIME_STATE_SUMMARIES.plural}: {MAX_ATTEMPTS} conflicts in a row"
        )

    def listed_all(
        self, runtime_id: str, folded: statehash.Buckets, held: statehash.Footprint, revision: int
    ) -> int:
        """A full listing of the runtime's records at ``revision`` was made anyway (the
        full digest): set every bucket of its summary that disagrees from it (a summary
        damaged in more buckets than a run lists one by one heals here); how many buckets
        were set. Never raises (runs after the answer)."""
        if revision <= 0:
            return 0
        try:
            obj = self._get(runtime_id)
            for attempt in range(MAX_ATTEMPTS):
                if obj is None:
                    return 0  # built at the next read
                stored = statehash.stored_of(obj.get("status"))
                if stored is None:  # unusable: the listing is the whole summary
                    new, fixed = statehash.Stored.listed(folded, revision, held), statehash.BUCKETS
                else:
                    new, fixed = stored, 0
                    for b in range(statehash.BUCKETS):
                        c = statehash.corrected(
                            new,
                            b,
                            folded.hashes[b],
                            folded.counts[b],
                            revision,
                            held.records[b],
                            held.bytes[b],
                        )
                        if c is not None:
                            new, fixed = c, fixed + 1
                    if not fixed:
                        return 0  # agrees
                if self._put_corrected(
                    runtime_id, obj, new, fixed, attempt, "%d buckets set from a full listing"
                ):
                    return fixed
                obj = self._get(runtime_id)
        except Exception as e:  # noqa: BLE001 - after the answer: the next listing retries
            self._failed(e, False)
        return 0

    def _put_corrected(
        self,
        runtime_id: str,
        obj: dict[str, Any],
        new: statehash.Stored,
        count: int,
        attempt: int,
        what: str,
    ) -> bool:
        """Write ``new``, a summary set from a listing (``count`` for the metric hook and
        ``what``'s one number in the log line); False when another writer won (backed off:
        read and compare again)."""
        try:
            self._put(runtime_id, obj, new)
            self._hooks.corrected(count)
            log.info("state summary of runtime %s: " + what, logs.bounded(runtime_id, 80), count)
            return True
        except gateway.Conflict:
            self._conflicted(attempt)
            return False

    def heal(self, runtime_id: str, buckets: set[int]) -> int:
        """Set ``buckets`` of the runtime's summary from listings of their records (after a
        change at an unknown revision, such as the janitor's pruning, made them unknown):
        one label-selected list per bucket, or one full listing for more than
        ``HEAL_BUCKETS``; how many buckets were set. Never raises."""
        try:
            if len(buckets) <= HEAL_BUCKETS:
                return sum(self.bucket(runtime_id, n)[0].corrected for n in sorted(buckets))
            survey = listing.Surveying()
            for metas, rev in self._pages(f"{apitypes.RUNTIME_ID_LABEL}={runtime_id}"):
                survey.page(rev)
                for meta in metas:
                    survey.add(meta)
            return self.listed_all(runtime_id, *survey.result())
        except Exception as e:  # noqa: BLE001 - the poller's next run lists what is unknown
            self._failed(e, False)
            return 0

    @staticmethod
    def _note_unlabelled(
        meta: Mapping[str, Any], item: Mapping[str, Any], out: list[tuple[str, int]]
    ) -> None:
        labels = meta.get("labels")
        if isinstance(labels, dict) and records.BUCKET_LABEL in labels:
            return
        if len(out) < MAX_UNLABELLED:
            out.append(
                (
                    str(meta.get("name", "")),
                    statehash.bucket_of(str(item["namespace"]), str(item["name"])),
                )
            )

    def _pages(self, selector: str) -> Iterator[tuple[list[dict[str, Any]], int]]:
        return listing.metadata_pages(
            self._kcp,
            self._namespace,
            selector,
            self._timeout,
            None if self.homes is None else self.homes(),
        )

    def bucket(self, runtime_id: str, n: int) -> tuple[Bucket, list[tuple[str, int]]]:
        """The digest items of bucket ``n`` (metadata lists of the KCP: the runtime's records
        without a bucket label, then those labelled ``n``), and the summary corrected when it
        disagrees. Also the unlabelled records found (for ``label``)."""
        obj = self._get(runtime_id)
        found: dict[str, changes.DigestItem] = {}
        sizes: dict[str, int] = {}
        unlabelled: list[tuple[str, int]] = []
        # unlabelled first: a record labelled in between shows up in the second list
        for metas, _ in self._pages(
            f"{apitypes.RUNTIME_ID_LABEL}={runtime_id},!{records.BUCKET_LABEL}"
        ):
            for meta in metas:
                item = records.digest_item(meta)
                if item is None:
                    continue
                self._note_unlabelled(meta, item, unlabelled)
                if statehash.bucket_of(item["namespace"], item["name"]) == n:
                    found[str(meta.get("name", ""))] = item
                    sizes[str(meta.get("name", ""))] = rules.stored_size(meta)
        revision = 0
        for metas, rev in self._pages(
            f"{apitypes.RUNTIME_ID_LABEL}={runtime_id},{records.BUCKET_LABEL}={n}"
        ):
            revision = max(revision, rev)  # set by an empty listing too
            for meta in metas:
                item = records.digest_item(meta)
                if item is not None and statehash.bucket_of(item["namespace"], item["name"]) == n:
                    found[str(meta.get("name", ""))] = item
                    sizes[str(meta.get("name", ""))] = rules.stored_size(meta)
        items = sorted(found.values(), key=lambda i: (i["namespace"], i["name"]))
        h, count = statehash.bucket_hash(items)
        fixed = (
            obj is not None
            and revision > 0
            and self._correct(
                runtime_id, obj, n, (h, count, len(found), sum(sizes.values())), revision
            )
        )
        return Bucket(items, h, count, revision, fixed), unlabelled

    def _correct(
        self,
        runtime_id: str,
        obj: dict[str, Any] | None,
        n: int,
        listed: tuple[int, int, int, int],
        revision: int,
    ) -> bool:
        """Set bucket ``n`` to what its listing at ``revision`` found: (hash, live count,
        objects, bytes)."""
        h, count, objects, size = listed
        for attempt in range(MAX_ATTEMPTS):
            if obj is None:
                return False
            stored = statehash.stored_of(obj.get("status"))
            if stored is None:
                return False  # rebuilt at the next read
            new = statehash.corrected(stored, n, h, count, revision, objects, size)
            if new is None:
                return False
            if self._put_corrected(
                runtime_id, obj, new, n, attempt, "bucket %d corrected from its records"
            ):
                return True
            obj = self._get(runtime_id)
        return False

    # -- migration ---------------------------------------------------------------------------

    def label(self, unlabelled: list[tuple[str, int]], budget: float = LABEL_SECONDS) -> int:
        """Add the bucket label to records written before it (a merge patch each, within
        ``budget`` seconds; the rest at a later listing); how many. Never raises."""
        deadline = self._clock() + budget
        done = 0
        for name, b in unlabelled:
            if self._clock() >= deadline:
                break
            try:
                self._kcp.patch(
                    apitypes.RUNTIME_CONFIGMAPS,
                    self._namespace,
                    name,
                    {"metadata": {"labels": {records.BUCKET_LABEL: str(b)}}},
                    timeout=self._timeout,
                )
                done += 1
            except gateway.NotFound:
                continue
            except Exception as e:  # noqa: BLE001 - after the answer: next listing retries
                self._failed(e, False)
                break
        return done
