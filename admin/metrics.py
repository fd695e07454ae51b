"""The admin part's metrics: its requests, sign-ins, sign-outs and throttled reviews. The fleet
gauges, computed at scrape time from the last snapshot, are ``admin.fleetgauges``."""

from __future__ import annotations

import prometheus_client as prom

from tether.base import auditwriter


class Metrics:
    def __init__(self) -> None:
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
            "outcomes (no_token, no_session, unauthenticated, proxy_refused, cross_site, "
            "denied, allowed, error)",
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
        self.sign_ins = prom.Counter(
            "tether_admin_sign_ins_total",
            "Sessions issued (a sealed cookie each; the server keeps nothing per session)",
            registry=self.registry,
        )
        self.signouts = prom.Gauge(
            "tether_admin_signouts",
            "Entries of the sign-out ConfigMap as this replica last read or wrote it",
            registry=self.registry,
        )
        self.audit_lost = auditwriter.lost_counter("tether_admin_audit_lost", self.registry)
