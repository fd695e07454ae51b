"""The injector's election wiring (no API server): leading resumes its jobs and reads the
Watch list at once; losing the Lease pauses them and stops every worker."""

from __future__ import annotations

import threading
from typing import Any, cast

from apscheduler.triggers.interval import IntervalTrigger

from injector import main
from injector.metrics import Metrics
from tether.runtime import elected


class Stub:
    """Stands for ``injector.injector.Injector`` (its workers need a KCP): records the calls."""

    def __init__(self) -> None:
        self.refreshed = threading.Event()
        self.stopped = 0
        self.active = False

    def refresh(self) -> None:
        self.refreshed.set()

    def stop_all(self) -> None:
        self.stopped += 1


def test_leading_reads_the_watches_at_once_and_losing_stops_every_worker() -> None:
    meters, inj = Metrics(), Stub()
    sched = elected.scheduler(
        [
            elected.Job("watches", inj.refresh, IntervalTrigger(seconds=3600)),
            elected.Job("resync", lambda: None, IntervalTrigger(seconds=3600)),
        ]
    )
    try:
        lead = main.leadership(sched, meters, cast(Any, inj))
        assert not inj.refreshed.wait(0.3)  # paused until leading
        lead.started()
        assert inj.refreshed.wait(5) and meters.leader._value.get() == 1 and inj.active
        lead.stopped()
        assert inj.stopped == 1 and meters.leader._value.get() == 0
        inj.refreshed.clear()
        assert not inj.refreshed.wait(0.3)
    finally:
        sched.shutdown(wait=False)
