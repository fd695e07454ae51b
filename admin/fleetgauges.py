"""The fleet gauges of the admin part, computed at scrape time from the last snapshot
(``admin.fleet``), so they agree with the pages.

Cardinality is bounded: one series per problem kind, and
``tether_fleet_runtime_problem{runtime_id, problem}`` for at most ``PROBLEM_SERIES``
(runtime, problem) pairs, worst runtimes first; the rest is counted in
``tether_fleet_runtime_problems_omitted``. Alerts name the runtime through that label.
"""

from __future__ import annotations

import datetime
from collections.abc import Iterator

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from admin import fleet, snapshot


class FleetGauges(Collector):
    def __init__(self, refresher: snapshot.Refresher, cap: int) -> None:
        self._refresher, self._cap = refresher, cap

    def collect(self) -> Iterator[GaugeMetricFamily]:
        snap = self._refresher.get()
        age = GaugeMetricFamily(
            "tether_fleet_snapshot_age_seconds",
            "Age of the fleet listing the pages and these gauges show",
        )
        took = GaugeMetricFamily(
            "tether_fleet_snapshot_seconds", "How long the last fleet listing took"
        )
        fails = GaugeMetricFamily(
            "tether_fleet_refresh_failures", "Fleet listings that failed since the process started"
        )
        fails.add_metric([], float(self._refresher.failures))
        yield fails
        if snap is None:
            return
        now = datetime.datetime.now(datetime.UTC)
        age.add_metric([], snap.age(now))
        took.add_metric([], snap.seconds)
        total = GaugeMetricFamily("tether_fleet_runtimes", "Runtimes (Kyma CRs with a runtime ID)")
        total.add_metric([], float(len(snap.rows)))
        by = GaugeMetricFamily(
            "tether_fleet_runtime_problems", "Runtimes with each problem", labels=["problem"]
        )
        for problem, n in fleet.counts(snap.rows).items():
            by.add_metric([problem], float(n))
        pairs, omitted = fleet.problem_series(snap.rows, self._cap)
        per = GaugeMetricFamily(
            "tether_fleet_runtime_problem",
            "1 for a runtime that has a problem (the worst runtimes, capped)",
            labels=["runtime_id", "problem"],
        )
        for rid, problem in pairs:
            per.add_metric([rid, problem], 1.0)
        left = GaugeMetricFamily(
            "tether_fleet_runtime_problems_omitted",
            "(runtime, problem) pairs not exported because of the cap",
        )
        left.add_metric([], float(omitted))
        yield from (age, took, total, by, per, left)
