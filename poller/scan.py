"""Listing the runtime's watched ConfigMaps page by page (the apiserver I/O).

One ``list`` across all namespaces with ``limit``/``continue``: the watched filter goes to
the apiserver (a field selector excluding the ignored namespaces, the label selector
unchanged), so only watched objects travel and memory holds one page at a time. Pages of
one listing are one consistent snapshot; its collection resourceVersion (``Page.resource_version``,
the same on every page) is what tombstones carry. A continue token that expired (etcd
compacted its revision) gives 410 Gone: ``Gone`` is raised and the caller restarts.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any, NamedTuple

import urllib3
from kubernetes import client

from common import filters


class Page(NamedTuple):
    items: list[dict[str, Any]]
    continue_token: str
    resource_version: str


class ListError(RuntimeError):
    """The runtime's API could not be listed (the run fails; the next one retries)."""


class Gone(ListError):
    """410 Gone: the listing's snapshot expired; restart it."""


def field_selector(flt: filters.ConfigMapFilter) -> str:
    """Excludes the ignored namespaces server-side (pure)."""
    return ",".join(f"metadata.namespace!={ns}" for ns in sorted(flt.ignored_namespaces))


class Lister:
    """Pages of ConfigMaps as plain JSON dicts (camelCase, as served)."""

    def __init__(self, api: client.ApiClient, flt: filters.ConfigMapFilter, *, page_size: int,
                 timeout: float, on_request: Callable[[], None] = lambda: None) -> None:
        self._core = client.CoreV1Api(api)
        self._filter = flt
        self._page_size = page_size
        self._timeout = timeout
        self._on_request = on_request

    def page(self, token: str = "") -> Page:
        kwargs: dict[str, Any] = {"limit": self._page_size, "_preload_content": False,
                                  "_request_timeout": self._timeout}
        if token:
            kwargs["_continue"] = token
        if fs := field_selector(self._filter):
            kwargs["field_selector"] = fs
        if self._filter.selector_text:
            kwargs["label_selector"] = self._filter.selector_text
        self._on_request()
        try:
            resp: Any = self._core.list_config_map_for_all_namespaces(**kwargs)
            try:
                doc = json.loads(resp.data)
            finally:
                resp.release_conn()
        except client.ApiException as e:
            if e.status == 410:
                raise Gone("list configmaps: 410 Gone (continue token expired)") from None
            raise ListError(f"list configmaps: HTTP {e.status}") from None
        except (urllib3.exceptions.HTTPError, OSError, ValueError) as e:
            raise ListError(f"list configmaps: {type(e).__name__}") from None
        meta = doc.get("metadata") or {}
        return Page(list(doc.get("items") or []), str(meta.get("continue") or ""),
                    str(meta.get("resourceVersion") or ""))

    def pages(self) -> Iterator[Page]:
        """Every page of one listing (one snapshot); raises ``Gone``/``ListError``."""
        token = ""
        while True:
            page = self.page(token)
            yield page
            if not page.continue_token:
                return
            token = page.continue_token
