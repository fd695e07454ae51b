"""The admin pages' Flask application factory.

    tether admin                                  # gunicorn, TLS (admin.server)
    create_app(settings, kcp=..., refresher=...)  # tests

Blueprints: the pages (``admin.pages``), sign-in and sign-out (``admin.login``), the
operations surface (``tether.base.ops``); the app's services on ``app.extensions``
(``admin.services``).

Pages (HTML, server-rendered from ``admin/templates``, no script, one stylesheet):
``/fleet`` (search ``q``, ``problem``, ``page``), ``/runtimes/<runtime ID>``, ``/compass``,
``/parts``; ``/login`` (a form taking a bearer token for the pages' audience; the browser
then holds a session: an HttpOnly, Secure, SameSite=Strict ``__Host-`` cookie with a random
session ID, never the token, ``admin.sessions``) and ``/logout`` (ends the session
server-side). Both POSTs must come from the admin's own origin (``Origin``,
``Sec-Fetch-Site``; else 403), and ``next`` is followed only to one of the pages
(``admin.signin``). Each page needs a session, or a bearer token that the KCP's TokenReview
accepts for the audience, and a SubjectAccessReview allowing ``get`` on ``adminpages/<page>``
(``admin.auth``): 401 without, 403 when RBAC does not allow it, 429 when the caller's
source has no TokenReview left (``admin.throttle``, with ``Retry-After``), 503 when the KCP
cannot answer. A client asking for JSON (``Accept: application/json``) gets the errors as
JSON.

The operations surface (``tether.base.ops``: ``/readyz``: serving certificate loaded and a fleet
snapshot younger than three refresh intervals; ``/metrics``: request and sign-in counters
and the fleet gauges of ``admin.metrics``, prometheus-flask-exporter's ``tether_admin_http_*``
by route) is on the operations port only; ``/healthz`` on
both.
"""

from __future__ import annotations

import datetime
import logging
import os
import time
from collections.abc import Callable, Sequence
from typing import Any

import flask
from flask import Flask, Response, request

from admin import (
    auth,
    fleetgauges,
    login,
    metrics,
    pages,
    proxyauth,
    sessioncookie,
    sessions,
    signouts,
    snapshot,
    throttle,
)
from admin import services as services_mod
from admin import settings as settings_mod
from tether.base import auditwriter, logs, ops, tlsreload
from tether.kube import gateway

MAX_FORM = 32 * 1024
CSP = (
    "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; "
    "frame-ancestors 'none'; base-uri 'none'"
)
OPS_RULES = ("/readyz", "/metrics")  # on the operations port only


def create_app(
    settings: settings_mod.Settings | None = None,
    *,
    kcp: gateway.Kube | None = None,
    refresher: snapshot.Refresher | None = None,
    serving: tlsreload.Watched[Any] | None = None,
    start: bool = True,
) -> Flask:
    """``settings``: default from the TETHER_ADMIN_* variables; ``serving``: the TLS context
    gunicorn serves with (``admin.server``), so that a failed load shows in readiness."""
    s = settings or settings_mod.build(settings_mod.SPEC.read())
    svc = _services(s, kcp, refresher, start)
    app = Flask("admin")
    app.config["MAX_CONTENT_LENGTH"] = MAX_FORM
    app.jinja_env.autoescape = True
    app.extensions[services_mod.KEY] = svc
    ops.request_metrics(app, "admin", svc.metrics.registry)  # tether_admin_http_*, by route
    ops.init_app(
        app,
        _probes(svc, serving),
        ops.Exposition(
            svc.metrics.registry,
            [fleetgauges.FleetGauges(svc.refresher, svc.settings.problem_series)],
        ).render,
    )
    app.before_request(_ports)
    app.after_request(_headers)
    app.register_blueprint(login.bp)
    app.register_blueprint(pages.bp)
    return app


