"""The compass process's small HTTP surface: ``/healthz``, ``/readyz``, ``/metrics``.

Compass serves no API; this app only lets the kubelet and Prometheus look in. It runs in
one thread of the leader-elected process (werkzeug), not under gunicorn: schedulers must
not be forked into workers.
"""

from __future__ import annotations

from collections.abc import Callable

import flask
import prometheus_client as prom

from compass import metrics


def create_app(stats: metrics.Metrics, ready: Callable[[], bool]) -> flask.Flask:
    app = flask.Flask("compass")

    @app.get("/healthz")
    def healthz() -> flask.Response:
        return flask.jsonify({"status": "ok"})

    @app.get("/readyz")
    def readyz() -> flask.Response:
        ok = ready()
        resp = flask.jsonify({"status": "ok" if ok else "starting"})
        resp.status_code = 200 if ok else 503
        return resp

    @app.get("/metrics")
    def metrics_endpoint() -> flask.Response:
        return flask.Response(prom.generate_latest(stats.registry), mimetype=prom.CONTENT_TYPE_LATEST)

    @app.errorhandler(404)
    def not_found(_: Exception) -> tuple[flask.Response, int]:
        return flask.jsonify({"error": "not found", "details": flask.request.path}), 404

    @app.errorhandler(405)
    def not_allowed(_: Exception) -> tuple[flask.Response, int]:
        return flask.jsonify({"error": "method not allowed", "details": flask.request.method}), 405

    return app
