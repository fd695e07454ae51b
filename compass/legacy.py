"""compass-manager's CompassManagerMappings as a source of existing registrations (opt-in).

compass-manager (github.com/kyma-project/compass-manager,
``controllers/compassmanager_controller.go``) records each runtime it registered in a
``CompassManagerMapping`` (``operator.kyma-project.io/v1beta1``) in the KCP namespace, found by the
label ``operator.kyma-project.io/kyma-name`` (the Kyma CR's name) and holding the Director's runtime
ID in the label ``kyma-project.io/compass-runtime-id`` ("" until registered); a dry run's
(fake) ID carries ``kyma-project.io/cm-dry-run``.

With ``TETHER_COMPASS_READ_COMPASS_MANAGER_MAPPINGS=true`` and the overlay
``manifests/kcp/compass/compat-compass-manager`` (get, list, watch on them; never a write),
compass reads them once per run: ``read`` gives each Kyma CR's runtime ID, which adoption
checks against the Director like any other candidate (docs/compass.md, "Names"). Tether
never writes, labels or deletes one of these objects.

    regs = legacy.read(kcp, "kcp-system")        # legacy.Unavailable: CRD missing, no RBAC
    regs.runtime_id("kyma-a")                   # "4a1f..." or None (none, or ambiguous)

``Source`` is what compass plugs into ``Reconciler.known_runtime_id`` when the setting is on
(compass/service.py): it reads at most once per ``max_age`` seconds, and when the mappings
cannot be read it logs why and answers None (adoption goes on with its other sources).
``registrations`` is pure (the tests need no server).
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from tether.kube import apitypes, gateway

log = logging.getLogger(__name__)

KYMA_NAME_LABEL = "operator.kyma-project.io/kyma-name"
RUNTIME_ID_LABEL = "kyma-project.io/compass-runtime-id"
DRY_RUN_LABEL = "kyma-project.io/cm-dry-run"


class Unavailable(Exception):
    """compass-manager's mappings cannot be read: the CRD is not served, or the overlay that
    grants reading them is not applied. The message names which (never an object's data)."""


@dataclasses.dataclass(frozen=True)
class Registrations:
    """What compass-manager's mappings say: runtime ID by Kyma CR name."""

    by_kyma: Mapping[str, str] = dataclasses.field(default_factory=dict)
    # Kyma CRs with two mappings naming different runtime IDs: never guessed
    ambiguous: frozenset[str] = frozenset()
    # mappings left out: not registered yet, a dry run's ID, or being deleted
    skipped: int = 0

    def runtime_id(self, kyma: str) -> str | None:
        return self.by_kyma.get(kyma)

    def holder(self, runtime_id: str, kyma: str) -> str | None:
        """A Kyma CR other than ``kyma`` whose mapping names ``runtime_id``."""
        return min(
            (k for k, rid in self.by_kyma.items() if rid == runtime_id and k != kyma), default=None
        )


def _candidate(obj: Mapping[str, Any]) -> tuple[str, str] | None:
    meta = obj.get("metadata") or {}
    labels = meta.get("labels") or {}
    rid = str(labels.get(RUNTIME_ID_LABEL) or "")
    if not rid or DRY_RUN_LABEL in labels or meta.get("deletionTimestamp"):
        return None
    kyma = str(labels.get(KYMA_NAME_LABEL) or meta.get("name") or "")
    return (kyma, rid) if kyma else None


def registrations(items: Iterable[Mapping[str, Any]]) -> Registrations:
    """compass-manager's mapping objects -> runtime ID by Kyma CR name (pure)."""
    found: dict[str, set[str]] = {}
    skipped = 0
    for obj in items:
        c = _candidate(obj)
        if c is None:
            skipped += 1
            continue
        found.setdefault(c[0], set()).add(c[1])
    return Registrations(
        by_kyma={k: next(iter(ids)) for k, ids in found.items() if len(ids) == 1},
        ambiguous=frozenset(k for k, ids in found.items() if len(ids) > 1),
        skipped=skipped,
    )


def read(kcp: gateway.Kube, namespace: str, *, page_size: int = 500) -> Registrations:
    """List compass-manager's mappings in ``namespace`` (read only). Raises ``Unavailable``
    when they cannot be read; other API failures as ``gateway.GatewayError``."""
    res = apitypes.COMPASS_MANAGER_LEGACY_MAPPINGS
    try:
        return registrations(list(kcp.list_items(res, namespace, page_size=page_size)))
    except gateway.NotFound:
        raise Unavailable(
            f"{res.plural}.{res.group}/{res.version} is not served in this KCP "
            "(compass-manager's CRD is not installed)"
        ) from None
    except gateway.Forbidden:
        raise Unavailable(
            f"reading {res.plural}.{res.group} in {namespace} is forbidden "
            "(apply manifests/kcp/compass/compat-compass-manager)"
        ) from None


class Source:
    """``known_runtime_id`` for the reconciler: a Kyma CR's runtime ID from compass-manager's
    mappings, read at most once per ``max_age`` seconds (thread-safe); None when there is
    none, it is ambiguous, or the mappings cannot be read (logged, the last good read kept
    over a transient API failure)."""

    def __init__(
        self,
        kcp: gateway.Kube,
        namespace: str,
        *,
        max_age: float = 30.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._kcp, self._ns, self._max_age, self._clock = kcp, namespace, max_age, clock
        self._lock = threading.Lock()
        self._regs = Registrations()
        self._at: float | None = None

    def __call__(self, kyma: str) -> str | None:
        with self._lock:
            now = self._clock()
            if self._at is None or now - self._at >= self._max_age:
                self._at = now
                self._refresh()
            return self._regs.runtime_id(kyma)

    def holder(self, runtime_id: str, kyma: str) -> str | None:
        """Another Kyma CR whose compass-manager mapping names ``runtime_id`` (adoption
        never takes a runtime another Kyma CR holds), from the same reads as ``__call__``."""
        with self._lock:
            now = self._clock()
            if self._at is None or now - self._at >= self._max_age:
                self._at = now
                self._refresh()
            return self._regs.holder(runtime_id, kyma)

    def _refresh(self) -> None:
        try:
            self._regs = read(self._kcp, self._ns)
        except Unavailable as e:
            self._regs = Registrations()
            log.warning("compass-manager's mappings not read: %s", e)
        except gateway.GatewayError as e:
            log.warning(
                "compass-manager's mappings not read (%s); keeping the last read", type(e).__name__
            )
