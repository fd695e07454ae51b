"""The scheduler: an interval job and a cron full resync, run only in the Lease holder.

The scheduler (``tether.runtime.elected.scheduler``, made by ``start``) starts paused;
``on_started``/``on_stopped`` (the ``LeaderElector`` callbacks) resume and pause it, and a
run in progress checks ``leading`` between pages and batches, so a replica that lost the
Lease stops within a page. Both jobs share one lock: a resync never overlaps an interval
run (``skipped-busy``). After a run the listener failed, runs are skipped until the backoff
has passed (``skipped-backoff``); a successful run resets it.
"""

from __future__ import annotations

import datetime
import logging
import threading
import time
from collections.abc import Callable

from apscheduler.schedulers.background import BackgroundScheduler
from apscheduler.triggers.cron import CronTrigger
from apscheduler.triggers.interval import IntervalTrigger

from poller import metrics, pacing, run
from poller import settings as settings_mod
from tether.runtime import elected

log = logging.getLogger(__name__)
INTERVAL_JOB, RESYNC_JOB = "poll", "resync"
_KINDS = {INTERVAL_JOB: "interval", RESYNC_JOB: "resync"}
BACKOFF_OUTCOMES = ("listener-failed", "listener-refused")


class Service:
    def __init__(
        self,
        settings: settings_mod.ScheduleSettings,
        runner: run.Runner,
        m: metrics.Metrics,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.settings = settings
        self.runner = runner
        self.metrics = m
        self._clock = clock
        self.backoff = pacing.Backoff(settings.backoff_base, settings.backoff_cap)
        self.leading = threading.Event()
        self._busy = threading.Lock()
        self.scheduler: BackgroundScheduler | None = None  # ``start``
        self.last_result: run.Result | None = None

    def _triggers(self) -> dict[str, IntervalTrigger | CronTrigger]:
        s = self.settings
        out: dict[str, IntervalTrigger | CronTrigger] = {
            INTERVAL_JOB: IntervalTrigger(
                seconds=s.interval, jitter=s.jitter or None, timezone=datetime.UTC
            )
        }
        if s.resync_cron:
            out[RESYNC_JOB] = CronTrigger.from_crontab(s.resync_cron, timezone="UTC")
        return out

    def start(self) -> BackgroundScheduler:
        """The scheduler with both jobs, started paused: its leadership resumes it."""
        self.scheduler = elected.scheduler(
            [
                elected.Job(job_id, self.tick, trigger, kwargs={"kind": _KINDS[job_id]})
                for job_id, trigger in self._triggers().items()
            ]
        )
        return self.scheduler

    def running(self) -> bool:
        return self.scheduler is not None and bool(self.scheduler.running)

    # -- leadership ------------------------------------------------------------------------

    def on_started(self) -> None:
        """Holding the Lease: schedule from now (a run at once if configured) and resume."""
        assert self.scheduler is not None, "start() first"
        self.leading.set()
        self.metrics.leader.set(1)
        now = datetime.datetime.now(datetime.UTC)
        for job_id, trigger in self._triggers().items():
            self.scheduler.reschedule_job(job_id, trigger=trigger)
            if job_id == INTERVAL_JOB and self.settings.run_on_start:
                self.scheduler.modify_job(job_id, next_run_time=now)
        self.scheduler.resume()
        log.info(
            "leading: poll runs every %.1fs (jitter %.1fs), full resync %s",
            self.settings.interval,
            self.settings.jitter,
            self.settings.resync_cron or "off",
        )

    def on_stopped(self) -> None:
        self.leading.clear()
        self.metrics.leader.set(0)
        if self.running():
            assert self.scheduler is not None
            self.scheduler.pause()
        log.info("not leading: poll runs paused")

    def shutdown(self) -> None:
        if self.leading.is_set():
            self.on_stopped()
        if self.scheduler is not None and self.scheduler.running:
            self.scheduler.shutdown(wait=True)

    # -- one tick --------------------------------------------------------------------------

    def tick(self, kind: str = "interval") -> run.Result:
        """Run once unless busy, in backoff or not leading; records metrics and backoff."""
        if not self.leading.is_set():
            return self._skipped(kind, "aborted")
        if not self.backoff.ready(self._clock()):
            return self._skipped(kind, "skipped-backoff")
        if not self._busy.acquire(blocking=False):
            return self._skipped(kind, "skipped-busy")
        try:
            t0 = self._clock()
            result = self.runner.run(full=kind == "resync", keep_going=self.leading.is_set)
            elapsed = self._clock() - t0
        finally:
            self._busy.release()
        self.last_result = result
        self.metrics.runs.labels(kind, result.outcome).inc()
        self.metrics.run_seconds.labels(kind).observe(elapsed)
        if result.outcome == "ok":
            self.backoff.succeeded()
            self.metrics.last_success.set(time.time())
            log.info(
                "%s run ok in %.2fs: %d scanned, %d digest entries, differences %s, %d sent",
                kind,
                elapsed,
                result.scanned,
                result.digest_entries,
                result.differences,
                result.sent,
            )
        elif result.outcome in BACKOFF_OUTCOMES:
            delay = self.backoff.failed(self._clock(), result.retry_after)
            log.warning(
                "%s run stopped (%s: %s); next run in %.1fs at the earliest",
                kind,
                result.outcome,
                result.detail,
                delay,
            )
        else:
            log.warning("%s run failed (%s: %s)", kind, result.outcome, result.detail)
        self.metrics.backoff_seconds.set(max(0.0, self.backoff.not_before - self._clock()))
        return result

    def _skipped(self, kind: str, outcome: str) -> run.Result:
        self.metrics.runs.labels(kind, outcome).inc()
        return run.Result(outcome)
