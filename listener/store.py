"""Persistence in the KCP: change records as ``RuntimeConfigMap`` objects (the I/O).

``persist`` applies the ordering rule (``common.changes.compare``) against the stored
object and writes only a newer record, with the stored object's resourceVersion
(optimistic concurrency): when another replica wrote in between, the API answers 409 and
the record is compared again with the fresh object. An update of an object this worker
has seen recently skips the read (``listener.writecache``). A call returns only after the
API server has acknowledged the write (stored in etcd), so "persisted" means durable.

Storage limits (``listener.quota``, ``listener.retention``): a write that does not fit the
runtime's quota raises ``quota.Exceeded`` (the client gets 413); a record for a key that is
not stored whose ``observedAt`` is older than the tombstone retention is ``stale`` (it
might be older than a pruned tombstone). Every written object carries its size annotation.

Errors: ``Unavailable`` when the KCP API cannot be used (down, timing out, 5xx, 429, or
refusing this listener; the client gets 503 and retries), ``Rejected`` when the API
refuses the object itself (the client gets 400).
"""

from __future__ import annotations

import datetime
import json
import random
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any, Literal

import urllib3
from kubernetes import client
from kubernetes.client import exceptions

from common import changes, logs
from listener import quota, records, retention, writecache

Outcome = Literal["persisted", "duplicate", "stale"]
MAX_ATTEMPTS = 12
METADATA_LIST = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1"
LIST_PAGE = 500


class Unavailable(Exception):
    """The KCP API could not be used; retry later."""


class Rejected(Exception):
    """The KCP API refused the object (e.g. too large for etcd); the message is bounded."""


def unavailable_or_raise(e: Exception, what: str) -> Exception:
    """The exception to raise for a failed API call."""
    if isinstance(e, exceptions.ApiException):
        if e.status in (400, 413, 422):
            return Rejected(f"{what}: KCP API answered {e.status}: {_message(e)}")
        return Unavailable(f"{what}: KCP API answered {e.status}")
    if isinstance(e, urllib3.exceptions.HTTPError | OSError):
        return Unavailable(f"{what}: KCP API unreachable ({type(e).__name__})")
    return e


def raw_get(api: client.ApiClient, path: str, query: list[tuple[str, str]], accept: str,
            timeout: float) -> dict[str, Any]:
    """A GET with a chosen ``Accept`` (e.g. ``METADATA_LIST``), the JSON answer as a dict."""
    method, url, headers, _, _ = api.param_serialize(
        "GET", path, query_params=query, header_params={"Accept": accept},
        auth_settings=["BearerToken"])
    resp = api.call_api(method, url, headers, _request_timeout=timeout)
    resp.read()
    if not 200 <= resp.status <= 299:
        raise exceptions.ApiException(http_resp=resp)
    doc: dict[str, Any] = json.loads(resp.data or b"{}")
    return doc


def _message(e: exceptions.ApiException) -> str:
    try:
        doc = json.loads(e.body or "")
        return logs.bounded(doc.get("message", ""), 300)
    except (ValueError, AttributeError):
        return ""


NO_QUOTA = quota.Limits(10**12, 10**15)


