"""The enroller's operations surface (``tether.base.ops``): ``/healthz``, ``/readyz``,
``/metrics``.

The enroller serves no API; this app only lets the kubelet and Prometheus look in. It runs in
one thread of the leader-elected process (werkzeug, ``tether.base.ops.Server``), not under
gunicorn: schedulers must not be forked into workers.
"""

from __future__ import annotations

from collections.abc import Callable

import flask

from enroller import metrics
from tether.base import ops


def create_app(
    stats: metrics.Metrics,
    ready: Callable[[], bool],
    *,
    cache_seconds: float = ops.READY_CACHE_SECONDS,
) -> flask.Flask:
    return ops.scheduler_app(
        "enroller", stats.registry, ready, "scheduler not started", cache_seconds=cache_seconds
    )
