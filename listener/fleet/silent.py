"""The listener's scrape-time liveness gauges: runtimes silent longer than each configured
threshold, from the heartbeat Leases in the KCP (cached briefly), so every replica reports the
same cluster-wide numbers: alert on ``max`` over replicas (docs/listener.md)."""

from __future__ import annotations

import datetime
import logging
import threading
import time
from collections.abc import Callable, Iterator, Sequence

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from listener.fleet import heartbeat
from listener.metrics import NS
from tether.kube import gateway

log = logging.getLogger(__name__)


class SilentRuntimes(Collector):
    """``tether_listener_runtimes_silent{threshold_seconds}`` and
    ``tether_listener_runtimes_seen`` from the heartbeat Leases, cached ``ttl`` seconds, and
    ``tether_listener_heartbeats_listed`` (0 while they cannot be listed)."""

    def __init__(
        self,
        beats: heartbeat.Heartbeats,
        thresholds: Sequence[int],
        ttl: float = 15.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._beats = beats
        self._thresholds = tuple(thresholds)
        self._ttl = ttl
        self._clock = clock
        self._lock = threading.Lock()
        self._cached: tuple[float, list[datetime.datetime]] | None = None

    def _times(self) -> list[datetime.datetime] | None:
        now = self._clock()
        with self._lock:
            if self._cached is not None and now - self._cached[0] < self._ttl:
                return self._cached[1]
        try:
            times = self._beats.renew_times()
        except gateway.GatewayError as e:
            log.warning("cannot list heartbeats for metrics: %s", e)
            return None
        with self._lock:
            self._cached = (now, times)
        return times

    def collect(self) -> Iterator[Metric]:
        times = self._times()
        listed = GaugeMetricFamily(
            f"{NS}_heartbeats_listed",
            "1 when this replica could list the heartbeat Leases "
            "at this scrape, 0 when the KCP API failed (the silence alerts hold off after a "
            "KCP outage: docs/operations.md)",
        )
        listed.add_metric([], 0 if times is None else 1)
        yield listed
        if times is None:
            return
        counts = heartbeat.silent_counts(
            times, datetime.datetime.now(datetime.UTC), self._thresholds
        )
        seen = GaugeMetricFamily(
            f"{NS}_runtimes_seen", "Runtimes that have ever been seen (have a heartbeat Lease)"
        )
        seen.add_metric([], len(times))
        yield seen
        silent = GaugeMetricFamily(
            f"{NS}_runtimes_silent",
            "Runtimes not seen for longer than threshold_seconds",
            labels=["threshold_seconds"],
        )
        for th, n in counts.items():
            silent.add_metric([str(th)], n)
        yield silent

    def describe(self) -> Iterator[Metric]:
        return iter(())