class Store:
    def __init__(self, api: client.ApiClient, namespace: str, timeout: float,
                 cache_entries: int = 10_000,
                 on_conflict: Callable[[str], None] = lambda path: None, *,
                 limits: quota.Limits = NO_QUOTA, quota_ttl: float = 10.0,
                 tombstone_retention: float = 7 * 86400.0,
                 now: Callable[[], datetime.datetime] = lambda: datetime.datetime.now(
                     datetime.UTC)) -> None:
        self._api = api
        self._objects = client.CustomObjectsApi(api)
        self.namespace = namespace
        self._timeout = timeout
        self._cache = writecache.WriteCache(cache_entries)
        self._on_conflict = on_conflict  # metric hook: "cached" or "read" write lost a race
        self.usage = quota.Usage(limits, quota_ttl, self._usage)
        self._retention = tombstone_retention
        self._now = now

    # -- records -----------------------------------------------------------------------------

    def _get(self, name: str) -> dict[str, Any] | None:
        try:
            obj: Any = self._objects.get_namespaced_custom_object(
                records.GROUP, records.VERSION, self.namespace, records.PLURAL, name,
                _request_timeout=self._timeout)
            return dict(obj)
        except exceptions.ApiException as e:
            if e.status == 404:
                return None
            raise

    def persist(self, record: Mapping[str, Any]) -> Outcome:
        """Store ``record`` if it is newer than the stored one; the outcome."""
        try:
            return self._persist(record)
        except (exceptions.ApiException, urllib3.exceptions.HTTPError, OSError) as e:
            raise unavailable_or_raise(e, "persist") from None

    def _persist(self, record: Mapping[str, Any]) -> Outcome:
        key = records.key_of(record)
        name = records.object_name(key)
        incoming = changes.version_of(record)
        if self._write_from_cache(name, record, incoming):
            return "persisted"
        for attempt in range(MAX_ATTEMPTS):
            stored = self._get(name)
            if stored is not None and not records.matches(stored, key):
                raise Rejected("object name collision; refusing to overwrite another key")
            if stored is not None:
                self._cache.remember(stored)
            elif retention.too_old_for_new_key(incoming.observed_at, self._now(),
                                               self._retention):
                return "stale"  # maybe older than a pruned tombstone (listener.retention)
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
                    written: Any = self._objects.create_namespaced_custom_object(
                        records.GROUP, records.VERSION, self.namespace, records.PLURAL,
                        new, _request_timeout=self._timeout)
                else:
                    written = self._objects.replace_namespaced_custom_object(
                        records.GROUP, records.VERSION, self.namespace, records.PLURAL, name,
                        new, _request_timeout=self._timeout)
                admitted.commit()
                self._cache.remember(written)
                return "persisted"
            except exceptions.ApiException as e:
                admitted.cancel()
                # 409: another writer won; 404 on an update: the object was deleted (a
                # pruned tombstone, an orphan's records) since it was read
                if e.status != 409 and not (e.status == 404 and stored is not None):
                    raise
                self._on_conflict("read")
            except BaseException:
                admitted.cancel()
                raise
            # another writer won: back off a little (jittered) and compare again
            time.sleep(random.uniform(0, 0.005 * (attempt + 1)))
        raise Unavailable("persist: too many concurrent writers on one object")

    def _write_from_cache(self, name: str, record: Mapping[str, Any],
                          incoming: changes.Version) -> bool:
        """Write without reading first when the remembered version is older (see
        ``listener.writecache``); False when the normal path must run."""
        entry = self._cache.get(name)
        if entry is None or changes.compare(entry.version, incoming) != "newer":
            return False
        new = records.updated({"metadata": entry.metadata}, record)
        size = quota.annotate(new)
        try:
            admitted = self.usage.reserve(str(record["runtimeId"]),
                                          quota.stored_size(entry.metadata), size)
        except quota.Exceeded:
            return False  # the remembered size may be outdated: decide on a fresh read
        try:
            written: Any = self._objects.replace_namespaced_custom_object(
                records.GROUP, records.VERSION, self.namespace, records.PLURAL, name,
                new, _request_timeout=self._timeout)
        except exceptions.ApiException as e:
            admitted.cancel()
            if e.status not in (404, 409):
                raise
            self._cache.drop(name)
            self._on_conflict("cached")
            return False
        except BaseException:
            admitted.cancel()
            raise
        admitted.commit()
        self._cache.remember(written)
        return True

    def digest(self, runtime_id: str) -> list[changes.DigestItem]:
        """Every stored object of the runtime (metadata only), unordered. The same list
        refreshes this worker's view of the runtime's quota usage."""
        items: list[changes.DigestItem] = []
        snap = self.usage.begin(runtime_id)
        count = size = 0
        try:
            for meta in self._metadata(runtime_id):
                count += 1
                size += quota.stored_size(meta)
                item = records.digest_item(meta)
                if item is not None:
                    items.append(item)
        except (exceptions.ApiException, urllib3.exceptions.HTTPError, OSError) as e:
            raise unavailable_or_raise(e, "digest") from None
        self.usage.observe(runtime_id, quota.Used(count, size), snap)
        return items

    def _usage(self, runtime_id: str) -> quota.Used:
        """Records and bytes the runtime keeps (a metadata-only list; for ``quota.Usage``)."""
        return quota.usage_of(self._metadata(runtime_id))

    def _metadata(self, runtime_id: str) -> Iterator[dict[str, Any]]:
        """The metadata of every stored object of the runtime (paginated, label-selected)."""
        token = ""
        while True:
            query: list[tuple[str, str]] = [
                ("labelSelector", f"{records.RUNTIME_LABEL}={runtime_id}"),
                ("limit", str(LIST_PAGE))]
            if token:
                query.append(("continue", token))
            doc = self._raw_get(
                f"/apis/{records.GROUP}/{records.VERSION}/namespaces/{self.namespace}/"
                f"{records.PLURAL}", query, METADATA_LIST)
            for obj in doc.get("items") or []:
                yield obj.get("metadata") or {}
            token = (doc.get("metadata") or {}).get("continue") or ""
            if not token:
                return

    def _raw_get(self, path: str, query: list[tuple[str, str]], accept: str) -> dict[str, Any]:
        return raw_get(self._api, path, query, accept, self._timeout)

    def ping(self) -> None:
        """One cheap authorized call (for /readyz); raises ``Unavailable``."""
        try:
            self._raw_get(
                f"/apis/{records.GROUP}/{records.VERSION}/namespaces/{self.namespace}/"
                f"{records.PLURAL}", [("limit", "1")], METADATA_LIST)
        except (exceptions.ApiException, urllib3.exceptions.HTTPError, OSError) as e:
            raise unavailable_or_raise(e, "ping") from None
