"""The Watches in the listener's KCP namespace, read at most once per ``ttl`` per worker.

Every record is checked against the Watches in force for its runtime
(``listener.edge.watchcheck``); one list call per worker and ``ttl`` (the setting
``TETHER_LISTENER_WATCH_CACHE_SECONDS``) serves every request meanwhile, so a new, changed
or deleted Watch takes effect at the listener within that time. A Watch that cannot be
parsed (``tether.wire.watches.parse``) is skipped: it is in force nowhere (its status says why,
written by the enroller). When the list fails (the KCP down, the Watch CRD missing) the last
list read is used, however old; with none, the error propagates (the client gets 503 and
retries), never a refusal.

A request that names a Watch the list does not hold (a Watch created since the last read:
the runtime's list, rendered by the enroller, may be ahead of this worker's) reads the list
again at once, but at most once per ``REFRESH_FLOOR`` seconds per worker, so records of a
new Watch are not refused for up to ``ttl`` and a runtime naming made-up Watches costs the
KCP at most one list per second and worker.

One read at a time per worker: a caller that finds the list due while another thread reads
it waits for that read and takes its result (a list read after it asked), so the many
threads of a worker (request threads, persist lanes: ``homes`` is asked per record) whose
cache expired at once cost the KCP one list, not one each.

``homes`` says where each Watch's records are stored (``spec.storage.namespace``, else the
listener's namespace), from the same list (``listener.storage.store``).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable

from tether.base import logs
from tether.kube import apitypes, gateway
from tether.wire import watches

log = logging.getLogger(__name__)
REFRESH_FLOOR = 1.0  # seconds between reads forced by an unknown Watch name


class WatchList:
    def __init__(
        self,
        kcp: gateway.Kube,
        namespace: str,
        ttl: float,
        timeout: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._kcp, self._namespace, self._ttl, self._timeout = kcp, namespace, ttl, timeout
        self._clock = clock
        self._lock = threading.Lock()
        self._read = threading.Condition(self._lock)  # a read ended
        self._reading = False
        self._read_at: float | None = None
        self._watches: tuple[watches.Watch, ...] = ()
        self._skipped: dict[str, str] = {}  # name -> why, logged once per change

    def current(self, wanted: Iterable[str] = ()) -> tuple[watches.Watch, ...]:
        """Every usable Watch, by name; raises ``gateway.GatewayError`` when the list
        cannot be read and none was read before. ``wanted``: Watch names the request needs
        (read again sooner when one is missing, see the module's docstring)."""
        now = self._clock()
        with self._lock:
            if self._read_at is not None and now - self._read_at < self._ttl:
                known = {w.name for w in self._watches}
                if all(n in known for n in wanted) or now - self._read_at < min(
                    self._ttl, REFRESH_FLOOR
                ):
                    return self._watches
            if self._reading:  # another thread reads: its list is newer than this call
                self._read.wait_for(lambda: not self._reading)
                if self._read_at is None:
                    raise gateway.Unavailable("the Watch list could not be read")
                return self._watches
            self._reading = True
        try:
            return self._read_now(now)
        finally:
            with self._lock:
                self._reading = False
                self._read.notify_all()

    def _read_now(self, now: float) -> tuple[watches.Watch, ...]:
        try:
            items = list(
                self._kcp.list_items(apitypes.WATCHES, self._namespace, timeout=self._timeout)
            )
        except gateway.GatewayError:
            with self._lock:
                if self._read_at is None:
                    raise
                return self._watches  # the last list read, until the KCP answers again
        parsed = self._parse(items)
        with self._lock:
            self._read_at, self._watches = now, parsed
            return parsed

    def homes(self) -> dict[str, str]:
        """Watch name -> the KCP namespace its records are stored in (``current``'s list)."""
        return {w.name: w.storage_namespace or self._namespace for w in self.current()}

    def _parse(self, items: list[dict[str, object]]) -> tuple[watches.Watch, ...]:
        found, skipped = watches.parse_all(items)
        for name, why in skipped.items():
            if self._skipped.get(name) != why:
                log.warning(
                    "Watch %s is not used: %s", logs.bounded(name, 80), logs.bounded(why, 200)
                )
        self._skipped = skipped
        return tuple(sorted(found, key=lambda w: w.name))
