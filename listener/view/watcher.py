"""List, then watch from the listing's resourceVersion, into a ``store.Kind``.

The loop of one watched resource: a paginated listing replaces what the kind holds and marks
it synced; a watch from the listing's resourceVersion (bookmarks asked for) applies each
event and moves the version on (a bookmark's too); when the server ends a watch (its
timeout) the next starts from the last version, still synced. A 410 (the version is older
than the server's history) relists at once; any other failure (a broken connection, the KCP
unreachable, an event over the size bound) marks the kind not synced, so workers read the
KCP directly while it is down, and relists after a backoff (0.5 s doubling to 30 s, jittered).
A connection that goes silent without breaking (a partition) is given up after the watch's
timeout plus ``SILENCE`` (75 s): the view is then at most that stale, within the staleness
the listener accepts while the KCP is unreachable (``OUTAGE_CACHE_SECONDS``, 900 s).
A revocation (a Kyma CR deleted or relabelled) is thus either in the view within the watch's
latency or the view is not answered at all.
"""

from __future__ import annotations

import logging
import random
import threading
from collections.abc import Callable
from typing import Any, NamedTuple

from listener.view import store
from tether.base import logs
from tether.kube import gateway

log = logging.getLogger(__name__)
# the server ends each watch after this (the next one continues from its version); a
# connection silent longer than this plus SILENCE (a network partition, no RST) is broken
WATCH_SECONDS = 60
SILENCE = 15.0
PAGE = 500
BACKOFF_MIN, BACKOFF_MAX = 0.5, 30.0


class Source(NamedTuple):
    """What one watcher lists and watches."""

    resource: gateway.Resource
    namespace: str | None  # None: across all namespaces
    label_selector: str | None = None
    metadata_only: bool = False  # PartialObjectMetadata: the objects' metadata only


class Hooks(NamedTuple):
    restarted: Callable[[str, str], None] = lambda kind, reason: None  # a relist, why
    synced: Callable[[str, bool], None] = lambda kind, synced: None


class Watcher:
    def __init__(
        self,
        kcp: gateway.Kube,
        source: Source,
        kind: store.Kind,
        *,
        timeout: float,
        max_event_bytes: int,
        hooks: Hooks | None = None,
        watch_seconds: int = WATCH_SECONDS,
    ) -> None:
        self._kcp, self._source, self._kind = kcp, source, kind
        self._timeout, self._max_event = timeout, max_event_bytes
        self._hooks, self._watch_seconds = hooks or Hooks(), watch_seconds
        self.stop = threading.Event()
        self.resource_version = ""  # the last one seen (tests start a watch from an old one)

    def _mark(self, synced: bool) -> None:
        if self._kind.synced != synced:
            self._kind.synced = synced
            self._hooks.synced(self._kind.name, synced)

    def list(self) -> str:
        """Replace the kind's objects by a listing; the listing's resourceVersion."""
        src, token, rv = self._source, "", ""
        listing = store.Listing(self._kind)  # entries made page by page: one page parsed at most
        while True:
            page = self._kcp.list(
                src.resource,
                src.namespace,
                label_selector=src.label_selector,
                limit=PAGE,
                continue_token=token or None,
                metadata_only=src.metadata_only,
                timeout=self._timeout,
            )
            listing.add(page.get("items") or [])
            meta = page.get("metadata") or {}
            rv = str(meta.get("resourceVersion") or rv)
            token = str(meta.get("continue") or "")
            del page
            if not token:
                break
        listing.done()
        return rv

    def watch_once(self, rv: str) -> str:
        """One watch from ``rv`` until the server ends it; the last resourceVersion seen.
        Raises ``gateway.Gone`` (relist) or another ``gateway.GatewayError``."""
        src = self._source
        for event in self._kcp.watch(
            src.resource,
            src.namespace,
            resource_version=rv,
            timeout_seconds=self._watch_seconds,
            label_selector=src.label_selector,
            max_event_bytes=self._max_event,
            read_timeout=self._watch_seconds + SILENCE,
            stop=self.stop,
            metadata_only=src.metadata_only,
        ):
            obj: dict[str, Any] = event["object"]
            version = (obj.get("metadata") or {}).get("resourceVersion")
            if event["type"] != "BOOKMARK":
                self._kind.apply(event["type"], obj)
            if isinstance(version, str) and version:
                rv = version
            self.resource_version = rv
        return rv

    def run(self) -> None:
        """List and watch until ``stop`` is set."""
        backoff = BACKOFF_MIN
        while not self.stop.is_set():
            reason = "error"
            try:
                rv = self.list()
                self.resource_version = rv
                self._mark(True)
                backoff = BACKOFF_MIN
                while not self.stop.is_set():
                    rv = self.watch_once(rv)
            except gateway.Gone:
                reason = "gone"
            except gateway.GatewayError as e:
                log.warning(
                    "view of %s: %s; read directly until relisted",
                    self._kind.name,
                    logs.bounded(e, 300),
                )
            except Exception as e:  # noqa: BLE001 - the view never dies of one bad event
                log.warning("view of %s failed: %s", self._kind.name, logs.bounded(e, 300))
            if self.stop.is_set():
                break
            self._mark(False)
            self._hooks.restarted(self._kind.name, reason)
            if reason != "gone":
                self.stop.wait(backoff * random.uniform(0.5, 1.0))
                backoff = min(BACKOFF_MAX, backoff * 2)
        self._mark(False)

    def start(self) -> threading.Thread:
        t = threading.Thread(target=self.run, name=f"view-{self._kind.name}", daemon=True)
        t.start()
        return t
