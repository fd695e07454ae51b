"""Enroller metrics, on a registry of their own. Labels are bounded: states, reasons,
expiry bands, verbs; never a runtime or Kyma name."""

from __future__ import annotations

import prometheus_client as prom

from tether.base import auditwriter
from tether.runtime import runmetrics

STATES = ("Ready", "Failed", "Removing")
EXPIRY_BANDS = ("expired", "lt1d", "lt7d", "lt30d", "ge30d")
SKIP_REASONS = ("Busy", "NoWorker")
WATCH_STATES = ("Ready", "Pending", "Invalid")


class Metrics:
    def __init__(self, registry: prom.CollectorRegistry | None = None) -> None:
        self.registry = r = registry or prom.CollectorRegistry()
        self.runtimes = runmetrics.runtimes("tether_enroller_runtimes", "enrollment", r)
        self.failures = prom.Counter(
            "tether_enroller_failures_total", "Failed enrollments by reason", ["reason"], registry=r
        )
        self.certificates = prom.Gauge(
            "tether_enroller_certificates",
            "Runtime client certificates by days to expiry",
            ["expiry"],
            registry=r,
        )
        self.issued = prom.Counter(
            "tether_enroller_certificates_issued_total",
            "Certificates issued, by kind and cause",
            ["kind", "cause"],
            registry=r,
        )
        self.applies = prom.Counter(
            "tether_enroller_applies_total",
            "Full applies of a runtime's objects, by cause",
            ["cause"],
            registry=r,
        )
        self.requests = prom.Counter(
            "tether_enroller_runtime_requests_total",
            "Requests to runtime API servers by verb",
            ["verb"],
            registry=r,
        )
        self.run_seconds = prom.Histogram(
            "tether_enroller_run_seconds",
            "Duration of a run over all Kyma CRs",
            buckets=runmetrics.RUN_SECONDS_BUCKETS,
            registry=r,
        )
        self.last_success = prom.Gauge(
            "tether_enroller_last_success_timestamp_seconds",
            "End of the last run in which no runtime failed for a reason of the enroller's own "
            "(the CA or the KCP)",
            registry=r,
        )
        self.ca_not_after = prom.Gauge(
            "tether_enroller_ca_not_after_timestamp_seconds",
            "Expiry of the current watcher CA",
            registry=r,
        )
        self.skipped = prom.Counter(
            "tether_enroller_skipped_total",
            "Runtimes not worked on in a run, by reason: Busy (its "
            "earlier work outlived its deadline and still runs), NoWorker (every worker thread "
            "is held by such work)",
            ["reason"],
            registry=r,
        )
        self.straggling = prom.Gauge(
            "tether_enroller_straggling_workers",
            "Worker threads still running a runtime's work "
            "past its deadline, at the end of the last run",
            registry=r,
        )
        self.quarantined = prom.Gauge(
            "tether_enroller_quarantined_runtimes",
            "Runtimes holding a client certificate of a "
            "CA no longer trusted (they missed a CA rollover's deadline), "
            "at the end of the last run",
            registry=r,
        )
        self.rate_limited = prom.Counter(
            "tether_enroller_issuance_refused_total",
            "Certificates not issued because their runtime reached its issuance limit",
            registry=r,
        )
        self.watches = prom.Gauge(
            "tether_enroller_watches",
            "Watches of the KCP namespace at the end of the last full run, "
            "by state: Ready (in force in every runtime it selects), Pending (not in some yet), "
            "Invalid (not usable: skipped)",
            ["state"],
            registry=r,
        )
        self.rollout_phase, self.rollout_wave, self.rollout_halts = _rollout(r)
        self.leader = runmetrics.leader("tether_enroller_leader", r)
        self.audit_lost = auditwriter.lost_counter("tether_enroller_audit_lost", r)
        for s in STATES:
            self.runtimes.labels(s)
        for b in EXPIRY_BANDS:
            self.certificates.labels(b)
        for reason in SKIP_REASONS:
            self.skipped.labels(reason)
        for state in WATCH_STATES:
            self.watches.labels(state)


def _rollout(r: prom.CollectorRegistry) -> tuple[prom.Gauge, prom.Gauge, prom.Counter]:
    """The runtime bundle's rollout (``enroller.rollouts``)."""
    return (
        prom.Gauge(
            "tether_enroller_bundle_rollout_phase",
            "The runtime bundle's rollout: 1 for its "
            "phase (Progressing, Halted, RolledBack, Complete), 0 for the others",
            ["phase"],
            registry=r,
        ),
        prom.Gauge(
            "tether_enroller_bundle_rollout_wave",
            "The rollout's current (or failed) wave, from 1 (0: none)",
            registry=r,
        ),
        prom.Counter(
            "tether_enroller_bundle_rollout_halts_total",
            "Rollouts halted by a failed health gate",
            registry=r,
        ),
    )


def expiry_band(days_left: float) -> str:
    if days_left <= 0:
        return "expired"
    if days_left < 1:
        return "lt1d"
    if days_left < 7:
        return "lt7d"
    if days_left < 30:
        return "lt30d"
    return "ge30d"
