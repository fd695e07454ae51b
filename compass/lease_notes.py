"""What compass publishes on its Lease for the admin pages' Compass page, and the Events of
its circuit breaker.

Annotations of the Lease (written by the elector with its next renewal, ``tether.runtime.leader``):

- ``tether.kyma-project.io/breaker``: ``closed``, ``open`` or ``half-open``;
- ``tether.kyma-project.io/director-errors``: JSON list, newest first, of at most
  ``MAX_ERRORS`` objects ``{"at": RFC 3339 UTC, "operation": str, "message": str}`` with
  ``message`` at most ``MESSAGE_LIMIT`` characters (already scrubbed by ``compass.errors``).

Each is handed to the elector only when its value changes. The breaker opening (from
closed) and closing are Events on the Lease (``CircuitOpened`` Warning, ``CircuitClosed``);
the breaker changes state under its lock, so they are queued and sent by ``flush`` (after
each run), never from inside the lock.
"""

from __future__ import annotations

import collections
import datetime
import json
import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import NamedTuple

from compass import breaker as breaker_mod
from compass import errors
from tether.base import logs
from tether.kube import apitypes, events

log = logging.getLogger(__name__)

MAX_ERRORS = 5
MESSAGE_LIMIT = 200
BREAKER_VALUE: dict[breaker_mod.State, str] = {
    "closed": "closed",
    "open": "open",
    "half_open": "half-open",
}

Publish = Callable[..., None]  # LeaderElector.annotate(values, *, keep=False)


class DirectorErrorNote(NamedTuple):
    at: str
    operation: str
    message: str


def _stamp(now: datetime.datetime) -> str:
    return now.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def add_error(
    notes: Sequence[DirectorErrorNote], now: datetime.datetime, operation: str, message: str
) -> tuple[DirectorErrorNote, ...]:
    """The list with one more error, newest first, at most ``MAX_ERRORS``; the same error
    as the newest again only moves its time (the list shows distinct errors). Pure."""
    new = DirectorErrorNote(
        _stamp(now), operation[:64], logs.bounded(errors.scrub(message), MESSAGE_LIMIT)
    )
    rest = list(notes)
    if rest and (rest[0].operation, rest[0].message) == (new.operation, new.message):
        rest = rest[1:]
    return (new, *rest)[:MAX_ERRORS]


def errors_value(notes: Sequence[DirectorErrorNote]) -> str:
    return json.dumps([n._asdict() for n in notes], separators=(",", ":"))


def breaker_event(was: breaker_mod.State, now: breaker_mod.State) -> tuple[str, str, bool] | None:
    """(reason, message, warning) of the Event for a breaker transition, if any: opening
    from closed and closing (a failed probe re-opening it is no news). Pure."""
    if now == "open" and was == "closed":
        return (
            "CircuitOpened",
            "the Director circuit breaker opened after consecutive "
            "unavailability errors: Director calls fail at once until a probe succeeds",
            True,
        )
    if now == "closed" and was != "closed":
        return "CircuitClosed", "the Director circuit breaker closed: a probe call succeeded", False
    return None


def _utcnow() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


class LeaseNotes:
    """Thread-safe. ``publish`` (the elector's ``annotate``) is attached once the elector
    exists; before that (and with ``--once``) nothing is published."""

    def __init__(
        self,
        recorder: events.Recorder | None = None,
        lease: events.Ref | None = None,
        *,
        now: Callable[[], datetime.datetime] = _utcnow,
    ) -> None:
        self._recorder, self._lease, self._now = recorder, lease, now
        self._lock = threading.Lock()
        self._publish: Publish | None = None
        self._breaker: breaker_mod.State = "closed"
        self._errors: tuple[DirectorErrorNote, ...] = ()
        self._sent: dict[str, str] = {}
        self._events: collections.deque[tuple[str, str, bool]] = collections.deque(maxlen=8)

    def attach(self, publish: Publish) -> None:
        with self._lock:
            self._publish = publish
            self._sent.clear()
        self._offer({apitypes.BREAKER_ANNOTATION: BREAKER_VALUE[self._breaker]}, keep=True)

    @property
    def director_errors(self) -> tuple[DirectorErrorNote, ...]:
        return self._errors

    def breaker_changed(self, state: breaker_mod.State) -> None:
        """The breaker's ``on_change`` (called under its lock: no I/O here)."""
        with self._lock:
            was, self._breaker = self._breaker, state
            ev = breaker_event(was, state)
            if ev is not None:
                self._events.append(ev)
        self._offer({apitypes.BREAKER_ANNOTATION: BREAKER_VALUE[state]}, keep=True)

    def director_error(self, operation: str, err: errors.DirectorError) -> None:
        """The Director client's ``on_error``."""
        with self._lock:
            self._errors = add_error(self._errors, self._now(), operation, str(err))
            value = errors_value(self._errors)
        self._offer({apitypes.DIRECTOR_ERRORS_ANNOTATION: value}, keep=False)

    def _offer(self, values: Mapping[str, str], *, keep: bool) -> None:
        with self._lock:
            publish = self._publish
            changed = {k: v for k, v in values.items() if self._sent.get(k) != v}
            if publish is None or not changed:
                return
            self._sent.update(changed)
        try:
            publish(changed, keep=keep)
        except Exception as e:  # noqa: BLE001 - publishing never stops a call
            log.warning("lease annotations not published: %s", logs.bounded(e, 200))

    def flush(self) -> None:
        """Send the queued breaker Events (outside any lock)."""
        while True:
            with self._lock:
                if not self._events:
                    return
                reason, message, warning = self._events.popleft()
            if self._recorder is not None and self._lease is not None:
                self._recorder.emit(self._lease, reason, message, warning=warning)
