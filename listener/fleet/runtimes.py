"""The Kyma CR of a runtime, looked up by label and cached briefly (``KymaLRU``).

Requests of one runtime come in bursts (a forwarder batch, a poller resync); a short TTL
(``kyma_cache_seconds``, default 10 s) saves a list call per request while a deleted or
re-labelled Kyma CR takes effect within that time. Unknown runtimes are cached too (so a
stranger cannot make every request a KCP list) and the cache is bounded: at most
``MAX_ENTRIES`` runtimes, the least recently used evicted first.
API errors are not cached and propagate to the caller (503), with one exception: while
the KCP API is unreachable (``gateway.Unavailable``, not ``Forbidden``: the listener's own
RBAC is no outage) an expired entry read at most ``stale`` seconds ago is answered
(``listener.fleet.outage``: the revocation this delays and why it is bounded). The TTL of
normal operation is unchanged.

With the pod's view (``listener.view``: the Kyma CRs list+watched, one process per pod) a
lookup is answered from it first, before this cache (a relabelled Kyma CR or a changed
domain is refused within the watch's latency). A runtime the view holds no Kyma CR of is
looked up here (a Kyma CR created a moment ago may not have reached the view): from the
cache only when that says "unknown" too, else by a list (a deleted Kyma CR is refused at
once, never from an older cached answer). While the view does not answer this is the path.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable

from listener.fleet import viewclient as view_client
from tether.kube import gateway, kyma

MAX_ENTRIES = 20_000


class KymaLRU:
    """Kyma lookups by runtime ID: each entry valid ``ttl`` seconds (``stale`` more while the
    KCP is unreachable), least recently used evicted beyond ``MAX_ENTRIES``."""

    def __init__(
        self,
        kcp: gateway.Kube,
        namespace: str,
        ttl: float,
        timeout: float,
        clock: Callable[[], float] = time.monotonic,
        stale: float = 0.0,
        on_stale: Callable[[], None] | None = None,
        view: view_client.ViewClient | None = None,
    ) -> None:
        self._view = view
        self._kcp, self._namespace, self._clock = kcp, namespace, clock
        self._ttl, self._timeout, self._stale, self._on_stale = ttl, timeout, stale, on_stale
        self._lock = threading.Lock()
        # runtime ID -> (when read from the KCP, the Kyma CRs)
        self._entries: OrderedDict[str, tuple[float, list[kyma.KymaView]]] = OrderedDict()

    def lookup(self, runtime_id: str) -> list[kyma.KymaView]:
        fresh = False
        if self._view is not None and kyma.valid_runtime_id(runtime_id):
            seen = self._view.kymas(runtime_id)
            if seen:
                self._keep(runtime_id, self._clock(), seen)  # for a KCP outage (``stale``)
                return seen
            # none in the view: a Kyma CR created a moment ago may not have reached it, so
            # read (a runtime known here before is read afresh: revoked, never from the cache)
            fresh = seen is not None
        now = self._clock()
        with self._lock:
            hit = self._entries.get(runtime_id)
            if hit is not None and hit[0] + self._ttl > now and not (fresh and hit[1]):
                self._entries.move_to_end(runtime_id)
                return hit[1]
        try:
            views = kyma.list_by_runtime_id(
                self._kcp, self._namespace, runtime_id, timeout=self._timeout
            )
        except gateway.Unavailable as e:
            if isinstance(e, gateway.Forbidden) or hit is None or now - hit[0] > self._stale:
                raise
            if self._on_stale is not None:
                self._on_stale()
            return hit[1]  # the KCP unreachable: the identity last read, within ``stale``
        self._keep(runtime_id, now, views)
        return views

    def _keep(self, runtime_id: str, now: float, views: list[kyma.KymaView]) -> None:
        if self._ttl > 0 or self._stale > 0:
            with self._lock:
                self._entries[runtime_id] = (now, views)
                self._entries.move_to_end(runtime_id)
                while len(self._entries) > MAX_ENTRIES:
                    self._entries.popitem(last=False)
