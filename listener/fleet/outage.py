"""What a listener answers while the KCP API is unreachable: degrade, don't fall over.

The listener runs in the KCP. When the KCP's apiserver is down nothing updates the
Service's Endpoints, so the listener's pods stay in the rotation whatever ``/readyz`` says
(only a partial partition, one replica cut off while its kubelet still reports, takes a
pod out). Every runtime's senders keep reaching it, and it answers what it safely can:

* **A change** (``POST .../changes``) needs a KCP write: 503 with a jittered
  ``Retry-After`` (``retry_after``), as soon as the write fails; nothing is held.
* **The runtime's identity** (its Kyma CR): the last one read is used for at most
  ``stale`` seconds after it was read (``listener.fleet.runtimes.KymaLRU``;
  ``TETHER_LISTENER_OUTAGE_CACHE_SECONDS``, default 900). The cost: a Kyma CR deleted (or
  re-labelled, or marked for deletion) just before the outage is still accepted during it,
  at most that long: for the answers below, which write nothing (a change still needs the
  KCP; should the KCP take a write while its Kyma list failed, a runtime revoked within
  ``stale`` could store a record: the janitor's orphan rule removes it). After ``stale``
  seconds a runtime is answered 503 again, as before this module.
* **The heartbeat** (``GET .../state/summary``): the state summary this worker last read
  from the KCP for the runtime (same reported cluster identity), at most ``stale`` seconds
  old. Safe because the poller only compares: equal hashes say "in sync", and nothing is
  resent. They are equal only when the runtime holds exactly what the KCP held at that
  read, and the KCP's records of a runtime change only by that runtime's writes (which
  fail during the outage) or the janitor's (which cannot run either). A difference makes
  the poller ask for the differing buckets, which need the KCP (503): the poller retries,
  as it would have. Its epoch is the one of that read (a new epoch needs a KCP write).
  A runtime this worker never read, or another identity: 503 as before.

Not answered from caches: the full digest (``GET .../state``), buckets, anything that
writes. Pure apart from the clock. Bounded: a summary is kept compressed (about 3 KB of
its 5.6 KB of JSON: 256 hashes of 8 random bytes do not shrink further), at most
``MAX_BYTES`` (32 MiB, about 10,000 runtimes) per worker, least recently read dropped
first: beyond that a runtime is answered 503 as before.
"""

from __future__ import annotations

import json
import random
import threading
import time
import zlib
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

MAX_BYTES = 32 * 1024 * 1024


def retry_after(base: int, rng: Callable[[], float] = random.random) -> int:
    """A 503's ``Retry-After`` spread over [base, 2 x base) seconds, so the senders of a
    fleet that met the same outage do not come back in step."""
    return base + int(rng() * base)


class LastKnown:
    """Each runtime's state summary as last read from the KCP, per reported identity."""

    def __init__(self, stale: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.stale, self._clock = stale, clock
        self._lock = threading.Lock()
        # (runtime ID, reported identity) -> (when read, the summary's JSON, compressed)
        self._entries: OrderedDict[tuple[str, str], tuple[float, bytes]] = OrderedDict()
        self.bytes = 0

    def remember(self, runtime_id: str, identity: str, doc: dict[str, Any]) -> None:
        if self.stale <= 0:
            return
        packed = zlib.compress(json.dumps(doc, separators=(",", ":")).encode(), 1)
        key = (runtime_id, identity)
        with self._lock:
            old = self._entries.pop(key, None)
            self.bytes += len(packed) - (0 if old is None else len(old[1]))
            self._entries[key] = (self._clock(), packed)
            while self.bytes > MAX_BYTES:
                _, (_, dropped) = self._entries.popitem(last=False)
                self.bytes -= len(dropped)

    def recall(self, runtime_id: str, identity: str) -> dict[str, Any] | None:
        """The summary last read for ``runtime_id`` under ``identity`` when it is at most
        ``stale`` seconds old, else None."""
        with self._lock:
            hit = self._entries.get((runtime_id, identity))
        if hit is None or self._clock() - hit[0] > self.stale:
            return None
        doc: dict[str, Any] = json.loads(zlib.decompress(hit[1]))
        return doc
