"""Persistence in the KCP: change records as ``RuntimeConfigMap`` objects (the I/O).

``persist`` applies the ordering rule (``tether.changes.compare``) against the stored
object and writes only a newer record, with the stored object's resourceVersion
(optimistic concurrency): when another replica wrote in between, the API answers 409 and
the record is compared again with the fresh object. Two writes go without a read first,
and the API itself checks what they assume:

* a key this worker does not know (not in ``listener.storage.writecache``) is created at once:
  a create succeeds only if no object of that name exists, which proves the record newer
  than anything stored (nothing is); on 409 (the key is stored after all) the record
  takes the read path. One request for a new key, where a read first cost two;
* an update of an object this worker has seen recently is written with the remembered
  resourceVersion (``listener.storage.writecache``); on 409 or 404 the record takes the read path.

The read path: read the stored object, compare, write with its resourceVersion, up to
``MAX_ATTEMPTS`` times. A call returns only after the API server has acknowledged the
write (stored in etcd), so "persisted" means durable.

Storage limits (``listener.storage.quota``, ``listener.storage.rules``): a write that does not fit the
runtime's quota raises ``quota.Exceeded`` (the client gets 413); a record for a key that is
not stored whose ``observedAt`` is older than the tombstone retention is ``stale`` (it
might be older than a pruned tombstone). The create without a read is tried only for a
record that would be accepted if the key were new (not too old, admitted by the quota as
a new record); anything else takes the read path, which decides on the stored object, so
the outcome never depends on which path ran. A create reserves a new record in the quota;
on 409 the reservation is cancelled and the read path reserves the update's growth
instead. Every written object carries its size annotation.

Errors are the gateway's (``tether.gateway``): ``gateway.Rejected`` when the API refuses the
object itself (the client gets 400), any other ``gateway.GatewayError`` when the KCP API
cannot be used (down, timing out, 5xx, 429, or refusing this listener: ``Forbidden``; the
client gets 503 and retries).
"""

from __future__ import annotations

import datetime
import random
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any, Literal, NamedTuple

from listener.storage import quota, records, writecache
from listener.storage import rules as retention
from tether import apitypes, changes, gateway, numbers, statehash

Outcome = Literal["persisted", "duplicate", "stale"]
MAX_ATTEMPTS = 12
LIST_PAGE = 500


NO_QUOTA = quota.Limits(10**12, 10**15)


class Survey(NamedTuple):
    """What a full listing of a runtime's records found, by state summary bucket."""

    folded: statehash.Buckets
    held: statehash.Footprint
    revision: int  # the listing's KCP resourceVersion (0: unknown)


class Surveying:
    """Folds the metadata of a runtime's records, page by page, into a ``Survey``."""

    def __init__(self) -> None:
        self.folded, self.held, self.revision = statehash.Buckets(), statehash.Footprint(), 0

    def page(self, revision: int) -> None:
        self.revision = max(self.revision, revision)

    def add(self, meta: Mapping[str, Any]) -> changes.DigestItem | None:
        """Fold one object's metadata; its digest item (None: not a record of ours)."""
        item = records.digest_item(meta)
        if item is None:
            return None
        live = statehash.live_item(item)
        if live is not None:
            self.folded.add(live)
        self.held.add(statehash.bucket_of(item["namespace"], item["name"]),
                      quota.stored_size(meta))
        return item

    def result(self) -> Survey:
        return Survey(self.folded, self.held, self.revision)


def metadata_pages(kcp: gateway.Kube, namespace: str, selector: str, timeout: float,
                   ) -> Iterator[tuple[list[dict[str, Any]], int]]:
    """Pages of metadata of the records ``selector`` picks, each with the listing's KCP
    revision (also a page without items: an empty listing has a revision too)."""
    token = ""
    while True:
        page = kcp.list(apitypes.RUNTIME_CONFIGMAPS, namespace, label_selector=selector, limit=LIST_PAGE,
                        continue_token=token or None, metadata_only=True, timeout=timeout)
        pmeta = page.get("metadata") or {}
        yield ([obj.get("metadata") or {} for obj in page.get("items") or []],
               numbers.ascii_int(pmeta.get("resourceVersion"), 32) or 0)
        token = pmeta.get("continue") or ""
        if not token:
            return


