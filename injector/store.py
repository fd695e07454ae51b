"""What the injector remembers of one Watch's runtimes, bounded (pure: plain data).

No value and no record is kept (the values are read when a runtime is reconciled,
``injector.bounds``). Per runtime only:

* the highest KCP resourceVersion of its records seen in the stream (``touch``), so the
  periodic pass knows which runtimes hold records; at most ``max_runtimes`` runtimes: past
  it a new runtime is still reconciled on each of its changes, but not by the periodic pass,
  and ``full`` counts it (``tether_injector_bound_reached``, an alert; never a relist);
* a refused runtime's refusal and the fingerprint of its records' metadata when it was
  refused (``refuse``), so it is refused again without reading its values until its records
  change, and ``refused_by`` counts the refused runtimes by bound for the metric.

``forget`` drops a runtime whose records are all gone (its reconcile found none).
"""

from __future__ import annotations

import dataclasses

from injector import bounds


@dataclasses.dataclass
class Runtime:
    revision: int = 0
    refusal: bounds.Refusal | None = None
    fingerprint: tuple[int, int] | None = None  # of the records when refused


class Store:
    def __init__(self, *, max_runtimes: int) -> None:
        self.max_runtimes = max_runtimes
        self.runtimes: dict[str, Runtime] = {}
        self._over: set[str] = set()  # runtimes not remembered since the last list

    @property
    def full(self) -> int:
        """Runtimes not remembered (over ``max_runtimes``) since the last list, counted
        up to ``max_runtimes``."""
        return len(self._over)

    def touch(self, runtime: str, revision: int) -> bool:
        """A record of ``runtime`` changed; False when it is not remembered (the bound)."""
        rt = self.runtimes.get(runtime)
        if rt is None:
            if len(self.runtimes) >= self.max_runtimes:
                if len(self._over) < self.max_runtimes:
                    self._over.add(runtime)
                return False
            rt = self.runtimes[runtime] = Runtime()
        rt.revision = max(rt.revision, revision)
        return True

    def listed(self) -> None:
        """A (re)list begins: what ``full`` counted is counted again by it."""
        self._over.clear()

    def forget(self, runtime: str) -> None:
        self.runtimes.pop(runtime, None)
        self._over.discard(runtime)

    def refuse(self, runtime: str, refusal: bounds.Refusal, fingerprint: tuple[int, int]) -> None:
        rt = self.runtimes.get(runtime)
        if rt is None:
            if len(self.runtimes) >= self.max_runtimes:
                return  # refused again at its next change, reading its values again
            rt = self.runtimes[runtime] = Runtime()
        rt.refusal, rt.fingerprint = refusal, fingerprint

    def accept(self, runtime: str) -> None:
        rt = self.runtimes.get(runtime)
        if rt is not None:
            rt.refusal = rt.fingerprint = None

    def still_refused(self, runtime: str, fingerprint: tuple[int, int]) -> bounds.Refusal | None:
        """The runtime's refusal when its records have not changed since."""
        rt = self.runtimes.get(runtime)
        if rt is None or rt.refusal is None or rt.fingerprint != fingerprint:
            return None
        return rt.refusal

    def refused_by(self) -> dict[bounds.Bound, int]:
        out: dict[bounds.Bound, int] = {b: 0 for b in bounds.BOUNDS}
        for rt in self.runtimes.values():
            if rt.refusal is not None:
                out[rt.refusal.bound] += 1
        return out