def _services(
    s: settings_mod.Settings,
    kcp: gateway.Kube | None,
    refresher: snapshot.Refresher | None,
    start: bool,
) -> services_mod.Services:
    kcp = kcp or gateway.from_kubeconfig(s.kubeconfig, pool_size=max(4, s.threads))
    api = kcp
    if refresher is None:
        refresher = snapshot.Refresher(lambda: snapshot.load(api, s), s.refresh)
    if start:
        refresher.start()
    m = metrics.Metrics()
    authorizer = auth.Authorizer(
        kcp,
        s.auth_cache,
        s.request_timeout,
        s.token_audience,
        throttle.Buckets(s.reviews_per_minute, s.review_sources),
        on_review=lambda kind: m.reviews.labels(kind).inc(),
    )
    ledger = signouts.Ledger(
        kcp,
        s.namespace,
        s.signout_cache,
        s.request_timeout,
        signouts.Bounds(s.signouts_per_user, s.max_signouts, s.session_seconds),
    )
    m.signouts.set_function(lambda: len(ledger))
    store = sessions.Sessions(_keys(s), ledger)
    proxy = (
        None
        if s.proxy_ca_file is None
        else proxyauth.Trust(
            frozenset(s.proxy_allowed_names), s.proxy_user_headers, s.proxy_group_headers
        )
    )
    audit = logs.audit_logger(
        s.audit_destination,
        on_lost=auditwriter.counting(m.audit_lost),
        queue_lines=s.audit_queue_lines,
    )
    return services_mod.Services(
        s, kcp, refresher, authorizer, m, audit, snapshot.Events(kcp, s), store, proxy
    )


def _keys(s: settings_mod.Settings) -> Callable[[], Sequence[bytes]]:
    """The session keys: the key file, re-read when it changes (a rotated Secret), else a
    key of this process alone."""
    path = s.session_key_file
    if path is None or not os.path.exists(path):
        if path is not None:  # the Deployment mounts the Secret optional
            logging.getLogger("admin.app").warning(
                "%s does not exist: sessions are sealed with a key of this process alone and "
                "end when it restarts; other replicas do not accept them (docs/admin.md)",
                path,
            )
        keys = sessioncookie.ephemeral()
        return lambda: keys
    return tlsreload.Watched((path,), lambda: sessioncookie.read_keys(path)).get


def _port(bind: str) -> str:
    return bind.rpartition(":")[2]


def _probes(svc: services_mod.Services, serving: tlsreload.Watched[Any] | None) -> ops.Probes:
    probes = ops.Probes()
    probes.live(
        "fleet-refresh",
        lambda: (
            None if svc.refresher.alive() or not _started(svc) else "the refresh thread stopped"
        ),
    )
    if serving is not None:
        probes.ready(
            "serving-certificate",
            lambda: None if serving.loaded() else (serving.last_error or "not loaded"),
        )
    probes.ready("fleet-snapshot", lambda: _snapshot_problem(svc))
    return probes


def _ports() -> Response | None:
    """The probes and metrics only on the operations port, the pages never there."""
    ops_port = _port(services_mod.current().settings.ops_bind)
    on_ops = str(request.environ.get("SERVER_PORT", "")) == ops_port
    rule = str(request.url_rule) if request.url_rule is not None else ""
    if rule in OPS_RULES and not on_ops:
        return ops.error(404, "not found", f"served on the operations port {ops_port}")
    if on_ops and rule not in (*OPS_RULES, "/healthz"):
        return ops.error(404, "not found", "the pages are on the HTTPS port")
    flask.g.started = time.perf_counter()
    return None


def _headers(resp: Response) -> Response:
    resp.headers.setdefault("Cache-Control", "no-store")
    resp.headers["X-Content-Type-Options"] = "nosniff"
    # not no-referrer: under it browsers send "Origin: null" with the sign-in form's POST,
    # which the Origin check must refuse (admin.login); same-origin keeps it, tells no other site
    resp.headers["Referrer-Policy"] = "same-origin"
    resp.headers["X-Frame-Options"] = "DENY"
    if resp.mimetype == "text/html":
        resp.headers["Content-Security-Policy"] = CSP
    page = flask.g.get("page")
    started = flask.g.get("started")
    if page is not None and started is not None:
        m = services_mod.current().metrics
        m.requests.labels(page, str(resp.status_code)).inc()
        m.request_seconds.labels(page).observe(time.perf_counter() - started)
    return resp


def _started(svc: services_mod.Services) -> bool:
    return svc.refresher.get() is not None or svc.refresher.failures > 0


def _snapshot_problem(svc: services_mod.Services) -> str | None:
    snap = svc.refresher.get()
    if snap is None:
        return svc.refresher.last_error or "no fleet snapshot yet"
    age = snap.age(datetime.datetime.now(datetime.UTC))
    if age > 3 * svc.settings.refresh + 30:
        return f"the fleet snapshot is {age:.0f}s old: {svc.refresher.last_error or 'refresh late'}"
    return None
