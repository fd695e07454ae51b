"""Persistence in the KCP: change records as ``RuntimeConfigMap`` objects (the I/O).

``persist`` applies the ordering rule (``common.changes.compare``) against the stored
object and writes only a newer record, with the stored object's resourceVersion
(optimistic concurrency): when another replica wrote in between, the API answers 409 and
the record is compared again with the fresh object. An update of an object this worker
has seen recently skips the read (``listener.writecache``). A call returns only after the
API server has acknowledged the write (stored in etcd), so "persisted" means durable.

Errors: ``Unavailable`` when the KCP API cannot be used (down, timing out, 5xx, 429, or
refusing this listener; the client gets 503 and retries), ``Rejected`` when the API
refuses the object itself (the client gets 400).
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Callable, Mapping
from typing import Any, Literal

import urllib3
from kubernetes import client
from kubernetes.client import exceptions

from common import changes, logs
from listener import records, writecache

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


def _message(e: exceptions.ApiException) -> str:
    try:
        doc = json.loads(e.body or "")
        return logs.bounded(doc.get("message", ""), 300)
    except (ValueError, AttributeError):
        return ""


class Store:
    def __init__(self, api: client.ApiClient, namespace: str, timeout: float,
                 cache_entries: int = 10_000,
                 on_conflict: Callable[[str], None] = lambda path: None) -> None:
        self._api = api
        self._objects = client.CustomObjectsApi(api)
        self.namespace = namespace
        self._timeout = timeout
        self._cache = writecache.WriteCache(cache_entries)
        self._on_conflict = on_conflict  # metric hook: "cached" or "read" write lost a race

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
            verdict = changes.compare(
                None if stored is None else records.stored_version(stored), incoming)
            if verdict != "newer":
                return verdict
            try:
                if stored is None:
                    written: Any = self._objects.create_namespaced_custom_object(
                        records.GROUP, records.VERSION, self.namespace, records.PLURAL,
                        records.body(record, self.namespace), _request_timeout=self._timeout)
                else:
                    written = self._objects.replace_namespaced_custom_object(
                        records.GROUP, records.VERSION, self.namespace, records.PLURAL, name,
                        records.updated(stored, record), _request_timeout=self._timeout)
                self._cache.remember(written)
                return "persisted"
            except exceptions.ApiException as e:
                if e.status != 409:
                    raise
                self._on_conflict("read")
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
        try:
            written: Any = self._objects.replace_namespaced_custom_object(
                records.GROUP, records.VERSION, self.namespace, records.PLURAL, name,
                records.updated({"metadata": entry.metadata}, record),
                _request_timeout=self._timeout)
        except exceptions.ApiException as e:
            if e.status not in (404, 409):
                raise
            self._cache.drop(name)
            self._on_conflict("cached")
            return False
        self._cache.remember(written)
        return True

    def digest(self, runtime_id: str) -> list[records.DigestItem]:
        """Every stored object of the runtime (metadata only), unordered."""
        items: list[records.DigestItem] = []
        token = ""
        try:
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
                    item = records.digest_item(obj.get("metadata") or {})
                    if item is not None:
                        items.append(item)
                token = (doc.get("metadata") or {}).get("continue") or ""
                if not token:
                    return items
        except (exceptions.ApiException, urllib3.exceptions.HTTPError, OSError) as e:
            raise unavailable_or_raise(e, "digest") from None

    def _raw_get(self, path: str, query: list[tuple[str, str]], accept: str) -> dict[str, Any]:
        method, url, headers, body, post = self._api.param_serialize(
            "GET", path, query_params=query, header_params={"Accept": accept},
            auth_settings=["BearerToken"])
        resp = self._api.call_api(method, url, headers, _request_timeout=self._timeout)
        resp.read()
        if not 200 <= resp.status <= 299:
            raise exceptions.ApiException(http_resp=resp)
        doc: dict[str, Any] = json.loads(resp.data or b"{}")
        return doc

    def ping(self) -> None:
        """One cheap authorized call (for /readyz); raises ``Unavailable``."""
        try:
            self._raw_get(
                f"/apis/{records.GROUP}/{records.VERSION}/namespaces/{self.namespace}/"
                f"{records.PLURAL}", [("limit", "1")], METADATA_LIST)
        except (exceptions.ApiException, urllib3.exceptions.HTTPError, OSError) as e:
            raise unavailable_or_raise(e, "ping") from None
