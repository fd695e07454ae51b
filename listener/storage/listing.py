"""Listings of a runtime's records in the KCP (metadata only), and what a full one found.

``metadata_pages`` is the one way the listener lists records: label-selected, paginated
(``LIST_PAGE`` objects a call), metadata only; across namespaces when it knows where each
Watch stores (``homes``, ``listener.storage.namespaces``), keeping only objects in the
namespace their Watch stores in (``records.placed``), so a record written elsewhere, by
whoever can write there, is never counted or answered. It serves the state digest and the
quota usage (``listener.storage.store``) and the state summary's listings
(``listener.fleet.summaryobject``). ``Surveying`` folds such a listing, page by page, into a
``Survey``: the state summary's buckets and the objects and bytes each holds. What it
touches: one list call per page (``gateway.Kube.list``); the folding is pure.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any, NamedTuple

from listener.storage import records, rules
from tether.base import numbers
from tether.kube import apitypes, gateway
from tether.wire import changes, statehash

LIST_PAGE = 500


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
        self.held.add(statehash.bucket_of(item["namespace"], item["name"]), rules.stored_size(meta))
        return item

    def result(self) -> Survey:
        return Survey(self.folded, self.held, self.revision)


def metadata_pages(
    kcp: gateway.Kube,
    namespace: str,
    selector: str,
    timeout: float,
    homes: Mapping[str, str] | None = None,
) -> Iterator[tuple[list[dict[str, Any]], int]]:
    """Pages of metadata of the records ``selector`` picks, each with the listing's KCP
    revision (also a page without items: an empty listing has a revision too). Without
    ``homes``: in ``namespace``; with: across namespaces, only objects where their Watch
    stores (``records.placed``; a legacy record in ``namespace``)."""
    token = ""
    while True:
        page = kcp.list(
            apitypes.RUNTIME_CONFIGMAPS,
            namespace if homes is None else None,
            label_selector=selector,
            limit=LIST_PAGE,
            continue_token=token or None,
            metadata_only=True,
            timeout=timeout,
        )
        pmeta = page.get("metadata") or {}
        metas = [obj.get("metadata") or {} for obj in page.get("items") or []]
        yield (
            [m for m in metas if homes is None or records.placed(m, homes, namespace)],
            numbers.ascii_int(pmeta.get("resourceVersion"), 32) or 0,
        )
        token = pmeta.get("continue") or ""
        if not token:
            return
