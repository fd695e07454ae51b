"""How many unbacked tombstones each runtime keeps, as one worker knows it (pure, no I/O).

An unbacked tombstone is a tombstone of a key never stored (``listener.storage.rules``,
"Unbacked tombstones"); a runtime keeps at most ``cap``. Listing a runtime's unbacked
tombstones after each one created would cost the KCP a label-selected list per forged
deletion, so ``Tally`` counts what this worker created since it last listed: a runtime is
listed (``created`` returns a token) when its count is unknown or one more would pass the
cap, and then evicted down to ``target`` (half the cap: a list every cap/2 creations under
a flood, not every one). ``listed`` sets the count from the listing, plus what was created
while it ran (counted twice when the listing held it too: a list earlier, never a cap
passed unseen). Other workers' tombstones are seen at this worker's next listing, so across
N workers a runtime holds at most ``cap`` plus what the other N-1 created since their last
listing (at most the cap each).
"""

from __future__ import annotations

import threading
from collections import OrderedDict

MAX_RUNTIMES = 10_000  # runtimes remembered per worker; the least recently used are forgotten


class Tally:
    def __init__(self, cap: int, max_runtimes: int = MAX_RUNTIMES) -> None:
        self.cap = cap
        self._max = max_runtimes
        self._lock = threading.Lock()
        self._known: OrderedDict[str, list[int]] = OrderedDict()  # runtime -> [known, created]

    def _entry(self, runtime_id: str) -> list[int]:
        entry = self._known.get(runtime_id)
        if entry is None:
            entry = self._known[runtime_id] = [-1, 0]  # -1: not listed yet
            while len(self._known) > self._max:
                self._known.popitem(last=False)
        self._known.move_to_end(runtime_id)
        return entry

    def created(self, runtime_id: str) -> int | None:
        """One more created; a token to list the runtime with (``listed``), or None when the
        count is known and within the cap."""
        with self._lock:
            entry = self._entry(runtime_id)
            entry[1] += 1
            if 0 <= entry[0] and entry[0] + 1 <= self.cap:
                entry[0] += 1
                return None
            return entry[1]

    def target(self, listed: int) -> int:
        """How many to keep after a listing that found ``listed``."""
        return listed if listed <= self.cap else self.cap - self.cap // 2

    def listed(self, runtime_id: str, token: int, remaining: int) -> None:
        """A listing that began at ``token`` left ``remaining`` (after its evictions)."""
        with self._lock:
            entry = self._entry(runtime_id)
            entry[0] = remaining + max(0, entry[1] - token)
