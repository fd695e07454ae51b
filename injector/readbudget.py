"""The bytes of records the injector reads into memory at once, all Watches together.

A reconcile takes its runtime's share (the records' JSON size the listener counted, at
least ``floor``) before it reads their values and gives it back when it is done with them;
it waits while the others hold the budget. One share is never above the budget (the
per-runtime bound ``TETHER_INJECTOR_MAX_BYTES`` is at most ``TETHER_INJECTOR_READ_BYTES``),
so a reconcile always gets its turn once the others finish.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator


class ReadBudget:
    def __init__(self, total: int, *, floor: int = 64 * 1024) -> None:
        self.total, self.floor = total, floor
        self.held = 0
        self.peak = 0
        self._cond = threading.Condition()

    @contextlib.contextmanager
    def hold(self, size: int, stop: threading.Event) -> Iterator[bool]:
        """``size`` bytes held while the block runs; yields False (nothing held) when
        ``stop`` was set while waiting."""
        share = min(self.total, max(self.floor, size))
        with self._cond:
            while self.held + share > self.total and not stop.is_set():
                self._cond.wait(0.5)
            if self.held + share > self.total:
                share = 0  # stopped while waiting
            self.held += share
            self.peak = max(self.peak, self.held)
        try:
            yield share > 0
        finally:
            with self._cond:
                self.held -= share
                self._cond.notify_all()
