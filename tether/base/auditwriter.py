"""Audit lines written by a thread of their own: a request thread never waits on the log.

``QueuedHandler`` formats a record in the caller's thread (cheap, no I/O) and puts the line on
a bounded queue; one writer thread per process takes lines off it and writes them to stdout or
appends them to a file. A caller never blocks: a full queue (the pipe nobody reads, a disk
that hangs) drops the line, and a write that fails (``ENOSPC`` on a full file system, ``EPIPE``)
loses it. Both are counted through ``on_lost(reason)`` (``REASONS``) and said loudly on stderr,
at most once per ``complain_every`` seconds with the count since the last time, never with the
line's content. The part keeps working (answering, reconciling); an audit line it cannot
write is counted and alerted (``TetherAuditLost``).

Every part audits this way (``tether.base.logs.audit_logger`` has no other path): each declares
its lost counter with ``lost_counter`` (``tether_<part>_audit_lost_total{reason}``, each
reason at 0 from the start) and its queue's size with ``queue_lines``
(``TETHER_<PART>_AUDIT_QUEUE_LINES``).

The thread is started on the first line of a process (after a gunicorn fork, in the worker).
``flush`` waits (bounded) until the queue is empty; ``close`` (at ``logging.shutdown``) drains
what it can in a second and stops the thread.
"""

from __future__ import annotations

import logging
import os
import queue
import sys
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from tether.base import config

if TYPE_CHECKING:  # imported where used: tether.base.logs imports this module before a gunicorn
    import prometheus_client as prom  # part sets PROMETHEUS_MULTIPROC_DIR (tether.http.metricsdir)

REASONS = ("queue_full", "write_error")
CAPACITY = 10_000  # lines (~300 bytes each: a few MiB at most)

log = logging.getLogger(__name__)


def _noop(reason: str) -> None:
    return None


def lost_counter(name: str, registry: prom.CollectorRegistry) -> prom.Counter:
    """The part's count of lost audit lines (``name``: ``tether_<part>_audit_lost``), by
    reason, each reason's series present (at 0) before the first loss."""
    import prometheus_client as prom  # noqa: PLC0415 - see the import above

    c = prom.Counter(
        name,
        "Audit lines not written, by reason (queue_full: the writer could "
        "not keep up or its output blocks; write_error: ENOSPC, EPIPE, ...)",
        ["reason"],
        registry=registry,
    )
    for reason in REASONS:
        c.labels(reason)
    return c


def counting(counter: prom.Counter) -> Callable[[str], None]:
    """``on_lost`` for ``QueuedHandler``: one more in ``counter`` for the reason."""
    return lambda reason: counter.labels(reason).inc()


def queue_lines(name: str, **kw: object) -> config.Option:
    """The part's setting of its queue's size (``TETHER_<PART>_AUDIT_QUEUE_LINES``)."""
    return config.integer(
        name,
        CAPACITY,
        "audit lines a process (each gunicorn worker) holds for "
        "its writer thread; when full (the output blocks) a line is dropped "
        "and counted, never waited for",
        minimum=1,
        maximum=1_000_000,
        **kw,
    )


class QueuedHandler(logging.Handler):
    def __init__(
        self,
        destination: str = "stdout",
        *,
        capacity: int = CAPACITY,
        on_lost: Callable[[str], None] = _noop,
        complain_every: float = 60.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__()
        self.destination = destination
        self._capacity, self._on_lost = capacity, on_lost
        self._complain_every, self._clock = complain_every, clock
        self._state = threading.Lock()
        self._pid = -1
        self._queue: queue.Queue[str | None] = queue.Queue(capacity)
        self._thread: threading.Thread | None = None
        self._fd: int | None = None
        self._lost: dict[str, int] = {}  # since the last complaint
        self._complained = float("-inf")
        self._last_error = ""

    # -- caller side -------------------------------------------------------------------------

    def emit(self, record: logging.LogRecord) -> None:
        try:
            line = self.format(record) + "\n"
        except Exception:  # noqa: BLE001 - a record that cannot be formatted is lost, not raised
            self._count("write_error", "format")
            return
        self._ensure_thread()
        try:
            self._queue.put_nowait(line)
        except queue.Full:
            self._count("queue_full", "")

    def _ensure_thread(self) -> None:
        if self._pid == os.getpid() and self._thread is not None:
            return
        with self._state:
            if self._pid == os.getpid() and self._thread is not None:
                return
            self._pid = os.getpid()  # a fresh queue and thread in a forked worker
            self._queue = queue.Queue(self._capacity)
            self._fd = None
            self._thread = threading.Thread(
                target=self._run, args=(self._queue,), name="audit-writer", daemon=True
            )
            self._thread.start()

    def _count(self, reason: str, error: str) -> None:
        try:
            self._on_lost(reason)
        except Exception:  # noqa: BLE001 - a metric must never fail the caller
            pass
        now = self._clock()
        with self._state:
            self._lost[reason] = self._lost.get(reason, 0) + 1
            if error:
                self._last_error = error
            if now - self._complained < self._complain_every:
                return
            self._complained = now
            lost, self._lost = self._lost, {}
            last = self._last_error
        # stderr is the operational log; the lost line's content is never repeated
        log.error(
            "audit lines lost (destination %s): %s%s; the part keeps serving, "
            "see the runbook TetherAuditLost",
            self._where(),
            ", ".join(f"{n} {r}" for r, n in sorted(lost.items())),
            f" (last error: {last})" if last else "",
        )

    def _where(self) -> str:
        return "stdout" if self.destination == "stdout" else "file"

    # -- writer side -------------------------------------------------------------------------

    def _run(self, q: queue.Queue[str | None]) -> None:
        while True:
            line = q.get()
            try:
                if line is None:
                    return
                self._write(line.encode("utf-8", "replace"))
            except OSError as e:
                self._count("write_error", e.strerror or type(e).__name__)
            except Exception as e:  # noqa: BLE001 - the writer thread must survive anything
                self._count("write_error", type(e).__name__)
            finally:
                q.task_done()

    def _write(self, data: bytes) -> None:
        if self.destination == "stdout":
            out = sys.stdout
            out.write(data.decode("utf-8"))
            out.flush()
            return
        if self._fd is None:
            self._fd = os.open(self.destination, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o640)
        view = memoryview(data)
        while view:
            n = os.write(self._fd, view)
            view = view[n:]

    def flush(self, timeout: float = 2.0) -> None:
        """Wait until the queue is empty (at most ``timeout`` seconds)."""
        deadline = time.monotonic() + timeout
        while (
            self._thread is not None
            and self._pid == os.getpid()
            and self._queue.unfinished_tasks
            and time.monotonic() < deadline
        ):
            time.sleep(0.01)

    def close(self) -> None:
        if self._thread is not None and self._pid == os.getpid():
            self.flush(1.0)
            try:
                self._queue.put_nowait(None)
            except queue.Full:
                pass
        super().close()
