"""Schedules that survive the wall clock being stepped back.

APScheduler keeps each job's next run as a wall-clock time and its thread waits until the
wall clock reaches it. A node whose clock is stepped back by N (NTP correcting a clock that
ran ahead, an operator's ``date -s``) would therefore pause every job for N: the poller's
anti-entropy runs, the enroller's renewals, the janitor (seen in tests/faults/
test_clock_skew.py). ``Guard`` watches the offset between the wall clock and the monotonic
clock; when the wall clock moved back by more than ``tolerance`` seconds since its last
look, it moves every job's next run that now lies further ahead than its own period back
to "now" (a coalesced early run; the trigger's later runs follow from that run). A step
forward needs nothing: late runs are coalesced into one.

``stepped_back`` is the decision, on plain numbers.
"""

from __future__ import annotations

import datetime
import logging
import threading
import time
from collections.abc import Callable, Sequence

from apscheduler.schedulers.base import BaseScheduler

log = logging.getLogger(__name__)

PERIOD = 2.0  # seconds between looks
TOLERANCE = 5.0  # seconds of backward step ignored (NTP slews far less; a step is a step)


def offset(
    wall: Callable[[], float] = time.time, mono: Callable[[], float] = time.monotonic
) -> float:
    """The wall clock minus the monotonic clock: constant while neither is stepped."""
    return wall() - mono()


def stepped_back(before: float, after: float, tolerance: float = TOLERANCE) -> float:
    """Seconds the wall clock was stepped back between two ``offset`` readings (0.0 when
    it was not, or by no more than ``tolerance``)."""
    back = before - after
    return back if back > tolerance else 0.0


def overdue(next_run: datetime.datetime, now: datetime.datetime, period: float) -> bool:
    """A job whose next run lies more than its ``period`` ahead was pushed there by the step."""
    return (next_run - now).total_seconds() > period


def job_period(trigger: object, default: float) -> float:
    """The interval of an ``IntervalTrigger`` (plus its jitter); ``default`` for others
    (a cron trigger's next run may lie far ahead by design)."""
    interval = getattr(trigger, "interval_length", None)
    if interval is None:
        return default
    return float(interval) + float(getattr(trigger, "jitter", None) or 0.0)


class Guard:
    """One thread per process that pulls jobs forward after a backward clock step."""

    def __init__(
        self,
        schedulers: Sequence[BaseScheduler],
        *,
        period: float = PERIOD,
        tolerance: float = TOLERANCE,
    ) -> None:
        self._schedulers = list(schedulers)
        self._period, self._tolerance = period, tolerance
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True, name="clock-step-guard")

    def start(self) -> Guard:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()

    def _watch(self) -> None:
        last = offset()
        while not self._stop.wait(self._period):  # a monotonic wait
            now = offset()
            back = stepped_back(last, now, self._tolerance)
            last = now
            if back:
                moved = self.pull_forward()
                log.warning(
                    "the wall clock was stepped back by %.0f s: %d scheduled job(s) "
                    "moved to run now instead of waiting for it",
                    back,
                    moved,
                )

    def pull_forward(self) -> int:
        """Every interval job whose next run lies further ahead than its period runs now."""
        now = datetime.datetime.now(datetime.UTC)
        moved = 0
        for sched in self._schedulers:
            for job in sched.get_jobs():
                nxt = job.next_run_time
                period = job_period(job.trigger, default=float("inf"))
                if nxt is None or not overdue(nxt, now, period):
                    continue
                sched.modify_job(job.id, next_run_time=now)
                moved += 1
        return moved
