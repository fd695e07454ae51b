"""The Watches of the KCP namespace as one enroller run sees them, and their status.

Each run lists the Watches once (``Watching.read``): a 404 means the Watch CRD is not
installed and every runtime is rendered as before Watches (no ``tether-watches`` ConfigMap,
the bundle's webhook); a Watch that does not parse (``watches.parse``) is skipped and its
status says why. A list that fails otherwise renders as the previous run did (its Watches,
or as before Watches when it found no CRD); with no list answered since the process
started, the runtimes of that run are not touched (they fail with ``WatchesUnreadable``):
a KCP hiccup never turns a runtime's Watches into the old scope.

After a full run every Watch's status (``enroller.watchstatus``, pure) is written when it
changed: the runtimes it selects, where it is in force, and where not with why.
"""

from __future__ import annotations

import dataclasses
import datetime
import logging
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from enroller import watchstatus
from tether.base import logs
from tether.kube import apitypes, gateway, kyma
from tether.wire import watches

log = logging.getLogger("tether.enroller")

TOO_MANY = (
    f"more than {watches.MAX_WATCHES} Watches apply to this runtime: the first "
    f"{watches.MAX_WATCHES} by name are rendered"
)


class Unreadable(Exception):
    """The Watches could not be listed and none are known from an earlier run."""


@dataclasses.dataclass(frozen=True)
class Listed:
    """The Watches of one run: as served, those that parse (by name), why the others do not."""

    objects: tuple[Mapping[str, Any], ...]
    valid: tuple[watches.Watch, ...]
    errors: Mapping[str, str]

    def for_runtime(
        self, obj: Mapping[str, Any]
    ) -> tuple[tuple[watches.Watch, ...], tuple[str, ...]]:
        """The Watches in force in the runtime of Kyma CR ``obj`` (at most
        ``watches.MAX_WATCHES``, by name) and the names of those left out over that bound."""
        return watches.in_force_capped(self.valid, obj)


def parse_all(objects: Iterable[Mapping[str, Any]]) -> Listed:
    objs = tuple(objects)
    valid, errors = watches.parse_all(objs)
    return Listed(objs, valid, errors)


@dataclasses.dataclass(frozen=True)
class Installed:
    """What the enroller knows of one runtime's Watches (``install.Memory``)."""

    runtime_id: str
    installed: (
        frozenset[tuple[str, int]] | None
    )  # (name, generation) in its registration; None: unknown
    left_out: tuple[str, ...]  # in force but over the bound
    failure: str | None  # why its last pass failed ("reason: message")
    refused: Mapping[str, str] = dataclasses.field(default_factory=dict)  # by its discovery, why


class Watching:
    def __init__(
        self, kcp: gateway.Kube, namespace: str, now: Callable[[], datetime.datetime]
    ) -> None:
        self.kcp, self.namespace, self.now = kcp, namespace, now
        self._last: Listed | None = None  # the last list's (None: no Watch CRD)
        self._known = False  # a list answered since the process started

    def read(self) -> Listed | None:
        """This run's Watches; None: no Watch CRD (rendering as before Watches). A list
        that fails renders as the previous run did; ``Unreadable`` when no list answered yet."""
        try:
            listed = parse_all(self.kcp.list_items(apitypes.WATCHES, self.namespace))
        except gateway.NotFound:
            self._last, self._known = None, True
            return None
        except gateway.GatewayError as e:
            if not self._known:
                raise Unreadable(f"listing the Watches failed: {logs.bounded(e, 200)}") from None
            log.warning(
                "Watches not readable, rendering as the previous run: %s", logs.bounded(e, 200)
            )
            return self._last
        self._last, self._known = listed, True
        return listed

    def write_status(
        self,
        listed: Listed,
        kymas: Iterable[Mapping[str, Any]],
        known: Callable[[Mapping[str, Any]], Installed],
    ) -> Counter[str]:
        """Every Watch's status, written when it changed; the Watches by state (Ready,
        Pending, Invalid: ``metrics.WATCH_STATES``)."""
        live = [k for k in kymas if not kyma.view(k).deleting]
        per_runtime = [(watches.in_force(listed.valid, k), known(k)) for k in live]
        states: Counter[str] = Counter()
        for obj in listed.objects:
            meta = obj.get("metadata") or {}
            name = str(meta.get("name", ""))
            gen = meta.get("generation")
            generation = gen if isinstance(gen, int) else 0
            runtimes = (
                []
                if name in listed.errors
                else [
                    _fact(name, generation, runtime)
                    for ws, runtime in per_runtime
                    if any(w.name == name for w in ws)
                ]
            )
            status = watchstatus.status(
                watchstatus.WatchFacts(
                    now=self.now(),
                    generation=generation,
                    previous=obj.get("status"),
                    error=listed.errors.get(name),
                    runtimes=runtimes,
                )
            )
            states[watchstatus.state(status)] += 1
            if not watchstatus.changed(obj.get("status"), status):
                continue
            try:
                self.kcp.patch(
                    apitypes.WATCHES, self.namespace, name, {"status": status}, subresource="status"
                )
            except gateway.NotFound:
                pass  # deleted since the list
            except gateway.GatewayError as e:
                log.warning("Watch %s: status not written: %s", name, logs.bounded(e, 200))
        return states


def _fact(name: str, generation: int, r: Installed) -> watchstatus.RuntimeFacts:
    if r.installed is not None and (name, generation) in r.installed:
        return watchstatus.RuntimeFacts(r.runtime_id, True)
    if name in r.left_out:
        return watchstatus.RuntimeFacts(r.runtime_id, False, TOO_MANY)
    if name in r.refused:
        return watchstatus.RuntimeFacts(r.runtime_id, False, f"KindMismatch: {r.refused[name]}")
    return watchstatus.RuntimeFacts(r.runtime_id, False, r.failure or "")
