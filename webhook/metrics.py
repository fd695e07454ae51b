"""The webhook's Prometheus metrics (no per-object labels).

Built once per app with ``build(registry)``. In gunicorn every worker writes its values to
``PROMETHEUS_MULTIPROC_DIR`` and ``/metrics`` aggregates all workers (prometheus-flask-exporter
multiprocess mode); gauges say how they aggregate (queue depth: sum over live workers,
last success: max over live workers).

A review costs at most four metric writes (``tests/webhook/test_metric_writes.py`` counts
them in the value files): the route's latency histogram (a bucket and the sum), its request
counter and ``admission_requests_total{operation, outcome}``. What can be derived from those
is derived when ``/metrics`` is scraped (``QueueOutcomes``), not written per review.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Iterator

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import CounterMetricFamily
from prometheus_client.metrics_core import Metric

from tether.wire import delivery

PREFIX = "tether_webhook"
# the route's latency histogram (tether.base.ops.request_metrics); a review takes well under 1 ms
REQUEST_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0, 5.0)
ADMISSIONS = f"{PREFIX}_admission_requests"
CHANNEL_PUTS = f"{PREFIX}_channel_puts"  # the forwarder process's queue (webhook.forwardproc)
FORWARD_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


@dataclasses.dataclass(frozen=True)
class Metrics:
    admissions: Counter  # operation, outcome (queue outcomes derived: QueueOutcomes)
    channel_puts: Counter  # outcome: keys the forwarder process took from the channel
    queue_depth: Gauge
    readbacks: Counter  # result
    forwards: Counter  # result, reason
    forwarded_records: Counter  # outcome (listener's per-item outcome)
    forward_seconds: Histogram
    dispatch_seconds: Histogram
    delivery_seconds: Histogram  # outcome (listener's per-item outcome)
    last_success: Gauge
    connection_refusals: Counter  # reason (tether.http.httpconn.REASONS)
    callers_refused: Counter  # reason (webhook.caller: no-certificate, name)


def build(registry: CollectorRegistry | None) -> Metrics:
    """``registry`` None: not registered (multiprocess mode reads the value files)."""
    r = registry
    return Metrics(
        admissions=Counter(
            ADMISSIONS,
            "AdmissionReviews answered, by operation and outcome",
            ["operation", "outcome"],
            registry=r,
        ),
        channel_puts=Counter(
            CHANNEL_PUTS,
            "Keys the forwarder process took from the workers' channel, by its queue's "
            "outcome (enqueued, coalesced, overflowed; invalid: not an entry)",
            ["outcome"],
            registry=r,
        ),
        queue_depth=Gauge(
            f"{PREFIX}_queue_depth",
            "Object keys waiting for the forwarder",
            multiprocess_mode="livesum",
            registry=r,
        ),
        readbacks=Counter(
            f"{PREFIX}_readbacks",
            "Objects read back from the runtime API, by result",
            ["result"],
            registry=r,
        ),
        forwards=Counter(
            f"{PREFIX}_forwards",
            "POSTs to the listener, by result and reason",
            ["result", "reason"],
            registry=r,
        ),
        forwarded_records=Counter(
            f"{PREFIX}_forwarded_records",
            "Records acknowledged by the listener, by its outcome",
            ["outcome"],
            registry=r,
        ),
        forward_seconds=Histogram(
            f"{PREFIX}_forward_seconds",
            "Duration of one POST to the listener",
            buckets=FORWARD_BUCKETS,
            registry=r,
        ),
        dispatch_seconds=Histogram(
            f"{PREFIX}_dispatch_seconds",
            "From the admission that first enqueued a key to the "
            "start of the first POST carrying its record (queueing and read-back)",
            buckets=FORWARD_BUCKETS,
            registry=r,
        ),
        delivery_seconds=Histogram(
            f"{PREFIX}_delivery_seconds",
            "From the admission that first enqueued a key to the "
            "listener's acknowledgement (2xx) of its record, by the listener's outcome",
            ["outcome"],
            buckets=delivery.LAG_BOUNDS,
            registry=r,
        ),
        last_success=Gauge(
            f"{PREFIX}_last_forward_success_timestamp_seconds",
            "Unix time of the last successful POST to the listener",
            multiprocess_mode="livemax",
            registry=r,
        ),
        connection_refusals=Counter(
            f"{PREFIX}_connection_refusals",
            "Connections closed by a limit before a request was served (stalled handshake or "
            "head, connection caps, refused TLS), by reason",
            ["reason"],
            registry=r,
        ),
        callers_refused=Counter(
            f"{PREFIX}_callers_refused",
            "Requests for /validate refused because the caller "
            "presented no client certificate of TETHER_WEBHOOK_CLIENT_CA_FILE (no-certificate) "
            "or one of another name (name)",
            ["reason"],
            registry=r,
        ),
    )


QUEUE_OUTCOMES = {
    "coalesced": (f"{PREFIX}_queue_coalesced", "Admissions merged into a waiting entry"),
    "overflowed": (
        f"{PREFIX}_queue_overflowed",
        "Admissions refused by a full queue (left to the poller)",
    ),
}


class QueueOutcomes:
    """Scrape-time: ``tether_webhook_queue_{coalesced,overflowed}_total``, the sums of
    ``admission_requests_total`` with that outcome (the queue in the worker, or the channel
    full) and of ``channel_puts_total`` with it (the forwarder process's queue): no write
    per review. ``derive`` for ``tether.base.ops.Exposition``: the families, then these."""

    def derive(self, families: Iterable[Metric]) -> Iterator[Metric]:
        totals = dict.fromkeys(QUEUE_OUTCOMES, 0.0)
        for family in families:
            yield family
            if family.name not in (ADMISSIONS, CHANNEL_PUTS):
                continue
            for sample in family.samples:
                outcome = sample.labels.get("outcome", "")
                if sample.name == f"{family.name}_total" and outcome in totals:
                    totals[outcome] += sample.value
        for outcome, (name, documentation) in QUEUE_OUTCOMES.items():
            yield CounterMetricFamily(name, documentation, value=totals[outcome])
