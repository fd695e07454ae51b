"""Listing the runtime's watched ConfigMaps page by page (the apiserver I/O).

One ``list`` across all namespaces with ``limit``/``continue``: the watched filter goes to
the apiserver (a field selector excluding the ignored namespaces, the label selector
unchanged), so only watched objects travel and memory holds one page at a time. Pages of
one listing are one consistent snapshot; its collection resourceVersion (``Page.resource_version``,
the same on every page) is what tombstones carry. A continue token that expired (etcd
compacted its revision) gives 410 Gone: ``Gone`` is raised and the caller restarts.

``identity`` reads the runtime's identity for the listener's epochs (``listener.fleet.epochs``):
the UID of the ``kube-system`` Namespace, which a rebuilt cluster has anew.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from typing import Any, NamedTuple

from tether.kube import gateway
from tether.wire import filters, watchkinds

log = logging.getLogger(__name__)
IDENTITY_NAMESPACE = "kube-system"


class Page(NamedTuple):
    items: list[dict[str, Any]]
    continue_token: str
    resource_version: str


class ListError(RuntimeError):
    """The runtime's API could not be listed (the run fails; the next one retries)."""


class Gone(ListError):
    """410 Gone: the listing's snapshot expired; restart it."""


class Unserved(ListError):
    """A Watch's resource cannot be listed here: ``reason`` ``unserved`` (404: the kind is
    not served, its CRD missing) or ``forbidden`` (403: the poller's RBAC does not allow it).
    The Watch is skipped, the others run (``poller.watchrun``)."""

    def __init__(self, message: str, reason: str) -> None:
        super().__init__(message)
        self.reason = reason


def resource_pages(
    skr: gateway.Kube,
    res: gateway.Resource,
    namespace: str | None,
    *,
    field_selector: str,
    label_selector: str,
    page_size: int,
    timeout: float,
    on_request: Callable[[], None] = lambda: None,
) -> Iterator[Page]:
    """Every page of one listing of any resource (a Watch's; ``namespace`` None: across all
    namespaces); raises ``Gone``, ``Unserved`` or ``ListError``."""
    token = ""
    while True:
        on_request()
        try:
            doc = skr.list(
                res,
                namespace,
                limit=page_size,
                continue_token=token or None,
                field_selector=field_selector or None,
                label_selector=label_selector or None,
                timeout=timeout,
            )
        except gateway.Gone as e:
            raise Gone(f"list {res.plural}: 410 Gone (continue token expired)") from e
        except gateway.NotFound as e:
            raise Unserved(
                f"list {res.api_version} {res.plural}: not served (404)", "unserved"
            ) from e
        except gateway.Forbidden as e:
            raise Unserved(
                f"list {res.api_version} {res.plural}: forbidden ({e})", "forbidden"
            ) from e
        except gateway.GatewayError as e:
            raise ListError(str(e)) from e
        meta = doc.get("metadata") or {}
        # each item with its own kind (a built-in list names it once): checked per Watch
        page = Page(
            watchkinds.stamp_items(doc),
            str(meta.get("continue") or ""),
            str(meta.get("resourceVersion") or ""),
        )
        yield page
        if not page.continue_token:
            return
        token = page.continue_token


def field_selector(flt: filters.ConfigMapFilter) -> str:
    """Excludes the ignored namespaces server-side (pure)."""
    return ",".join(f"metadata.namespace!={ns}" for ns in sorted(flt.ignored_namespaces))


class Lister:
    """Pages of ConfigMaps as plain JSON dicts (camelCase, as served)."""

    def __init__(
        self,
        skr: gateway.Kube,
        flt: filters.ConfigMapFilter,
        *,
        page_size: int,
        timeout: float,
        on_request: Callable[[], None] = lambda: None,
    ) -> None:
        self._skr = skr
        self._filter = flt
        self._page_size = page_size
        self._timeout = timeout
        self._on_request = on_request
        self._identity_failed = False

    def page(self, token: str = "", metadata_only: bool = False) -> Page:
        """One page; ``metadata_only``: a ``PartialObjectMetadataList`` (no data)."""
        self._on_request()
        try:
            doc = self._skr.list(
                gateway.CONFIGMAPS,
                None,
                limit=self._page_size,
                continue_token=token or None,
                field_selector=field_selector(self._filter) or None,
                label_selector=self._filter.selector_text or None,
                metadata_only=metadata_only,
                timeout=self._timeout,
            )
        except gateway.Gone as e:
            raise Gone("list configmaps: 410 Gone (continue token expired)") from e
        except gateway.GatewayError as e:
            raise ListError(str(e)) from e
        meta = doc.get("metadata") or {}
        return Page(
            list(doc.get("items") or []),
            str(meta.get("continue") or ""),
            str(meta.get("resourceVersion") or ""),
        )

    def identity(self) -> str:
        """The runtime's identity (the ``kube-system`` Namespace's UID); "" when it cannot be
        read (then only a listing below the stored records starts a new epoch)."""
        try:
            ns = self._skr.get(gateway.NAMESPACES, None, IDENTITY_NAMESPACE, timeout=self._timeout)
        except gateway.GatewayError as e:
            if not self._identity_failed:
                log.warning(
                    "cannot read the %s Namespace's uid (the runtime's identity for "
                    "epochs; needs get on namespaces/%s): %s",
                    IDENTITY_NAMESPACE,
                    IDENTITY_NAMESPACE,
                    e,
                )
            self._identity_failed = True
            return ""
        self._identity_failed = False
        uid = (ns.get("metadata") or {}).get("uid")
        return uid if isinstance(uid, str) else ""

    def pages(self, metadata_only: bool = False) -> Iterator[Page]:
        """Every page of one listing (one snapshot); raises ``Gone``/``ListError``."""
        token = ""
        while True:
            page = self.page(token, metadata_only)
            yield page
            if not page.continue_token:
                return
            token = page.continue_token

    def watch_pages(
        self,
        res: gateway.Resource,
        namespace: str | None,
        *,
        field_selector: str,
        label_selector: str,
    ) -> Iterator[Page]:
        """Every page of one listing of a Watch's resource (``resource_pages``)."""
        return resource_pages(
            self._skr,
            res,
            namespace,
            field_selector=field_selector,
            label_selector=label_selector,
            page_size=self._page_size,
            timeout=self._timeout,
            on_request=self._on_request,
        )

    def get(self, namespace: str, name: str) -> dict[str, Any] | None:
        """One ConfigMap with its data (None: gone); raises ``ListError``."""
        self._on_request()
        try:
            return self._skr.get_or_none(gateway.CONFIGMAPS, namespace, name, timeout=self._timeout)
        except gateway.GatewayError as e:
            raise ListError(str(e)) from e
