"""The injector's HTTP app: /healthz, /readyz and /metrics on ``TETHER_INJECTOR_BIND``."""

from __future__ import annotations

from collections.abc import Callable

import flask

from injector.metrics import Metrics
from tether.base import ops


def create_app(
    meters: Metrics, ready: Callable[[], bool], *, cache_seconds: float = ops.READY_CACHE_SECONDS
) -> flask.Flask:
    """/healthz, /readyz (leading or standing by: the elector and the scheduler run),
    /metrics."""
    probes = ops.Probes(cache_seconds=cache_seconds).ready(
        "scheduler", lambda: None if ready() else "elector or scheduler not running"
    )
    return ops.create_app("injector", probes, ops.Exposition(meters.registry).render)
