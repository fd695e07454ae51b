"""A circuit breaker for the Director: after ``threshold`` consecutive unavailability
errors it opens for ``open_seconds`` (doubling on each failed probe up to
``max_open_seconds``); then one probe call is let through (half-open); success closes it.

While open, calls fail at once with ``errors.CircuitOpen``: an outage costs the Director
about one request per open period, not one per runtime per interval. Thread-safe; the
clock is injectable for tests.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Literal

State = Literal["closed", "open", "half_open"]
STATE_VALUE: dict[State, int] = {"closed": 0, "half_open": 1, "open": 2}


class CircuitBreaker:
    def __init__(
        self,
        threshold: int = 5,
        open_seconds: float = 10.0,
        max_open_seconds: float = 120.0,
        clock: Callable[[], float] = time.monotonic,
        on_change: Callable[[State], None] | None = None,
    ) -> None:
        self.threshold, self.open_seconds = threshold, open_seconds
        self.max_open_seconds = max_open_seconds
        self._clock, self._on_change = clock, on_change
        self._lock = threading.Lock()
        self._state: State = "closed"
        self._failures = 0
        self._opened_at = 0.0
        self._current_open = open_seconds
        self._probe_in_flight = False

    @property
    def state(self) -> State:
        with self._lock:
            return self._peek()

    def _peek(self) -> State:
        if self._state == "open" and self._clock() - self._opened_at >= self._current_open:
            return "half_open"
        return self._state

    def _set(self, state: State) -> None:
        if state != self._state:
            self._state = state
            if self._on_change is not None:
                self._on_change(state)

    def allow(self) -> bool:
        """Whether a call may go out now (in half-open: only the single probe)."""
        with self._lock:
            st = self._peek()
            if st == "closed":
                return True
            if st == "half_open" and not self._probe_in_flight:
                self._set("half_open")
                self._probe_in_flight = True
                return True
            return False

    def success(self) -> None:
        with self._lock:
            self._failures = 0
            self._probe_in_flight = False
            self._current_open = self.open_seconds
            self._set("closed")

    def failure(self) -> None:
        with self._lock:
            if self._state == "half_open" or self._probe_in_flight:
                self._probe_in_flight = False
                self._current_open = min(self.max_open_seconds, self._current_open * 2)
                self._opened_at = self._clock()
                self._set("open")
                return
            self._failures += 1
            if self._state == "closed" and self._failures >= self.threshold:
                self._opened_at = self._clock()
                self._set("open")

    def neutral(self) -> None:
        """The call got an answer that says nothing about availability (e.g. invalid
        input): the Director is up."""
        self.success()
