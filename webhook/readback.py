"""Reading the persisted object back from the runtime's API (level-triggered forwarding).

``judge`` (pure) decides from what the API returned: a live record when the object's
resourceVersion moved past the admission's old one, a tombstone when it is gone after an
UPDATE/DELETE, ``wait`` while the write is not yet visible, and a drop once the wait is
over (a CREATE that never appeared or a write that never landed was rejected after this
webhook: not a change). ``Reader`` does the GETs with the kubernetes client.
"""

from __future__ import annotations

import json
import urllib.parse
from collections.abc import Mapping
from typing import Any, Literal, NamedTuple

import urllib3
from kubernetes import client

from webhook import keyqueue

Result = Literal["live", "tombstone", "wait", "rejected", "unchanged"]


class Judgement(NamedTuple):
    result: Result
    obj: Mapping[str, Any] | None = None


class ReadError(RuntimeError):
    """The runtime API could not be read (retried by the caller)."""


def judge(item: keyqueue.Item, found: Mapping[str, Any] | None, expired: bool) -> Judgement:
    """What to do with ``item`` given the object read back (None: absent)."""
    if found is not None:
        rv = str((found.get("metadata") or {}).get("resourceVersion") or "")
        if rv != item.old_resource_version:
            return Judgement("live", found)
        return Judgement("unchanged" if expired else "wait")
    if item.operation == "CREATE":
        return Judgement("rejected" if expired else "wait")
    return Judgement("tombstone")


class Reader:
    """GETs ConfigMaps as plain JSON dicts (camelCase, as served).

    Uses the ApiClient's own connection pool, TLS and credentials (client certificate or
    bearer token, refreshed by the client's hook) but skips its typed layer: the read-back
    runs in the webhook's worker processes, next to the admission handler, so its CPU cost
    per object matters (about half of the typed call's)."""

    def __init__(self, api: client.ApiClient, timeout: float = 5.0) -> None:
        self._api = api
        self._host = str(api.configuration.host).rstrip("/")
        self._timeout = timeout

    def _get(self, path: str, what: str) -> tuple[int, dict[str, Any]]:
        headers = {"Accept": "application/json"}
        for auth in self._api.configuration.auth_settings().values():
            if auth.get("in") == "header" and auth.get("value"):
                headers[str(auth["key"])] = str(auth["value"])
        try:
            resp = self._api.rest_client.pool_manager.request(
                "GET", self._host + path, headers=headers, timeout=self._timeout, retries=False)
        except (urllib3.exceptions.HTTPError, OSError) as e:
            raise ReadError(f"{what}: {type(e).__name__}") from None
        if resp.status == 404:
            return 404, {}
        if resp.status != 200:
            raise ReadError(f"{what}: HTTP {resp.status}")
        try:
            doc = json.loads(resp.data)
        except ValueError:
            raise ReadError(f"{what}: response is not JSON") from None
        if not isinstance(doc, dict):
            raise ReadError(f"{what}: response is not an object")
        return 200, doc

    def get(self, namespace: str, name: str) -> dict[str, Any] | None:
        path = f"/api/v1/namespaces/{_q(namespace)}/configmaps/{_q(name)}"
        status, doc = self._get(path, f"GET configmap {namespace}/{name}")
        return None if status == 404 else doc

    def absent_at(self, namespace: str, name: str) -> tuple[str, dict[str, Any] | None]:
        """A collection resourceVersion read now, and the object if it exists after all."""
        query = urllib.parse.urlencode({"fieldSelector": f"metadata.name={name}"})
        path = f"/api/v1/namespaces/{_q(namespace)}/configmaps?{query}"
        status, doc = self._get(path, f"LIST configmaps {namespace} name={name}")
        if status == 404:
            raise ReadError(f"LIST configmaps {namespace}: HTTP 404")
        items = doc.get("items") or []
        rv = str((doc.get("metadata") or {}).get("resourceVersion") or "")
        return rv, (items[0] if items else None)


def _q(segment: str) -> str:
    return urllib.parse.quote(segment, safe="")
