"""The enroller's operations surface: /healthz, /readyz (its scheduler runs), /metrics
(``tether.base.ops.scheduler_app``, in a thread of the leader-elected process)."""

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