class Store:
    def __init__(self, kcp: gateway.Kube, namespace: str, timeout: float,
                 cache_entries: int = 10_000,
                 on_conflict: Callable[[str], None] = lambda path: None, *,
                 limits: quota.Limits = NO_QUOTA, quota_ttl: float = 10.0,
                 tombstone_retention: float = 7 * 86400.0,
                 now: Callable[[], datetime.datetime] = lambda: datetime.datetime.now(
                     datetime.UTC),
                 on_written: Callable[[str, Mapping[str, Any] | None, Mapping[str, Any] | None,
                                       Mapping[str, Any]], None] | None = None,
                 footprint: Callable[[str], quota.Used | None] | None = None,
                 on_count: Callable[[str], None] = lambda source: None) -> None:
        self._kcp = kcp
        self.namespace = namespace
        self._timeout = timeout
        self._cache = writecache.WriteCache(cache_entries)
        # metric hook: a "create", "cached" or "read" write lost a race
        self._on_conflict = on_conflict
        self.usage = quota.Usage(limits, quota_ttl, self._usage)
        self._retention = tombstone_retention
        self._now = now
        # after each persisted record: (runtime, old metadata or None, written metadata or
        # None when unknown, record); listener.fleet.statesummary keeps the state summary by it
        self._on_written = on_written
        # the runtime's stored objects and bytes at one read (listener.fleet.statesummary); None
        # from it, or no source: counted from a listing of the runtime's records
        self._footprint = footprint
        self._on_count = on_count  # metric hook: "summary" or "listing"

    # -- records -----------------------------------------------------------------------------

    def _get(self, name: str) -> dict[str, Any] | None:
        return self._kcp.get_or_none(apitypes.RUNTIME_CONFIGMAPS, self.namespace, name, timeout=self._timeout)

    def persist(self, record: Mapping[str, Any]) -> Outcome:
        """Store ``record`` if it is newer than the stored one; the outcome. Raises
        ``quota.Exceeded`` or a ``gateway.GatewayError``."""
        key = records.key_of(record)
        name = records.object_name(key)
        incoming = changes.version_of(record)
        entry = self._cache.get(name)
        if entry is None:
            if self._create_first(key, record, incoming):
                return "persisted"
        elif self._write_from_cache(key, name, entry, record, incoming):
            return "persisted"
        for attempt in range(MAX_ATTEMPTS):
            stored = self._get(name)
            if stored is not None and not records.matches(stored, key):
                raise gateway.Rejected("object name collision; refusing to overwrite another key")
            if stored is not None:
                self._cache.remember(stored)
            elif retention.too_old_for_new_key(incoming.observed_at, self._now(),
                                               self._retention):
                return "stale"  # maybe older than a pruned tombstone (listener.storage.rules)
            verdict = changes.compare(
                None if stored is None else records.stored_version(stored), incoming)
            if verdict != "newer":
                return verdict
            if stored is None:
                new = records.body(record, self.namespace)
                old_size = None
            else:
                new = records.updated(stored, record)
                old_size = quota.stored_size(stored.get("metadata") or {})
            size = quota.annotate(new)
            try:
                admitted = self.usage.reserve(key.runtime_id, old_size, size)
            except quota.Exceeded as e:
                e.object = f"{key.namespace}/{key.name}"
                raise
            try:
                if stored is None:
                    written = self._kcp.create(apitypes.RUNTIME_CONFIGMAPS, self.namespace, new,
                                               timeout=self._timeout)
                else:
                    written = self._kcp.replace(apitypes.RUNTIME_CONFIGMAPS, self.namespace, name, new,
                                                timeout=self._timeout)
                self._cache.remember(written)
                try:
                    self._tell(key, None if stored is None else stored.get("metadata"),
                               written.get("metadata"), record)
                finally:
                    admitted.commit()
                return "persisted"
            except (gateway.Conflict, gateway.NotFound) as e:
                admitted.cancel()
                # 409: another writer won; 404 on an update: the object was deleted (a
                # pruned tombstone, an orphan's records) since it was read
                if isinstance(e, gateway.NotFound) and stored is None:
                    raise
                self._on_conflict("read")
            except BaseException:
                admitted.cancel()
                raise
            # another writer won: back off a little (jittered) and compare again
            time.sleep(random.uniform(0, 0.005 * (attempt + 1)))
        raise gateway.Unavailable("persist: too many concurrent writers on one object")

    def _tell(self, key: records.Key, old: Mapping[str, Any] | None,
              new: Mapping[str, Any] | None, record: Mapping[str, Any]) -> None:
        """Tell ``on_written`` of a write (the written metadata from the write cache when the
        path did not keep it), before its quota reservation is committed: a footprint read
        (``listener.fleet.statesummary``) that counts the commit then also counts the change."""
        if self._on_written is not None:
            if new is None:
                cached = self._cache.get(records.object_name(key))
                new = None if cached is None else cached.metadata
            self._on_written(key.runtime_id, old, new, record)

    def _create_first(self, key: records.Key, record: Mapping[str, Any],
                      incoming: changes.Version) -> bool:
        """Create the object without reading first, for a key this worker does not know;
        False when the read path must decide: the record would not be accepted as a new key
        (too old for the retention rule, not newer than nothing, over the quota as a new
        record: it may be an update of a stored key) or the key is stored (409)."""
        if retention.too_old_for_new_key(incoming.observed_at, self._now(), self._retention):
            return False  # stale only if the key is not stored: the read path decides
        if changes.compare(None, incoming) != "newer":
            return False
        new = records.body(record, self.namespace)
        size = quota.annotate(new)
        try:
            admitted = self.usage.reserve(key.runtime_id, None, size)
        except quota.Exceeded:
            return False  # a stored key's update may still fit: decide on a fresh read
        try:
            written = self._kcp.create(apitypes.RUNTIME_CONFIGMAPS, self.namespace, new, timeout=self._timeout)
        except gateway.Conflict:
            admitted.cancel()  # the read path reserves the update's growth instead
            self._on_conflict("create")
            return False
        except BaseException:
            admitted.cancel()
            raise
        self._cache.remember(written)
        try:
            self._tell(key, None, written.get("metadata"), record)
        finally:
            admitted.commit()
        return True

    def _write_from_cache(self, key: records.Key, name: str, entry: writecache.Entry,
                          record: Mapping[str, Any], incoming: changes.Version) -> bool:
        """Write without reading first when the remembered version is older (see
        ``listener.storage.writecache``); False when the read path must run."""
        if changes.compare(entry.version, incoming) != "newer":
            return False
        new = records.updated({"metadata": entry.metadata}, record)
        size = quota.annotate(new)
        try:
            admitted = self.usage.reserve(str(record["runtimeId"]),
                                          quota.stored_size(entry.metadata), size)
        except quota.Exceeded:
            return False  # the remembered size may be outdated: decide on a fresh read
        try:
            written = self._kcp.replace(apitypes.RUNTIME_CONFIGMAPS, self.namespace, name, new,
                                        timeout=self._timeout)
        except (gateway.Conflict, gateway.NotFound):
            admitted.cancel()
            self._cache.drop(name)
            self._on_conflict("cached")
            return False
        except BaseException:
            admitted.cancel()
            raise
        self._cache.remember(written)
        try:
            self._tell(key, entry.metadata, written.get("metadata"), record)
        finally:
            admitted.commit()
        return True

    def digest(self, runtime_id: str) -> list[changes.DigestItem]:
        """Every stored object of the runtime (metadata only), unordered. The same list
        refreshes this worker's view of the runtime's quota usage."""
        return self.survey(runtime_id)[0]

    def survey(self, runtime_id: str) -> tuple[list[changes.DigestItem], Survey]:
        """``digest``, and what its listing says of the state summary's buckets (for
        ``listener.fleet.statesummary.Summaries.listed_all``)."""
        items: list[changes.DigestItem] = []
        snap = self.usage.begin(runtime_id)
        survey = Surveying()
        count = size = 0
        for metas, revision in metadata_pages(self._kcp, self.namespace,
                                              f"{apitypes.RUNTIME_ID_LABEL}={runtime_id}",
                                              self._timeout):
            survey.page(revision)
            for meta in metas:
                count += 1
                size += quota.stored_size(meta)
                item = survey.add(meta)
                if item is not None:
                    items.append(item)
        self.usage.observe(runtime_id, quota.Used(count, size), snap)
        return items, survey.result()

    def _usage(self, runtime_id: str) -> quota.Used:
        """Records and bytes the runtime keeps (for ``quota.Usage``): its state summary's
        footprint (one read, whatever the records), else a metadata-only list."""
        if self._footprint is not None:
            held = self._footprint(runtime_id)
            if held is not None:
                self._on_count("summary")
                return held
        self._on_count("listing")
        return quota.usage_of(self._metadata(runtime_id))

    def _metadata(self, runtime_id: str) -> Iterator[dict[str, Any]]:
        """The metadata of every stored object of the runtime (paginated, label-selected)."""
        for obj in self._kcp.list_items(
                apitypes.RUNTIME_CONFIGMAPS, self.namespace, label_selector=f"{apitypes.RUNTIME_ID_LABEL}={runtime_id}",
                page_size=LIST_PAGE, metadata_only=True, timeout=self._timeout):
            yield obj.get("metadata") or {}

    def ping(self) -> None:
        """One cheap authorized call (for /readyz); raises a ``gateway.GatewayError``."""
        self._kcp.list(apitypes.RUNTIME_CONFIGMAPS, self.namespace, limit=1, metadata_only=True,
                       timeout=self._timeout)
