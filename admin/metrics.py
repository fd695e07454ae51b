"""The admin part's metrics: its requests, sign-ins, sessions and throttled reviews, and the
fleet gauges.

The fleet gauges are computed at scrape time from the last snapshot (``admin.fleet``), so
they agree with the pages. Cardinality is bounded: one series per problem kind, and
``tether_fleet_runtime_problem{runtime_id, problem}`` for at most ``PROBLEM_SERIES``
(runtime, problem) pairs, worst runtimes first; the rest is counted in
``tether_fleet_runtime_problems_omitted``. Alerts name the runtime through that label.
"""

from __future__ import annotations

import datetime
from collections.abc import Iterator

import prometheus_client as prom
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from admin import fleet, snapshot
from admin import settings as settings_mod
from tether.base import auditwriter


class Metrics(Collector):
    def __init__(self, refresher: snapshot.Refresher, s: settings_mod.Settings) -> None:
        self._refresher, self._cap = refresher, s.problem_series
        self.registry = prom.CollectorRegistry(auto_describe=True)
        self.requests = prom.Counter(
            "tether_admin_requests_total",
            "Page requests by page and status code",
            ["page", "code"],
            registry=self.registry,
        )
        self.request_seconds = prom.Histogram(
            "tether_admin_request_seconds",
            "Time to answer a page",
            ["page"],
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.2, 0.5, 1, 2.5),
            registry=self.registry,
        )
        self.auth = prom.Counter(
            "tether_admin_auth_total",
            "Authentication and authorization "
            "outcomes (no_token, no_session, unauthenticated, cross_site, denied, "
            "allowed, error)",
            ["outcome"],
            registry=self.registry,
        )
        self.reviews = prom.Counter(
            "tether_admin_reviews_total",
            "TokenReviews and SubjectAccessReviews sent to the KCP (not cached)",
            ["kind"],
            registry=self.registry,
        )
        self.throttled = prom.Counter(
            "tether_admin_throttled_total",
            "Requests answered 429 because their source had no TokenReview left",
            registry=self.registry,
        )
        self.sessions = prom.Gauge(
            "tether_admin_sessions", "Sign-in sessions held", registry=self.registry
        )
        self.audit_lost = auditwriter.lost_counter("tether_admin_audit_lost", self.registry)

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
