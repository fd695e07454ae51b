"""Which of the Watches in force an admission concerns (pure), and the runtime's Watch list,
kept fresh off the request path (``Scope``; I/O in its own thread).

An admission is forwarded once per Watch in force covering its resource (group, version,
plural and kind) that admits the object (``tether.wire.watches.admits``: namespace, name,
labels of the new *or* the old object, so an object whose labels leave a Watch's selector
is forwarded once more and the forwarder sends that Watch a tombstone). The Watches in force
are those of the runtime's ``tether-watches`` ConfigMap (``TETHER_WATCHES_CONFIGMAP``);
without it (``Scope.current()`` None) the built-in Watch of the environment's scope
(``tether.wire.conversion.in_force``); before any read of it has answered
(``Scope.settled()`` False: the runtime's API refused or failed) nothing is forwarded.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping, Sequence
from typing import Any

from tether.wire import watches, watchset
from webhook import admission

log = logging.getLogger(__name__)
_NOT_VALUES = ("apiVersion", "kind", "metadata")
_EMPTY: tuple[object, ...] = (None, {}, [])
NUDGE_FLOOR = 1.0  # seconds between reads of the Watch list, however often nudged
# skips that, for a call the registration sent, mean this list is behind the KCP's Watches
STALE_HINTS = ("other-kind", "not-watched")


def target_of(req: admission.Request) -> watches.Target:
    """The resource of a request: the kind's group and version (the object is in that
    version) and the resource's plural."""
    return watches.Target(req.group, req.version, req.resource, req.kind)


def object_changed(old: Mapping[str, Any] | None, new: Mapping[str, Any] | None) -> bool:
    """Whether an UPDATE changes an object's values (every top-level field but apiVersion,
    kind and metadata: a ConfigMap's data, a CR's spec and status), labels or annotations;
    an empty value is the same as none."""
    o, n = old or {}, new or {}
    if {k: v for k, v in o.items() if k not in _NOT_VALUES and v not in _EMPTY} != {
        k: v for k, v in n.items() if k not in _NOT_VALUES and v not in _EMPTY
    }:
        return True
    om, nm = admission.meta(o), admission.meta(n)
    return bool(
        (om.get("labels") or {}) != (nm.get("labels") or {})
        or (om.get("annotations") or {}) != (nm.get("annotations") or {})
    )


def decide(
    req: admission.Request, in_force: Sequence[watches.Watch]
) -> tuple[admission.Skip | None, tuple[watches.Watch, ...]]:
    """(None, the Watches to forward the object for), or (why not, ())."""
    if req.operation not in admission.OPERATIONS:
        return "other-operation", ()
    if req.dry_run:
        return "dry-run", ()
    if not req.name or not req.namespace:
        return "unnamed", ()
    covering = watches.covering(in_force, target_of(req))
    if not covering:
        return "other-kind", ()
    new_labels = admission.meta(req.obj).get("labels")
    old_labels = admission.meta(req.old).get("labels")
    chosen = tuple(
        w for w in covering if watches.admits(w, req.namespace, req.name, new_labels, old_labels)
    )
    if not chosen:
        return "not-watched", ()
    if req.operation == "UPDATE" and not object_changed(req.old, req.obj):
        return "no-change", ()
    return None, chosen


class Scope:
    """The Watches in force here (``tether.wire.watchset.WatchSet``), read once at start and then
    every ``ttl`` seconds by a daemon thread, so that an admission never waits on the
    runtime's API (``current`` only reads a field)."""

    def __init__(self, ws: watchset.WatchSet, ttl: float) -> None:
        self._ws, self._ttl = ws, ttl
        self._value: tuple[watches.Watch, ...] | None = None
        self._settled = False
        self._stop, self._wake = threading.Event(), threading.Event()
        self._thread: threading.Thread | None = None
        self.refresh()

    def current(self) -> tuple[watches.Watch, ...] | None:
        return self._value

    def settled(self) -> bool:
        """Whether a read ever answered: until then ``current()``'s None means "unknown",
        not "the runtime has none" (nothing is forwarded: the built-in Watch could send what
        the runtime's Watches leave out)."""
        return self._settled

    def refresh(self) -> tuple[watches.Watch, ...] | None:
        value = self._ws.refresh()
        self._value, self._settled = value, self._ws.settled()
        return value

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="watch-scope", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()

    def nudge(self) -> None:
        """Read the list soon (the API server called for what no Watch here covers: the
        registration, rendered from the KCP's Watches, is ahead of this list). Never
        blocks; reads stay at most one per ``NUDGE_FLOOR`` seconds, whatever calls it."""
        self._wake.set()

    def _run(self) -> None:
        while not self._stop.is_set():
            self._wake.wait(self._ttl)
            self._wake.clear()
            if self._stop.is_set():
                return
            try:
                self.refresh()
            except Exception:  # never stop refreshing: the last answer stays
                log.exception("reading the runtime's Watches failed")
            self._stop.wait(NUDGE_FLOOR)
