"""The webhook's Flask application factory: ``POST /validate`` (``webhook.validate``; only
from the API server's client certificate when one is configured, ``webhook.caller``) and
the operations surface (``tether.base.ops``: ``/healthz``, ``/readyz``, ``/metrics``, JSON errors,
request log, the request metrics ``tether_webhook_http_*`` of prometheus-flask-exporter) on
the same TLS port.

    create_app(settings, svc)        # webhook.server, per gunicorn worker; tests
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import flask

from tether.base import ops
from webhook import caller, metrics, validate
from webhook import services as services_mod
from webhook import settings as settings_mod

PREFIX = "tether_webhook"


def _serving_problem(svc: services_mod.Services) -> str | None:
    if svc.serving is not None and not svc.serving.loaded():
        return svc.serving.last_error or "serving certificate not loaded"
    return None


def _forwarder_problem(svc: services_mod.Services) -> str | None:
    fwd = svc.forwarder
    if fwd is None or not fwd.alive():
        return "forwarder not running"
    if not fwd.certs_loaded():
        return "client certificate not loaded"
    return None


def create_app(
    settings: settings_mod.Settings | None = None, svc: services_mod.Services | None = None
) -> flask.Flask:
    """``settings``: default from the TETHER_WEBHOOK_* variables; ``svc``: default built
    from them (``services.build``)."""
    s = settings or settings_mod.from_env()
    svc = svc or services_mod.build(s)
    app = flask.Flask("webhook")
    app.config["MAX_CONTENT_LENGTH"] = s.server.max_body_bytes
    app.extensions[services_mod.KEY] = svc
    probes = (
        ops.Probes()
        .ready("serving-certificate", lambda: _serving_problem(svc))
        .ready("forwarder", lambda: _forwarder_problem(svc))
    )
    # per route (tether_webhook_http_*): a review's one latency histogram
    exporter = ops.request_metrics(app, "webhook", svc.registry, buckets=metrics.REQUEST_BUCKETS)
    exposition = ops.Exposition(svc.registry, derive=metrics.QueueOutcomes().derive)
    ops.init_app(app, probes, exposition.render)
    app.register_blueprint(validate.bp)
    # the API server's call in plain WSGI (webhook.validate.FastPath), the rest through Flask
    app.wsgi_app = validate.FastPath(app.wsgi_app, svc, _route_metrics(exporter.registry))  # type: ignore[method-assign]
    if s.server.client_ca_file:  # only the API server's certificate may call /validate
        app.wsgi_app = caller.Check(  # type: ignore[method-assign]
            app.wsgi_app,
            s.server.client_names,
            lambda reason: svc.metrics.callers_refused.labels(reason).inc(),
        )
    return app


def _route_metrics(registry: Any) -> Callable[[str, float, bool], None]:
    """Records a ``POST /validate`` answered outside Flask in the request metrics
    prometheus-flask-exporter keeps for the route (``tether.base.ops.request_metrics``)."""
    names = getattr(registry, "_names_to_collectors", {})
    duration = names[f"{PREFIX}_http_request_duration_seconds"]
    total, raised = (
        names[f"{PREFIX}_http_request_total"],
        names[f"{PREFIX}_http_request_exceptions_total"],
    )
    children: dict[str, tuple[Any, Any]] = {}

    def observe(status: str, seconds: float, exception: bool) -> None:
        pair = children.get(status)
        if pair is None:
            pair = children[status] = (
                duration.labels(method="POST", route="/validate", status=status),
                total.labels(method="POST", status=status),
            )
        pair[0].observe(seconds)
        pair[1].inc()
        if exception:
            raised.labels(method="POST", status=status).inc()

    return observe
