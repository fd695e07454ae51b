"""Refusals of callers that did not authenticate, audited in aggregate.

A request refused before its caller was authenticated (no client certificate, an
X-Forwarded-Client-Cert header refused, a certificate whose CN, runtime or SAN does not fit
the path: the reasons of ``auth.REASONS``) names a runtime ID that the caller chose. Such
refusals are not written a line each (a flood of them would flood the audit log): they are
counted here per (reason, source address, window) and written as one
``auth_refused_summary`` audit line per key and window, with the count::

    {"event": "auth_refused_summary", "reason": "no_certificate", "source": "203.0.113.7",
     "minute": "2026-11-30T10:00:00+00:00", "seconds": 60, "count": 300, "status": 401,
     "claimed_runtimes": ["a", "b", ...], "claimed_runtimes_truncated": true}

The runtime IDs of the paths are kept only as a bounded sample, under ``claimed_runtimes``,
never as ``runtime`` (that field means an authenticated runtime). A refused certificate
that passed the chain check (CN, runtime or SAN mismatch) adds its CN to a bounded sample
(``certificate_cns``). The window is aligned to the wall clock (``interval`` 60: the
minute). Memory is bounded: at most ``max_keys`` keys per window; refusals of further
sources are counted in one ``source: "other"`` bucket per reason, whose line says
``overflow: true``. Only one window is held: the first refusal of a new window, the flush
thread (``start``, at each window's end) or the worker's exit (``flush``) writes the last.

Pure accumulation over plain data (``Window``), and a thin writer (``RefusalSummary``) with
an injected clock; ``interval`` 0 writes a line per refusal.
"""

from __future__ import annotations

import dataclasses
import datetime
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from tether.base import logs

EVENT = "auth_refused_summary"
MAX_KEYS = 256  # (reason, source) keys per window before the "other" bucket
MAX_CLAIMED = 5  # claimed runtime IDs (and certificate CNs) kept per key
MAX_TEXT = 80  # characters of one claimed ID or CN
OTHER = "other"


@dataclasses.dataclass
class Count:
    """What one key's window holds."""

    count: int = 0
    status: int = 0
    claimed: set[str] = dataclasses.field(default_factory=set)
    claimed_truncated: bool = False
    cns: set[str] = dataclasses.field(default_factory=set)
    cns_truncated: bool = False


def _sample(into: set[str], value: str | None, limit: int) -> bool:
    """Add ``value`` to a sample of at most ``limit``; False when it did not fit."""
    if value is None:
        return True
    value = logs.bounded(value, MAX_TEXT)
    if value in into or len(into) < limit:
        into.add(value)
        return True
    return False


@dataclasses.dataclass
class Window:
    """The refusals of one window, by (reason, source): at most ``max_keys`` keys, then one
    overflow bucket per reason (reasons are a fixed set)."""

    index: int
    max_keys: int = MAX_KEYS
    max_claimed: int = MAX_CLAIMED
    counts: dict[tuple[str, str], Count] = dataclasses.field(default_factory=dict)
    overflow: dict[str, Count] = dataclasses.field(default_factory=dict)

    def add(
        self, reason: str, source: str, status: int, claimed: str | None, cn: str | None = None
    ) -> None:
        key = (reason, source)
        if key in self.counts or len(self.counts) < self.max_keys:
            c = self.counts.setdefault(key, Count(status=status))
        else:
            c = self.overflow.setdefault(reason, Count(status=status))
        c.count += 1
        if not _sample(c.claimed, claimed, self.max_claimed):
            c.claimed_truncated = True
        if not _sample(c.cns, cn, self.max_claimed):
            c.cns_truncated = True

    def total(self) -> int:
        return sum(c.count for c in (*self.counts.values(), *self.overflow.values()))

    def lines(self, start: float, seconds: float) -> list[dict[str, Any]]:
        """The audit fields of each key's line (without the event name); ``start``: the
        window's start (seconds since the epoch)."""
        minute = datetime.datetime.fromtimestamp(start, datetime.UTC).isoformat(timespec="seconds")
        keyed = [(reason, source, c, False) for (reason, source), c in sorted(self.counts.items())]
        keyed += [(reason, OTHER, c, True) for reason, c in sorted(self.overflow.items())]
        out: list[dict[str, Any]] = []
        for reason, source, c, overflow in keyed:
            fields: dict[str, Any] = {
                "reason": reason,
                "source": source,
                "minute": minute,
                "seconds": seconds,
                "count": c.count,
                "status": c.status,
                "claimed_runtimes": sorted(c.claimed),
            }
            if c.claimed_truncated:
                fields["claimed_runtimes_truncated"] = True
            if c.cns:
                fields["certificate_cns"] = sorted(c.cns)
            if c.cns_truncated:
                fields["certificate_cns_truncated"] = True
            if overflow:
                fields["overflow"] = True
                fields["note"] = (
                    f"more than {self.max_keys} (reason, source) keys in this "
                    "window: the refusals of further sources are counted here"
                )
            out.append(fields)
        return out


