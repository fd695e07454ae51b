"""When the injector reconciles a runtime (pure, on a given clock reading).

A change makes its runtime due at once unless the runtime was reconciled less than
``interval`` ago; then at the end of that interval (changes meanwhile coalesce into that
one reconcile). A failed reconcile is retried after a backoff that doubles per consecutive
failure up to ``backoff_cap``. Memory: one entry per runtime offered and not yet taken,
plus the last reconcile time of at most ``max_entries`` runtimes (the oldest forgotten:
forgetting one only lets its next reconcile come sooner).
"""

from __future__ import annotations

from collections import OrderedDict


class Pacer:
    def __init__(
        self,
        interval: float,
        *,
        backoff_base: float = 1.0,
        backoff_cap: float = 60.0,
        max_entries: int = 100_000,
    ) -> None:
        self.interval, self.backoff_base, self.backoff_cap = interval, backoff_base, backoff_cap
        self.max_entries = max_entries
        self._due: dict[str, float] = {}  # runtime -> when
        self._last: OrderedDict[str, float] = OrderedDict()  # runtime -> last reconcile start
        self._failures: dict[str, int] = {}

    def offer(self, runtime: str, now: float) -> None:
        """``runtime`` changed: due now, or at the end of its interval."""
        last = self._last.get(runtime)
        at = now if last is None else max(now, last + self.interval)
        current = self._due.get(runtime)
        if current is None or at < current:
            self._due[runtime] = at

    def take(self, now: float) -> list[str]:
        """The runtimes due at ``now`` (removed from the due set; their reconcile starts)."""
        ready = [rt for rt, at in self._due.items() if at <= now]
        for rt in ready:
            del self._due[rt]
            self._last[rt] = now
            self._last.move_to_end(rt)
        while len(self._last) > self.max_entries:
            self._last.popitem(last=False)
        return sorted(ready)

    def done(self, runtime: str, ok: bool, now: float) -> None:
        """A reconcile ended; a failure makes the runtime due again after the backoff."""
        if ok:
            self._failures.pop(runtime, None)
            return
        n = self._failures.get(runtime, 0) + 1
        if len(self._failures) < self.max_entries or runtime in self._failures:
            self._failures[runtime] = n
        delay = min(self.backoff_cap, self.backoff_base * 2 ** min(n - 1, 30))
        at = now + delay
        if runtime not in self._due or self._due[runtime] > at:
            self._due[runtime] = at

    def wait(self, now: float, longest: float) -> float:
        """Seconds until the next runtime is due (at most ``longest``; 0 when one is)."""
        if not self._due:
            return longest
        return max(0.0, min(longest, min(self._due.values()) - now))

    def pending(self) -> int:
        return len(self._due)
