"""Persistence in the KCP: change records as ``RuntimeConfigMap`` objects (the I/O).

``persist`` applies the storage rule's decisions (``listener.storage.rules``: the ordering
rule ``tether.wire.changes.compare``, the retention, the quota) against the stored object and
writes only a newer record, with the stored object's resourceVersion
(optimistic concurrency): when another replica wrote in between, the API answers 409 and
the record is compared again with the fresh object. Two writes go without a read first,
and the API itself checks what they assume:

* a key this worker does not know (not in ``listener.storage.writecache``) is created at
  once: a create succeeds only if no object of that name exists, which proves the record
  newer than anything stored (nothing is); on 409 (the key is stored after all) the record
  takes the read path. One request for a new key, where a read first cost two;
* an update of an object this worker has seen recently is written with the remembered
  resourceVersion (``listener.storage.writecache``); on 409 or 404 the record takes the
  read path.

Every path writes through ``_write``. The read path: read the stored object, compare,
write with its resourceVersion, up to ``MAX_ATTEMPTS`` times. A call returns only after the API
server has acknowledged the write (stored in etcd), so "persisted" means durable.

Storage limits (``rules``; ``listener.storage.quota`` keeps the usage): a write that does
not fit the runtime's quota raises ``quota.Exceeded`` (the client gets 413); a record for
a key that is not stored whose ``observedAt`` is older than the tombstone retention is ``stale`` (it
might be older than a pruned tombstone). The create without a read is tried only for a
record that would be accepted if the key were new (not too old, admitted by the quota as
a new record); anything else takes the read path, which decides on the stored object, so
the outcome never depends on which path ran. A create reserves a new record in the quota;
on 409 the reservation is cancelled and the read path reserves the update's growth
instead. Every written object carries its size annotation.

Unbacked tombstones (``rules``, "Unbacked tombstones"): a tombstone for a key that is not
stored (or only as an unbacked tombstone) is written with ``rules.UNBACKED_LABEL``, reserves
nothing in the quota and is not told to ``on_written`` (it is in no state summary); a live
record that replaces one is a new record to the quota and the summary. After each unbacked
tombstone it creates that may pass ``unbacked_cap`` (``listener.storage.unbacked``), the store
lists the runtime's unbacked tombstones (label-selected, metadata only) and deletes the
oldest down to half the cap (each only if unchanged since listed: one that became a record
meanwhile is never deleted).

Where (``listener.storage.namespaces``): each record is written in its Watch's storage
namespace, labelled with its Kyma CR's name and, in the Kyma CR's namespace, owned by it
(``owner_of``); a namespace that does not exist or that the listener may not write in (its
setting, or the KCP's admission: an unlabelled Namespace) is an error (503). Every listing of a
runtime's records is one label-selected list (``listener.storage.listing``) that keeps only objects
where their Watch stores.

Errors are the gateway's (``tether.kube.gateway``): ``gateway.Rejected`` when the API refuses the
object itself (the client gets 400), any other ``gateway.GatewayError`` when the KCP API
cannot be used (down, timing out, 5xx, 429, or refusing this listener: ``Forbidden``; the
client gets 503 and retries).
"""

from __future__ import annotations

import datetime
import logging
import random
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any, Literal

from listener.storage import listing, namespaces, quota, records, rules, unbacked, writecache
from tether.base import logs
from tether.kube import apitypes, gateway
from tether.wire import changes, watches

Outcome = Literal["persisted", "duplicate", "stale"]
MAX_ATTEMPTS = 12


NO_QUOTA = rules.Limits(10**12, 10**15)
log = logging.getLogger(__name__)


