"""A wall clock stepped back must not pause scheduled runs (tether.runtime.clockstep): the decision
on plain numbers, and ``Guard.pull_forward`` on a real APScheduler scheduler whose job was
pushed ahead as a backward step pushes it."""

from __future__ import annotations

import datetime
import threading

from apscheduler.schedulers.background import BackgroundScheduler
from apscheduler.triggers.cron import CronTrigger
from apscheduler.triggers.interval import IntervalTrigger

from tether.runtime import clockstep

UTC = datetime.UTC


def test_a_step_back_beyond_the_tolerance_is_seen() -> None:
    assert clockstep.stepped_back(1000.0, 880.0) == 120.0
    assert clockstep.stepped_back(1000.0, 1000.0) == 0.0
    assert clockstep.stepped_back(1000.0, 997.0) == 0.0  # within the tolerance (slewing)
    assert clockstep.stepped_back(1000.0, 1300.0) == 0.0  # forward: late runs coalesce


def test_the_offset_is_constant_without_a_step() -> None:
    ticks = iter([100.0, 160.0])
    monos = iter([5.0, 65.0])
    first = clockstep.offset(lambda: next(ticks), lambda: next(monos))
    second = clockstep.offset(lambda: next(ticks), lambda: next(monos))
    assert first == second == 95.0


def test_only_a_run_further_ahead_than_its_period_was_pushed_by_a_step() -> None:
    now = datetime.datetime(2026, 12, 5, tzinfo=UTC)
    assert clockstep.overdue(now + datetime.timedelta(seconds=200), now, 60.0)
    assert not clockstep.overdue(now + datetime.timedelta(seconds=59), now, 60.0)
    assert clockstep.job_period(IntervalTrigger(seconds=60, jitter=6), 0.0) == 66.0
    assert clockstep.job_period(CronTrigger.from_crontab("0 3 * * *"), 7.0) == 7.0


def test_pull_forward_runs_a_pushed_interval_job_now_and_leaves_the_others() -> None:
    sched = BackgroundScheduler(timezone=UTC)
    ran = threading.Event()
    far = datetime.datetime.now(UTC) + datetime.timedelta(minutes=10)  # as after a 10 min step back
    sched.add_job(ran.set, IntervalTrigger(seconds=30, timezone=UTC), id="poll", next_run_time=far)
    sched.add_job(lambda: None, IntervalTrigger(seconds=30, timezone=UTC), id="soon")
    sched.add_job(lambda: None, CronTrigger.from_crontab("0 3 * * *", timezone=UTC), id="nightly")
    sched.start()
    try:
        before = {j.id: j.next_run_time for j in sched.get_jobs()}
        moved = clockstep.Guard([sched]).pull_forward()
        assert moved == 1
        assert ran.wait(10), "the pushed job did not run after being pulled forward"
        after = {j.id: j.next_run_time for j in sched.get_jobs()}
        assert after["nightly"] == before["nightly"] and after["soon"] == before["soon"]
        assert after["poll"] < far  # its next run follows from the run just made
    finally:
        sched.shutdown(wait=False)
