"""Health, readiness and metrics over plain HTTP (probes and Prometheus inside the pod).

``create_app(settings, status)`` is a Flask app served by werkzeug's threaded WSGI server
in a daemon thread (``serve``): one process, three cheap endpoints, no gunicorn needed.

* ``/healthz``: 200 while the scheduler and the leader election thread run, else 503.
* ``/readyz``: 200 when healthy and the runtime client certificate loads, else 503.
* ``/metrics``: Prometheus text format (``poller.metrics``).
"""

from __future__ import annotations

import threading
from typing import Protocol

import werkzeug.serving
from flask import Flask, Response, jsonify

from poller import settings as settings_mod

EXTENSION = "tether_poller"


class Status(Protocol):
    def healthy(self) -> tuple[bool, str]: ...

    def ready(self) -> tuple[bool, str]: ...

    def exposition(self) -> bytes: ...


def create_app(settings: settings_mod.Settings, status: Status) -> Flask:
    app = Flask("poller")
    app.extensions[EXTENSION] = status

    def answer(result: tuple[bool, str]) -> Response:
        ok, why = result
        resp = jsonify({"status": "ok"} if ok else {"error": "unavailable", "details": why})
        resp.status_code = 200 if ok else 503
        return resp

    @app.get("/healthz")
    def healthz() -> Response:
        return answer(status.healthy())

    @app.get("/readyz")
    def readyz() -> Response:
        return answer(status.ready())

    @app.get("/metrics")
    def metrics() -> Response:
        return Response(status.exposition(), mimetype="text/plain; version=0.0.4")

    @app.errorhandler(404)
    def not_found(_: Exception) -> tuple[Response, int]:
        return jsonify({"error": "not found", "details": "try /healthz, /readyz or /metrics"}), 404

    @app.errorhandler(405)
    def not_allowed(_: Exception) -> tuple[Response, int]:
        return jsonify({"error": "method not allowed", "details": "only GET"}), 405

    return app


class Server:
    def __init__(self, app: Flask, bind: str) -> None:
        host, _, port = bind.rpartition(":")
        self._server = werkzeug.serving.make_server(host.strip("[]"), int(port), app, threaded=True)
        self.port = self._server.server_port
        self._thread = threading.Thread(target=self._server.serve_forever, name="http",
                                        daemon=True)

    def start(self) -> Server:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._thread.join(5)
