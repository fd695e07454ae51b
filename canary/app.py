"""The canary's HTTP app: /healthz, /readyz and /metrics on ``TETHER_CANARY_BIND``."""

from __future__ import annotations

from collections.abc import Callable

import flask

from canary.metrics import Metrics
from tether.base import ops


def create_app(
    meters: Metrics, ready: Callable[[], bool], *, cache_seconds: float = ops.READY_CACHE_SECONDS
) -> flask.Flask:
    """/healthz, /readyz (leading or standing by: the elector and the scheduler run),
    /metrics."""
    return ops.scheduler_app(
        "canary",
        meters.registry,
        ready,
        "elector or scheduler not running",
        cache_seconds=cache_seconds,
    )
