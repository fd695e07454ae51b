"""Reading the persisted object back from the runtime's API (level-triggered forwarding).

``judge`` (pure) decides from what the API returned: a live record when the object's
resourceVersion moved past the admission's old one, a tombstone when it is gone after an
UPDATE/DELETE, ``wait`` while the write is not yet visible, and a drop once the wait is
over (a CREATE that never appeared or a write that never landed was rejected after this
webhook: not a change). ``Reader`` does the GETs with the kubernetes client.
"""

from __future__ import annotations

import json
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
    """GETs ConfigMaps as plain JSON dicts (camelCase, as served)."""

    def __init__(self, api: client.ApiClient, timeout: float = 5.0) -> None:
        self._core = client.CoreV1Api(api)
        self._timeout = timeout

    def get(self, namespace: str, name: str) -> dict[str, Any] | None:
        try:
            resp = self._core.read_namespaced_config_map(
                name, namespace, _preload_content=False, _request_timeout=self._timeout)
            return _json(resp)
        except client.ApiException as e:
            if e.status == 404:
                return None
            raise ReadError(f"GET configmap {namespace}/{name}: HTTP {e.status}") from None
        except (urllib3.exceptions.HTTPError, OSError) as e:
            raise ReadError(f"GET configmap {namespace}/{name}: {type(e).__name__}") from None

    def absent_at(self, namespace: str, name: str) -> tuple[str, dict[str, Any] | None]:
        """A collection resourceVersion read now, and the object if it exists after all."""
        try:
            resp = self._core.list_namespaced_config_map(
                namespace, field_selector=f"metadata.name={name}", _preload_content=False,
                _request_timeout=self._timeout)
            doc = _json(resp)
        except client.ApiException as e:
            raise ReadError(f"LIST configmaps {namespace} name={name}: HTTP {e.status}") from None
        except (urllib3.exceptions.HTTPError, OSError) as e:
            raise ReadError(f"LIST configmaps {namespace}: {type(e).__name__}") from None
        items = doc.get("items") or []
        rv = str((doc.get("metadata") or {}).get("resourceVersion") or "")
        return rv, (items[0] if items else None)


def _json(resp: Any) -> dict[str, Any]:
    try:
        doc: dict[str, Any] = json.loads(resp.data)
    finally:
        resp.release_conn()
    return doc