class Store:
    def __init__(
        self,
        kcp: gateway.Kube,
        namespace: str,
        timeout: float,
        cache_entries: int = 10_000,
        on_conflict: Callable[[str], None] = lambda path: None,
        *,
        limits: rules.Limits = NO_QUOTA,
        quota_ttl: float = 10.0,
        quota_writers: int = 1,
        tombstone_retention: float = 7 * 86400.0,
        now: Callable[[], datetime.datetime] = lambda: datetime.datetime.now(datetime.UTC),
        on_written: Callable[
            [str, Mapping[str, Any] | None, Mapping[str, Any] | None, Mapping[str, Any]], None
        ]
        | None = None,
        footprint: Callable[[str], rules.Used | None] | None = None,
        on_count: Callable[[str], None] = lambda source: None,
        homes: namespaces.Homes | None = None,
        owner_of: Callable[[str], records.Owner | None] = lambda runtime_id: None,
        on_missing: Callable[[], None] = lambda: None,
        storage_namespaces: tuple[str, ...] | None = None,
        on_refused_namespace: Callable[[], None] = lambda: None,
        unbacked_cap: int = 20,
        on_evicted: Callable[[int], None] = lambda n: None,
    ) -> None:
        self._kcp = kcp
        self.namespace = namespace
        self._timeout = timeout
        self._cache = writecache.WriteCache(cache_entries)
        # metric hook: a "create", "cached" or "read" write lost a race
        self._on_conflict = on_conflict
        self.usage = quota.Usage(limits, quota_ttl, self._usage, writers=quota_writers)
        self._retention = tombstone_retention
        self._now = now
        # after each persisted record: (runtime, old metadata or None, written metadata or
        # None when unknown, record); listener.fleet.statesummary keeps the state summary by it
        self._on_written = on_written
        # the runtime's stored objects and bytes at one read (listener.fleet.statesummary); None
        # from it, or no source: counted from a listing of the runtime's records
        self._footprint = footprint
        self._on_count = on_count  # metric hook: "summary" or "listing"
        self._where = namespaces.Namespaces(
            namespace, homes, storage_namespaces, on_missing, on_refused_namespace
        )
        self._owner_of = owner_of  # the runtime's Kyma CR (cached by listener.fleet.runtimes)
        self._unbacked = unbacked.Tally(unbacked_cap)  # unbacked tombstones one runtime keeps
        self._on_evicted = on_evicted  # metric hook: unbacked tombstones evicted

    # -- records -----------------------------------------------------------------------------

    def _get(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self._kcp.get_or_none(
            apitypes.RUNTIME_CONFIGMAPS, namespace, name, timeout=self._timeout
        )

    def persist(self, record: Mapping[str, Any], trace: str = "") -> Outcome:
        """Store ``record`` if it is newer than the stored one; the outcome (``trace``: the
        write's ``traceparent``, stored as an annotation). Raises ``quota.Exceeded`` or a
        ``gateway.GatewayError`` (``gateway.Rejected`` names the record's namespace/name)."""
        key = records.key_of(record)
        try:
            return self._persist(key, record, trace)
        except gateway.Rejected as e:  # which record of a batch: the answer names it
            raise gateway.Rejected(f"{key.namespace}/{key.name}: {e}", e.status) from e

    def _persist(self, key: records.Key, record: Mapping[str, Any], trace: str) -> Outcome:
        name = records.object_name(key)
        incoming = changes.version_of(record)
        entry = self._cache.get(name)
        if entry is None:
            if self._create_first(key, name, record, incoming, trace):
                return "persisted"
        elif self._write_from_cache(key, name, entry, record, incoming, trace):
            return "persisted"
        for attempt in range(MAX_ATTEMPTS):
            outcome = self._read_then_write(key, name, record, incoming, trace)
            if outcome is not None:
                return outcome
            # another writer won: back off a little (jittered) and compare again
            time.sleep(random.uniform(0, 0.005 * (attempt + 1)))
        raise gateway.Unavailable("persist: too many concurrent writers on one object")

    def _read_then_write(
        self,
        key: records.Key,
        name: str,
        record: Mapping[str, Any],
        incoming: changes.Version,
        trace: str = "",
    ) -> Outcome | None:
        """One attempt of the read path: read the stored object, decide (``rules.verdict``),
        write with its resourceVersion; None when another writer won (409, or 404 on an
        update: the object was deleted since it was read, a pruned tombstone, an orphan's
        records)."""
        where = self._where.home(key.watch)
        stored = self._get(where, name)
        if stored is not None and not records.matches(stored, key):
            raise gateway.Rejected("object name collision; refusing to overwrite another key")
        if stored is not None:
            self._cache.remember(stored)
        verdict = rules.verdict(
            None if stored is None else records.stored_version(stored),
            incoming,
            self._now(),
            self._retention,
        )
        if verdict != "newer":
            return verdict  # stale also when maybe older than a pruned tombstone (rules)
        old = None if stored is None else stored.get("metadata") or {}
        tombstone_unbacked = rules.unbacked(old, bool(record["deleted"]))
        if stored is None:
            new = records.body(record, where, trace, self._owner(key), tombstone_unbacked)
        else:
            new = records.updated(stored, record, trace, self._owner(key), tombstone_unbacked)
        size = rules.annotate(new)
        try:
            admitted = self._reserve(key, tombstone_unbacked, rules.quota_size(old), size)
        except quota.Exceeded as e:
            e.object = f"{key.namespace}/{key.name}"
            raise
        try:
            self._write(key, name, new, stored is None, old, record, admitted)
        except (gateway.Conflict, gateway.NotFound) as e:
            if isinstance(e, gateway.NotFound) and stored is None:
                raise
            self._on_conflict("read")
            return None
        if tombstone_unbacked and stored is None:
            self._evict(key.runtime_id)
        return "persisted"

    def _reserve(
        self, key: records.Key, free: bool, old_size: int | None, size: int
    ) -> quota.Reservation:
        """The quota's reservation of a write (``free``: an unbacked tombstone, which
        reserves nothing)."""
        if free:
            return self.usage.nothing(key.runtime_id)
        return self.usage.reserve(key.runtime_id, old_size, size)

    def _evict(self, runtime_id: str) -> None:
        """After an unbacked tombstone was created: when the runtime may hold more than the
        cap (``listener.storage.unbacked``), list its unbacked tombstones and delete the
        oldest down to the tally's target, each only if unchanged since listed. A failure is
        logged and left to the next one (the tombstone just written is persisted either
        way)."""
        token = self._unbacked.created(runtime_id)
        if token is None:
            return
        try:
            metas = [
                m
                for page, _ in listing.metadata_pages(
                    self._kcp,
                    self.namespace,
                    f"{apitypes.RUNTIME_ID_LABEL}={runtime_id},{rules.UNBACKED_LABEL}=true",
                    self._timeout,
                    self._where.now(),
                )
                for m in page
            ]
            evicted = 0
            keep = self._unbacked.target(len(metas))
            for t in rules.evictions(metas, keep, records.ANN_OBSERVED):
                try:
                    self._kcp.delete(
                        apitypes.RUNTIME_CONFIGMAPS,
                        t.namespace or self.namespace,
                        t.name,
                        preconditions={"uid": t.uid, "resourceVersion": t.resource_version},
                        timeout=self._timeout,
                    )
                    evicted += 1
                except (gateway.NotFound, gateway.Conflict):
                    pass  # gone, or written since it was listed: kept
                self._cache.drop(t.name)
            self._unbacked.listed(runtime_id, token, len(metas) - evicted)
            if evicted:
                self._on_evicted(evicted)
        except gateway.GatewayError as e:
            log.warning(
                "evicting unbacked tombstones of runtime %s failed: %s",
                logs.bounded(runtime_id, 80),
                logs.bounded(str(e), 200),
            )

    def _write(
        self,
        key: records.Key,
        name: str,
        new: dict[str, Any],
        create: bool,
        old: Mapping[str, Any] | None,
        record: Mapping[str, Any],
        admitted: quota.Reservation,
    ) -> None:
        """The one write of every path: create ``new``, or replace the object with it (with
        the resourceVersion ``new`` carries), then remember it and tell ``on_written``
        (``old``: the replaced object's metadata) and commit the quota reservation; a write
        that fails cancels the reservation and raises."""
        where = str(new["metadata"]["namespace"])
        try:
            if create:
                written = self._kcp.create(
                    apitypes.RUNTIME_CONFIGMAPS, where, new, timeout=self._timeout
                )
            else:
                written = self._kcp.replace(
                    apitypes.RUNTIME_CONFIGMAPS, where, name, new, timeout=self._timeout
                )
            self._cache.remember(written)
        except gateway.NotFound:
            admitted.cancel()
            if create:  # no namespace (or no API) to create in: retrying here cannot help
                raise self._where.missing(key, where) from None
            raise
        except gateway.Forbidden as e:  # outside its namespace: the KCP's admission (policy.yaml)
            admitted.cancel()
            raise self._where.refused_by_kcp(key, where, e) from None
        except BaseException:
            admitted.cancel()
            raise
        try:
            self._tell(key, old, written.get("metadata"), record)
        finally:
            admitted.commit()

    def _tell(
        self,
        key: records.Key,
        old: Mapping[str, Any] | None,
        new: Mapping[str, Any] | None,
        record: Mapping[str, Any],
    ) -> None:
        """Tell ``on_written`` of a write (the written metadata from the write cache when the
        path did not keep it), before its quota reservation is committed: a footprint read
        (``listener.fleet.statesummary``) that counts the commit then also counts the change.
        An unbacked tombstone is not told (it is in no summary); a record that replaced one
        is told as a new key."""
        if records.is_unbacked(new):
            return
        if records.is_unbacked(old):
            old = None
        if self._on_written is not None:
            if new is None:
                cached = self._cache.get(records.object_name(key))
                new = None if cached is None else cached.metadata
            self._on_written(key.runtime_id, old, new, record)

    def _create_first(
        self,
        key: records.Key,
        name: str,
        record: Mapping[str, Any],
        incoming: changes.Version,
        trace: str = "",
    ) -> bool:
        """Create the object without reading first, for a key this worker does not know;
        False when the read path must decide: the record would not be accepted as a new key
        (``rules.may_create_unread``: too old for the retention rule, not newer than
        nothing; over the quota as a new record: it may be an update of a stored key) or the
        key is stored (409)."""
        if not rules.may_create_unread(incoming, self._now(), self._retention):
            return False  # stale only if the key is not stored: the read path decides
        tombstone_unbacked = rules.unbacked(None, bool(record["deleted"]))  # if the create succeeds
        new = records.body(
            record, self._where.home(key.watch), trace, self._owner(key), tombstone_unbacked
        )
        size = rules.annotate(new)
        try:
            admitted = self._reserve(key, tombstone_unbacked, None, size)
        except quota.Exceeded:
            return False  # a stored key's update may still fit: decide on a fresh read
        try:
            self._write(key, name, new, True, None, record, admitted)
        except gateway.Conflict:  # the read path reserves the update's growth instead
            self._on_conflict("create")
            return False
        if tombstone_unbacked:
            self._evict(key.runtime_id)
        return True

    def _write_from_cache(
        self,
        key: records.Key,
        name: str,
        entry: writecache.Entry,
        record: Mapping[str, Any],
        incoming: changes.Version,
        trace: str = "",
    ) -> bool:
        """Write without reading first when the remembered version is older (see
        ``listener.storage.writecache``); False when the read path must run."""
        if rules.verdict(entry.version, incoming, self._now(), self._retention) != "newer":
            return False
        if entry.metadata.get("namespace") != self._where.home(key.watch):
            self._cache.drop(name)  # the Watch stores elsewhere now: the read path decides
            return False
        tombstone_unbacked = rules.unbacked(entry.metadata, bool(record["deleted"]))
        new = records.updated(
            {"metadata": entry.metadata}, record, trace, self._owner(key), tombstone_unbacked
        )
        size = rules.annotate(new)
        try:
            admitted = self._reserve(
                key, tombstone_unbacked, rules.quota_size(entry.metadata), size
            )
        except quota.Exceeded:
            return False  # the remembered size may be outdated: decide on a fresh read
        try:
            self._write(key, name, new, False, entry.metadata, record, admitted)
        except (gateway.Conflict, gateway.NotFound):
            self._cache.drop(name)
            self._on_conflict("cached")
            return False
        return True

    def digest(self, runtime_id: str) -> list[changes.DigestItem]:
        """Every stored object of the runtime (metadata only), unordered. The same list
        refreshes this worker's view of the runtime's quota usage."""
        return self.survey(runtime_id)[0]

    def survey(
        self,
        runtime_id: str,
        watch: str | None = None,
    ) -> tuple[list[changes.DigestItem], listing.Survey]:
        """``digest`` (of the records of ``watch`` only, when given), and what its listing
        of all of the runtime's records says of the state summary's buckets (for
        ``listener.fleet.statesummary.Summaries.listed_all``) and of its quota usage."""
        items: list[changes.DigestItem] = []
        snap = self.usage.begin(runtime_id)
        survey = listing.Surveying()
        count = size = 0
        for metas, revision in listing.metadata_pages(
            self._kcp,
            self.namespace,
            f"{apitypes.RUNTIME_ID_LABEL}={runtime_id}",
            self._timeout,
            self._where.now(),
        ):
            survey.page(revision)
            for meta in metas:
                item = survey.add(meta)
                if records.is_unbacked(meta):
                    continue  # no record of the runtime's (rules: "Unbacked tombstones")
                count += 1
                size += rules.stored_size(meta)
                if item is not None and (watch is None or records.watch_of(meta) == watch):
                    items.append(item)
        self.usage.observe(runtime_id, rules.Used(count, size), snap)
        return items, survey.result()

    def home(self, watch: str) -> str:
        """The namespace the records of ``watch`` are stored in (``namespaces.Namespaces.home``;
        raises ``gateway.Unavailable`` for a Watch the listener's list does not hold)."""
        return self._where.home(watch)

    def watch_digest(self, runtime_id: str, watch: str) -> list[changes.DigestItem]:
        """The digest of the runtime's records of ``watch``: one label-selected listing in
        the Watch's storage namespace (never across namespaces), metadata only."""
        selector = f"{apitypes.RUNTIME_ID_LABEL}={runtime_id},{watches.WATCH_LABEL}={watch}"
        items: list[changes.DigestItem] = []
        for metas, _ in listing.metadata_pages(
            self._kcp, self.home(watch), selector, self._timeout
        ):
            items.extend(i for i in map(records.digest_item, metas) if i is not None)
        return items

    def _usage(self, runtime_id: str) -> rules.Used:
        """Records and bytes the runtime keeps (for ``quota.Usage``): its state summary's
        footprint (one read, whatever the records), else a metadata-only list."""
        if self._footprint is not None:
            held = self._footprint(runtime_id)
            if held is not None:
                self._on_count("summary")
                return held
        self._on_count("listing")
        return rules.usage_of(self._metadata(runtime_id))

    def _metadata(self, runtime_id: str) -> Iterator[dict[str, Any]]:
        """The metadata of every stored object of the runtime (paginated, label-selected)."""
        for metas, _ in listing.metadata_pages(
            self._kcp,
            self.namespace,
            f"{apitypes.RUNTIME_ID_LABEL}={runtime_id}",
            self._timeout,
            self._where.now(),
        ):
            yield from metas

    def _owner(self, key: records.Key) -> records.Owner | None:
        return self._owner_of(key.runtime_id)

    def ping(self) -> None:
        """One cheap authorized call (for /readyz); raises a ``gateway.GatewayError``."""
        self._kcp.list(
            apitypes.RUNTIME_CONFIGMAPS,
            self.namespace,
            limit=1,
            metadata_only=True,
            timeout=self._timeout,
        )
