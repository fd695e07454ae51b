"""The leader-elected parts' wiring as plain data (``tether.runtime.elected``): which jobs each part
schedules and how, what leading and losing the Lease do, the janitor's Lease timings."""

from __future__ import annotations

import datetime
from types import SimpleNamespace
from typing import Any

from apscheduler.schedulers.base import STATE_PAUSED
from apscheduler.triggers.cron import CronTrigger
from apscheduler.triggers.interval import IntervalTrigger

from compass import service as compass_service
from enroller import main as enroller_main
from listener.janitor import main as janitor_main
from listener.janitor import settings as janitor_settings
from tether.runtime import elected


def noop(**_: Any) -> None:
    return None


def test_scheduler_is_paused_with_its_jobs_and_the_at_once_job_due_now() -> None:
    before = datetime.datetime.now(datetime.UTC)
    sched = elected.scheduler(
        [
            elected.Job(
                "a", noop, IntervalTrigger(seconds=3600), kwargs={"full": False}, at_once=True
            ),
            elected.Job("b", noop, IntervalTrigger(seconds=3600)),
        ]
    )
    try:
        assert sched.state == STATE_PAUSED
        a, b = sched.get_job("a"), sched.get_job("b")
        assert a.kwargs == {"full": False} and b.kwargs == {}
        assert a.next_run_time <= datetime.datetime.now(datetime.UTC)
        assert a.next_run_time >= before - datetime.timedelta(seconds=1)
        assert b.next_run_time > before + datetime.timedelta(seconds=3000)
        assert (a.coalesce, a.max_instances, a.misfire_grace_time) == (True, 1, None)
    finally:
        sched.shutdown(wait=False)


def test_resuming_runs_the_scheduler_and_sets_the_gauge_only_while_leading() -> None:
    calls: list[object] = []
    sched = SimpleNamespace(
        resume=lambda: calls.append("resume"), pause=lambda: calls.append("pause")
    )
    gauge = SimpleNamespace(set=calls.append)
    lead = elected.resuming(sched, gauge)  # type: ignore[arg-type]
    lead.started()
    lead.stopped()
    assert calls == [1, "resume", 0, "pause"]


def test_compass_runs_at_once_then_on_its_interval_and_resyncs_on_its_cron() -> None:
    svc = SimpleNamespace(
        settings=SimpleNamespace(interval=30.0, resync_cron="0 3 * * *"),
        job=SimpleNamespace(run=noop),
    )
    interval, resync = compass_service.jobs(svc)  # type: ignore[arg-type]
    assert (interval.id, dict(interval.kwargs), interval.at_once) == (
        "interval",
        {"full": False},
        True,
    )
    assert isinstance(interval.trigger, IntervalTrigger)
    assert interval.trigger.interval == datetime.timedelta(seconds=30)
    assert (resync.id, dict(resync.kwargs), resync.at_once) == ("resync", {"full": True}, False)
    assert isinstance(resync.trigger, CronTrigger)


def test_enroller_runs_at_once_then_on_its_interval_and_reacts_in_between() -> None:
    e = SimpleNamespace(run=noop, react=noop)
    run, react = enroller_main.jobs(e, SimpleNamespace(interval=300.0, react_seconds=5.0))  # type: ignore[arg-type]
    assert (run.id, run.func, run.at_once) == ("interval", noop, True)
    assert (react.id, react.func, react.at_once) == ("react", noop, False)
    assert react.trigger.interval == datetime.timedelta(seconds=5)


def test_the_janitors_lease_renews_within_two_thirds_of_its_duration() -> None:
    s = janitor_settings.JanitorSettings(lease_name="j", lease_namespace="ns", lease_duration=21.0)
    lease = janitor_main.lease(s)
    assert (lease.namespace, lease.name, lease.lease_duration) == ("ns", "j", 21.0)
    assert (lease.renew_deadline, lease.retry_period) == (14.0, 3.0)
    assert (
        janitor_main.lease(janitor_settings.JanitorSettings(lease_duration=2.0)).retry_period == 0.5
    )
