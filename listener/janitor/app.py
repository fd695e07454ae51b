"""The janitor's operations surface (``tether.base.ops``): ``/healthz``, ``/readyz``,
``/metrics``, in one thread of the leader-elected process, not under gunicorn."""

from __future__ import annotations

from collections.abc import Callable

import flask

from listener.janitor import metrics as janitor_metrics
from tether.base import ops


def create_app(
    meters: janitor_metrics.JanitorMetrics,
    ready: Callable[[], bool],
    *,
    cache_seconds: float = ops.READY_CACHE_SECONDS,
) -> flask.Flask:
    """The operations surface (``tether.base.ops``): /healthz, /readyz (leading or standing by:
    the elector and the scheduler run), /metrics."""
    return ops.scheduler_app(
        "janitor",
        meters.registry,
        ready,
        "elector or scheduler not running",
        cache_seconds=cache_seconds,
    )
