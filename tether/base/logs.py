"""Logging: JSON lines for operators, a separate audit stream, bounded messages.

Secrets, tokens, keys and ConfigMap data never go into a log record: callers log keys
(namespace/name, resourceVersion), never values. ``bounded`` cuts foreign text (a peer's
error body) before it reaches a log line.
"""

from __future__ import annotations

import datetime
import json
import logging
import sys
import threading
import time
from collections.abc import Callable, Mapping, MutableMapping
from typing import Any

from tether.base import auditwriter

AUDIT_LOGGER = "tether.audit"
_STD_ATTRS = set(vars(logging.makeLogRecord({}))) | {"message", "asctime"}


def bounded(text: object, limit: int = 300) -> str:
    s = str(text)
    return s if len(s) <= limit else s[: limit - 3] + "..."


class JSONFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, message and any ``extra`` fields."""

    def format(self, record: logging.LogRecord) -> str:
        doc: dict[str, Any] = {
            "time": datetime.datetime.fromtimestamp(record.created, datetime.UTC).isoformat(),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for k, v in vars(record).items():
            if k not in _STD_ATTRS and not k.startswith("_"):
                doc[k] = v
        if record.exc_info and record.levelno >= logging.ERROR:
            doc["exception"] = bounded(self.formatException(record.exc_info), 4000)
        return json.dumps(doc, default=str, separators=(",", ":"))


def configure(level: str = "INFO", fmt: str = "json") -> None:
    """Configure the root logger once, in an entry point."""
    handler = logging.StreamHandler(sys.stderr)
    if fmt == "json":
        handler.setFormatter(JSONFormatter())
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())


def audit_logger(
    destination: str, *, on_lost: Callable[[str], None], queue_lines: int = auditwriter.CAPACITY
) -> logging.Logger:
    """The audit logger: JSON lines on stdout or appended to a file, never propagated to
    the operational log. Configure once per process. The lines go through a bounded queue
    and a writer thread (``tether.base.auditwriter``), the only path: the caller never blocks, a
    line that cannot be written is counted by ``on_lost(reason)`` (``auditwriter.counting``
    of the part's ``auditwriter.lost_counter``)."""
    logger = logging.getLogger(AUDIT_LOGGER)
    logger.propagate = False
    logger.setLevel(logging.INFO)
    handler = auditwriter.QueuedHandler(destination, capacity=queue_lines, on_lost=on_lost)
    handler.setFormatter(JSONFormatter())
    logger.handlers[:] = [handler]
    return logger


def audit(logger: logging.Logger, event: str, **fields: Any) -> None:
    """Write one audit event. Pass keys and outcomes only, never secrets or data."""
    logger.info(event, extra={"audit": True, "event": event, **fields})


class ObjectLogger(logging.LoggerAdapter[logging.Logger]):
    """Puts an object reference (e.g. namespace/name, runtime) on every record."""

    def process(
        self, msg: Any, kwargs: MutableMapping[str, Any]
    ) -> tuple[Any, MutableMapping[str, Any]]:
        extra: Mapping[str, Any] = self.extra or {}
        kwargs["extra"] = {**extra, **kwargs.get("extra", {})}
        return msg, kwargs


class Aggregated:
    """Counts repeated audit events and writes one line per key per interval instead of a
    line each (refusals of unauthenticated callers can arrive by the thousand).

    ``record(key, **fields)`` counts; the first event of a key in an interval is written at
    once (with ``count: 1``), the rest are summed and written as one ``<event>_aggregated``
    line with the count when the interval has passed (on the next ``record`` or ``flush``).
    Keys must come from a bounded set (reason codes), never from client input.
    """

    def __init__(
        self, logger: logging.Logger, event: str, interval: float = 60.0, clock: Any = None
    ) -> None:
        self._logger = logger
        self._event = event
        self._interval = interval
        self._clock = clock or time.monotonic
        self._lock = threading.Lock()
        self._pending: dict[str, tuple[int, dict[str, Any]]] = {}
        self._window_start: dict[str, float] = {}

    def record(self, key: str, **fields: Any) -> None:
        now = self._clock()
        first = False
        due: list[tuple[str, int, dict[str, Any]]] = []
        with self._lock:
            start = self._window_start.get(key)
            if start is None or now - start >= self._interval:
                count, last = self._pending.pop(key, (0, {}))
                if count:
                    due.append((key, count, last))
                self._window_start[key] = now
                first = True
            else:
                count, _ = self._pending.get(key, (0, {}))
                self._pending[key] = (count + 1, fields)
        for k, n, last in due:
            audit(self._logger, self._event + "_aggregated", key=k, count=n, **last)
        if first:
            audit(self._logger, self._event, key=key, count=1, **fields)

    def flush(self) -> None:
        """Write what has been counted and not written yet."""
        with self._lock:
            due = [(k, n, last) for k, (n, last) in self._pending.items() if n]
            self._pending.clear()
        for k, n, last in due:
            audit(self._logger, self._event + "_aggregated", key=k, count=n, **last)
