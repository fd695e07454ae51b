"""The Flask application factory of the listener.

    gunicorn 'listener.app:create_app()'        # settings from TETHER_LISTENER_* variables
    tether listener                             # the same, with TLS set up (listener.server)

Routes: the runtime API (``listener.api``) and ``/openapi.json`` on the data port;
``/readyz`` (client CA loaded and the KCP API answering an authorized list, cached 2 s
whatever the result) and ``/metrics`` on the operations port only; ``/healthz`` on both. Every error answer is JSON; an unexpected exception is logged and
answered 500 without details (no client input is meant to reach that).
"""

from __future__ import annotations

import logging
import time
from typing import Any

from flask import Flask, Response, g, request
from kubernetes import client
from werkzeug.exceptions import HTTPException

from common import kube
from listener import api, openapi, responses, services, settings, store

log = logging.getLogger(__name__)
READY_CACHE_SECONDS = 2.0
DRAIN_BYTES = 64 * 1024  # a refused body longer than this is not read: the connection closes


def create_app(
    config: settings.Settings | None = None, *, kcp: client.ApiClient | None = None
) -> Flask:
    s = config or settings.from_env()
    kcp = kcp or kube.api_client(s.kubeconfig)
    kcp.configuration.connection_pool_maxsize = max(4, s.threads)
    app = Flask("listener")
    app.config["MAX_CONTENT_LENGTH"] = s.max_body_bytes
    svc = services.build(s, kcp)
    app.extensions[services.KEY] = svc
    svc.cas.get()
    app.register_blueprint(api.bp)
    _register_operations(app, svc)
    _register_hooks(app, svc)
    return app


def _port(bind: str) -> str:
    return bind.rpartition(":")[2]


def _register_operations(app: Flask, svc: services.Services) -> None:
    """``/healthz`` on both ports; ``/readyz`` and ``/metrics`` only on the operations port
    (``ops_bind``), never on the data port the internet reaches; the runtime API only on
    the data port."""
    openapi_doc = openapi.OPENAPI_FILE.read_bytes()
    ops_port = _port(svc.settings.ops_bind)
    ready: list[Any] = [0.0, []]  # until, problems: failures are cached like successes

    @app.before_request
    def ports() -> Response | None:
        on_ops = str(request.environ.get("SERVER_PORT", "")) == ops_port
        rule = str(request.url_rule) if request.url_rule is not None else ""
        if rule in ("/readyz", "/metrics") and not on_ops:
            return responses.error(404, "not found", f"served on the operations port {ops_port}")
        if rule.startswith("/v1/") and on_ops:
            return responses.error(404, "not found", "the runtime API is on the data port")
        return None

    @app.get("/healthz")
    def healthz() -> Response:
        return responses.ok({"status": "ok"})

    @app.get("/readyz")
    def readyz() -> Response:
        if time.monotonic() >= ready[0]:
            problems = []
            if not svc.cas.get() or svc.cas.error:
                problems.append({"check": "client-ca", "message": svc.cas.error or "no CA loaded"})
            try:
                svc.store.ping()
            except store.Unavailable as e:
                problems.append({"check": "kcp-api", "message": str(e)})
            ready[:] = [time.monotonic() + READY_CACHE_SECONDS, problems]
        if ready[1]:
            return responses.error(503, "not ready", ready[1], retry_after=svc.settings.retry_after)
        return responses.ok({"status": "ready"})

    @app.get("/metrics")
    def metrics() -> Response:
        return Response(svc.metrics.render([svc.silent]),
                        mimetype="text/plain; version=0.0.4; charset=utf-8")

    @app.get("/openapi.json")
    def openapi_json() -> Response:
        return Response(openapi_doc, mimetype="application/json")


def _drain(environ: dict[str, Any], limit: int) -> bool:
    """Read what is left of the request body (at most ``limit`` bytes) before answering.

    A client sends its whole body before it reads the answer; when a request is refused
    before its body was read (401/403/413/415...), gunicorn would discard at most 64 KiB and
    then close the connection, and the client would see a broken connection instead of the
    refusal. False when the body was longer than ``limit`` (the connection then closes)."""
    stream = environ.get("wsgi.input")
    if stream is None:
        return True
    drained = 0
    try:
        while drained <= limit:
            chunk = stream.read(64 * 1024)
            if not chunk:
                return True
            drained += len(chunk)
    except Exception:  # noqa: BLE001 - a broken body or a peer gone: just close
        return False
    return False


def _register_hooks(app: Flask, svc: services.Services) -> None:
    @app.before_request
    def start_timer() -> None:
        g.started = time.perf_counter()

    @app.after_request
    def count(resp: Response) -> Response:
        route = str(request.url_rule) if request.url_rule is not None else "unmatched"
        svc.metrics.requests.labels(route, request.method if route != "unmatched" else "other",
                                    str(resp.status_code)).inc()
        started = g.get("started")
        if started is not None:
            svc.metrics.request_seconds.labels(route).observe(time.perf_counter() - started)
        resp.headers.setdefault("Cache-Control", "no-store")
        if not _drain(request.environ, DRAIN_BYTES):
            resp.headers["Connection"] = "close"
        return resp

    @app.errorhandler(HTTPException)
    def http_error(e: HTTPException) -> Response:
        code = e.code or 500
        return responses.error(code, (e.name or "error").lower(), e.description)

    @app.errorhandler(Exception)
    def unexpected(e: Exception) -> Response:
        log.error("unexpected error in %s %s", request.method, request.url_rule, exc_info=e)
        return responses.error(500, "internal error", None)
