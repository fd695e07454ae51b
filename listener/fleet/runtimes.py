"""The Kyma CR of a runtime, looked up by label and cached briefly (``KymaLRU``).

Requests of one runtime come in bursts (a forwarder batch, a poller resync); a short TTL
(``kyma_cache_seconds``, default 10 s) saves a list call per request while a deleted or
re-labelled Kyma CR takes effect within that time. Unknown runtimes are cached too (so a
stranger cannot make every request a KCP list) and the cache is bounded: at most
``MAX_ENTRIES`` runtimes, the least recently used evicted first.
API errors are not cached and propagate to the caller (503).
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable

from tether import gateway, kyma

MAX_ENTRIES = 20_000


class KymaLRU:
    """Kyma lookups by runtime ID: each entry valid ``ttl`` seconds, least recently used
    evicted beyond ``MAX_ENTRIES``."""

    def __init__(
        self, kcp: gateway.Kube, namespace: str, ttl: float, timeout: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._kcp, self._namespace, self._clock = kcp, namespace, clock
        self._ttl, self._timeout = ttl, timeout
        self._lock = threading.Lock()
        self._entries: OrderedDict[str, tuple[float, list[kyma.KymaView]]] = OrderedDict()

    def lookup(self, runtime_id: str) -> list[kyma.KymaView]:
        now = self._clock()
        with self._lock:
            hit = self._entries.get(runtime_id)
            if hit is not None and hit[0] > now:
                self._entries.move_to_end(runtime_id)
                return hit[1]
        views = kyma.list_by_runtime_id(self._kcp, self._namespace, runtime_id,
                                        timeout=self._timeout)
        if self._ttl > 0:
            with self._lock:
                self._entries[runtime_id] = (now + self._ttl, views)
                self._entries.move_to_end(runtime_id)
                while len(self._entries) > MAX_ENTRIES:
                    self._entries.popitem(last=False)
        return views