class RefusalSummary:
    """Counts unauthenticated refusals (``record``) and writes one audit line per key and
    window. Thread-safe; one per worker process."""

    def __init__(
        self,
        logger: logging.Logger,
        interval: float = 60.0,
        *,
        clock: Callable[[], float] = time.time,
        max_keys: int = MAX_KEYS,
        max_claimed: int = MAX_CLAIMED,
    ) -> None:
        self._logger = logger
        self._interval = interval
        self._clock = clock
        self._max_keys = max_keys
        self._max_claimed = max_claimed
        self._lock = threading.Lock()
        self._window: Window | None = None
        self._stopped = threading.Event()

    def _index(self, now: float) -> int:
        return int(now // self._interval)

    def record(
        self,
        reason: str,
        source: str | None,
        status: int,
        claimed: str | None,
        cn: str | None = None,
    ) -> None:
        """Count one refusal; writes the previous window's lines when this one starts a
        new window."""
        if self._interval <= 0:  # a line per refusal
            w = Window(0, 1, self._max_claimed)
            w.add(reason, source or "unknown", status, claimed, cn)
            self._write(w, self._clock(), 0.0)
            return
        index = self._index(self._clock())
        ended: Window | None = None
        with self._lock:
            if self._window is None or self._window.index != index:
                ended, self._window = self._window, Window(index, self._max_keys, self._max_claimed)
            self._window.add(reason, source or "unknown", status, claimed, cn)
        if ended is not None:
            self._write_window(ended)

    def flush_due(self) -> int:
        """Write the held window if it has ended; how many lines were written."""
        if self._interval <= 0:
            return 0
        index = self._index(self._clock())
        with self._lock:
            if self._window is None or self._window.index >= index:
                return 0
            ended, self._window = self._window, None
        return self._write_window(ended)

    def flush(self) -> int:
        """Write what is held, ended or not (worker exit); how many lines were written."""
        with self._lock:
            held, self._window = self._window, None
        return 0 if held is None else self._write_window(held)

    def seconds_left(self) -> float:
        """Until just after the held window ends (at least 1 s apart)."""
        interval = max(self._interval, 1.0)
        return interval - self._clock() % interval + 0.05

    def start(self) -> threading.Thread:
        """A daemon thread of the worker writing each window's lines just after it ends,
        so a flood that stops is still written without waiting for the next refusal;
        ``stop`` ends it."""

        def loop() -> None:
            while not self._stopped.wait(self.seconds_left()):
                self.flush_due()

        t = threading.Thread(target=loop, name="refusal-summary-flush", daemon=True)
        t.start()
        return t

    def stop(self) -> None:
        self._stopped.set()

    def _write_window(self, window: Window) -> int:
        return self._write(window, window.index * self._interval, self._interval)

    def _write(self, window: Window, start: float, seconds: float) -> int:
        lines = window.lines(start, seconds)
        for fields in lines:
            logs.audit(self._logger, EVENT, **fields)
        return len(lines)
