"""The Flask application factory of the listener.

    gunicorn 'listener.app:create_app()'        # settings from TETHER_LISTENER_* variables
    tether listener                             # the same, with TLS set up (listener.server)

Blueprints: the runtime API (``listener.edge.api``, ``listener.edge.stateapi``,
``listener.edge.watchstate``) and ``edge``
(``/openapi.json``, and the hooks every request goes through: ports, request metrics, drain)
on the data port; the operations surface (``tether.base.ops``) with ``/readyz`` (serving
certificate and client CA loaded, their last reload good, and the KCP API answering an
authorized list; cached 2 s whatever the result) and ``/metrics`` on the operations port
only; ``/healthz`` on both.
Every error answer is JSON; an unexpected exception is logged and answered 500 without
details (no client input is meant to reach that).

Request metrics: prometheus-flask-exporter's (``tether_listener_http_request_duration_seconds
{method,route,status}`` and the rest, ``tether.base.ops.request_metrics``), in the listener's
registry and served by ``tether.base.ops``'s ``/metrics`` on the operations port (the exporter's
own multiprocess ``/metrics`` would build a registry of the value files only and drop the
scrape-time collector of silent runtimes, so it serves none); and, counted here because
the alerts and dashboards select them, ``tether_listener_requests_total{route,method,code}``
and ``tether_listener_request_seconds{route}``.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from flask import Blueprint, Flask, Response, current_app, g, request

from listener import metrics
from listener import settings as settings_mod
from listener.edge import api, openapi, responses, services, stateapi, watchstate
from listener.fleet import viewclient as view_client
from tether.base import ops, tlsreload
from tether.http import httpworker
from tether.kube import gateway

log = logging.getLogger(__name__)
DRAIN_BYTES = 64 * 1024  # a refused body longer than this is not read: the connection closes
OPENAPI_KEY = "tether.listener.openapi"  # app.extensions[OPENAPI_KEY]: the document's bytes

# what every request goes through (ports, request metrics, drain) and /openapi.json
edge = Blueprint("edge", __name__)


def create_app(
    settings: settings_mod.Settings | None = None,
    *,
    kcp: gateway.Kube | None = None,
    serving: tlsreload.Watched[Any] | None = None,
    view_socket: str | None = None,
) -> Flask:
    """``settings``: default from the TETHER_LISTENER_* variables; ``serving``: the TLS
    context the server hands to gunicorn (``listener.server``), so that a failed reload of
    it shows in readiness; ``view_socket``: the pod's view (``listener.view``), None: none."""
    s = settings or settings_mod.from_env()
    kcp = kcp or gateway.from_kubeconfig(s.kubeconfig, pool_size=max(4, s.threads))
    app = Flask("listener")
    app.config["MAX_CONTENT_LENGTH"] = s.max_body_bytes
    svc = services.build(s, kcp, view_socket)
    svc.deliveries.start()  # counts merged even when the runtime's next request goes elsewhere
    if svc.summaries is not None:
        svc.summaries.start()  # so are the state summaries' changes
    svc.refusals.start()  # unauthenticated refusals' lines written when their minute ends
    app.extensions[services.KEY] = svc
    app.extensions[OPENAPI_KEY] = openapi.OPENAPI_FILE.read_bytes()
    svc.cas.get()  # a CA bundle that cannot be loaded stops the worker here (LoadError)
    ops.request_metrics(app, "listener", svc.metrics.registry, buckets=metrics.LATENCY_BUCKETS)
    app.register_blueprint(api.bp)
    app.register_blueprint(stateapi.bp)
    app.register_blueprint(watchstate.bp)
    # /healthz on both ports; /readyz and /metrics only on the operations port (ops_bind),
    # never on the data port the internet reaches; the runtime API only on the data port
    ops.init_app(
        app,
        _probes(svc, serving),
        ops.Exposition(
            svc.metrics.registry,
            [svc.silent] + ([] if svc.view is None else [view_client.Collector(svc.view)]),
        ).render,
    )
    app.register_blueprint(edge)
    app.wsgi_app = httpworker.closing(app.wsgi_app)  # type: ignore[method-assign]
    return app


def _port(bind: str) -> str:
    return bind.rpartition(":")[2]


def _reload_problem(watched: tlsreload.Watched[Any]) -> str | None:
    if not watched.loaded():
        return watched.last_error or "not loaded"
    return watched.last_error or None  # a reload failed: the previous files are still used


def _kcp_problem(svc: services.Services) -> str | None:
    try:
        svc.store.ping()
    except gateway.GatewayError as e:
        return str(e)
    return None


def _probes(svc: services.Services, serving: tlsreload.Watched[Any] | None) -> ops.Probes:
    probes = ops.Probes(retry_after=svc.settings.retry_after)
    if serving is not None:
        probes.ready("serving-certificate", lambda: _reload_problem(serving))
    probes.ready("client-ca", lambda: _reload_problem(svc.cas))
    probes.ready("kcp-api", lambda: _kcp_problem(svc))
    return probes


@edge.before_app_request
def ports() -> Response | None:
    ops_port = _port(services.of().settings.ops_bind)
    on_ops = str(request.environ.get("SERVER_PORT", "")) == ops_port
    rule = str(request.url_rule) if request.url_rule is not None else ""
    if rule in ("/readyz", "/metrics") and not on_ops:
        return responses.error(404, "not found", f"served on the operations port {ops_port}")
    if rule.startswith("/v1/") and on_ops:
        return responses.error(404, "not found", "the runtime API is on the data port")
    return None


@edge.before_app_request
def start_timer() -> None:
    g.started = time.perf_counter()


@edge.after_app_request
def count(resp: Response) -> Response:
    svc = services.of()
    route = str(request.url_rule) if request.url_rule is not None else "unmatched"
    svc.metrics.requests.labels(
        route, request.method if route != "unmatched" else "other", str(resp.status_code)
    ).inc()
    started = g.get("started")
    if started is not None:
        svc.metrics.request_seconds.labels(route).observe(time.perf_counter() - started)
    resp.headers.setdefault("Cache-Control", "no-store")
    if not _drain(request.environ, DRAIN_BYTES):
        resp.headers["Connection"] = "close"
    return resp


@edge.get("/openapi.json")
def openapi_json() -> Response:
    return Response(current_app.extensions[OPENAPI_KEY], mimetype="application/json")


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
