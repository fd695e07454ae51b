"""Storage namespaces: where the records of each Watch are written, and which namespaces the
listener refuses to write in (decisions on the listener's Watch list; no KCP call).

Each record is written in its Watch's storage namespace (``homes``: Watch name -> namespace,
from the listener's Watch list, ``listener.fleet.watchlist``; ``records.placed`` says which
listed objects are where their Watch stores). A Watch the list does not hold (deleted since
its records were checked) raises ``gateway.Unavailable``. With ``allowed`` (the setting
``TETHER_LISTENER_STORAGE_NAMESPACES`` plus the listener's namespace) a Watch storing
elsewhere raises ``RefusedNamespace`` before anything is read or written, whatever a Watch
author named (``on_refused``, one log line per Watch and minute); the manifests leave the
setting empty. The KCP's admission (manifests/kcp/listener/policy.yaml) is what bounds
where records land: besides the listener's namespace, only Namespaces its admins labelled
``STORAGE_LABEL=true``; a write its admission refuses outside the listener's namespace is
``RefusedNamespace`` too (``refused_by_kcp``: counted by ``on_refused``, one log line per
Watch and minute naming the label). A storage namespace that
does not exist (the store's create answered 404) is ``MissingNamespace`` (``on_missing``,
one log line per Watch and minute names the Watch and the namespace). Both are
``gateway.Unavailable``: the client gets 503 and retries. What it touches: the Watch list
(``homes``), the metric hooks and the log; the store (``listener.storage.store``) does the
reads and writes.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping

from listener.storage import records
from tether.base import logs
from tether.kube import gateway

log = logging.getLogger(__name__)
STORAGE_LABEL = "tether.kyma-project.io/record-storage"  # on a Namespace: records may be stored
MISSING_LOG_EVERY = 60.0  # seconds between log lines of one Watch's missing namespace
Homes = Callable[
    [], Mapping[str, str]
]  # Watch name -> storage namespace (listener.fleet.watchlist)


class MissingNamespace(gateway.Unavailable):
    """The storage namespace of a Watch does not exist (the create answered 404)."""


class RefusedNamespace(gateway.Unavailable):
    """The storage namespace of a Watch is not one the listener may write in."""


class Namespaces:
    """Where one listener's store writes each Watch's records (``homes`` None: every record
    in ``namespace``, for tests that build a store by hand)."""

    def __init__(
        self,
        namespace: str,
        homes: Homes | None,
        allowed: tuple[str, ...] | None,
        on_missing: Callable[[], None] = lambda: None,
        on_refused: Callable[[], None] = lambda: None,
    ) -> None:
        self.namespace = namespace
        self._homes = homes
        # None: wherever a Watch stores; else only these and ``namespace``
        self._allowed = None if allowed is None else {*allowed, namespace}
        self._on_missing = on_missing  # metric hook: a storage namespace does not exist
        self._on_refused = on_refused  # metric hook: a Watch stores where the listener may not
        self._logged: dict[str, float] = {}

    def home(self, watch: str) -> str:
        """The namespace records of ``watch`` are stored in; raises ``gateway.Unavailable``
        when the Watch is not in the listener's list (deleted since its records were checked)."""
        if self._homes is None or not watch:
            return self.namespace
        where = self._homes().get(watch)
        if where is None:
            raise gateway.Unavailable(f"the Watch {watch[:63]} is not in the listener's list")
        if self._allowed is not None and where not in self._allowed:
            raise self._refused(watch, where)
        return where

    def now(self) -> Mapping[str, str] | None:
        """Where each Watch stores, as the list says now (None: every record in ``namespace``)."""
        return None if self._homes is None else self._homes()

    def _refused(self, watch: str, namespace: str) -> RefusedNamespace:
        self._on_refused()
        if self._due("\x00" + watch):
            log.error(
                "the Watch %s stores in %s, which is not one of the listener's storage "
                "namespaces (TETHER_LISTENER_STORAGE_NAMESPACES): its records are answered "
                "503",
                logs.bounded(watch, 63),
                logs.bounded(namespace, 63),
            )
        return RefusedNamespace(
            f"the storage namespace {namespace[:63]} of the Watch "
            f"{watch[:63]} is not one the listener writes in"
        )

    def refused_by_kcp(
        self, key: records.Key, namespace: str, e: gateway.Forbidden
    ) -> gateway.Forbidden | RefusedNamespace:
        """The error for a write in ``namespace`` the KCP refused (401/403): the KCP's
        admission refusing a namespace other than the listener's (not labelled
        ``STORAGE_LABEL=true``: counted, logged as the admins' call, not the listener's
        RBAC); anything else (RBAC, credentials, the listener's own namespace) ``e`` itself."""
        if namespace == self.namespace or not e.by_admission:
            return e
        self._on_refused()
        if self._due("\x01" + key.watch):
            log.error(
                "the KCP refuses the listener's writes in %s, the storage namespace of the "
                "Watch %s: its records are answered 503 until the KCP's admins label the "
                "Namespace %s=true (%s)",
                logs.bounded(namespace, 63),
                logs.bounded(key.watch, 63),
                STORAGE_LABEL,
                logs.bounded(e, 200),
            )
        return RefusedNamespace(
            f"the storage namespace {namespace[:63]} of the Watch "
            f"{key.watch[:63]} is not one the KCP lets the listener write "
            f"in (label {STORAGE_LABEL}=true)"
        )

    def missing(self, key: records.Key, namespace: str) -> MissingNamespace:
        """The error (counted, logged) for a create in ``namespace`` that answered 404."""
        self._on_missing()
        if self._due(key.watch):
            log.error(
                "the storage namespace %s of the Watch %s does not exist: its records are "
                "answered 503 (the runtimes retry) until it is created",
                namespace,
                key.watch,
            )
        return MissingNamespace(
            f"the storage namespace {namespace} of the Watch {key.watch[:63]} does not exist"
        )

    def _due(self, what: str) -> bool:
        """Whether a log line of ``what`` is due (one per ``MISSING_LOG_EVERY``; bounded)."""
        now = time.monotonic()
        if now - self._logged.get(what, -MISSING_LOG_EVERY) < MISSING_LOG_EVERY:
            return False
        if len(self._logged) > 1000:
            self._logged.clear()
        self._logged[what] = now
        return True
