"""The admin pages' Flask application factory.

    tether admin                                  # gunicorn, TLS (admin.server)
    create_app(settings, kcp=..., refresher=...)  # tests

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

The operations surface (``common.ops``: ``/readyz``: serving certificate loaded and a fleet
snapshot younger than three refresh intervals; ``/metrics``: request and sign-in counters
and the fleet gauges of ``admin.metrics``) is on the operations port only; ``/healthz`` on
both.
"""

from __future__ import annotations

import datetime
import logging
import time
import urllib.parse
from typing import Any, NamedTuple

import flask
import markupsafe
from flask import Flask, Response, request
from werkzeug import exceptions
from werkzeug.wrappers import Response as Answer

from admin import auth, fleet, metrics, parts, sessions, signin, snapshot, throttle, views
from admin import settings as settings_mod
from common import gateway, logs, ops, tlsreload

log = logging.getLogger(__name__)
KEY = "tether.admin"
COOKIE = "__Host-tether_admin_session"  # __Host-: Secure, Path=/, no Domain, by the browser
PAGE_ENDPOINTS = frozenset({"fleet_page", "runtime_page", "compass_page", "parts_page"})
MAX_FORM = 32 * 1024
CSP = ("default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; "
       "frame-ancestors 'none'; base-uri 'none'")


class Services(NamedTuple):
    settings: settings_mod.Settings
    kcp: gateway.Kube
    refresher: snapshot.Refresher
    authorizer: auth.Authorizer
    metrics: metrics.Metrics
    audit: logging.Logger
    events: snapshot.Events
    sessions: sessions.Store


def services() -> Services:
    svc = flask.current_app.extensions[KEY]
    assert isinstance(svc, Services)
    return svc


def create_app(s: settings_mod.Settings, *, kcp: gateway.Kube | None = None,
               refresher: snapshot.Refresher | None = None,
               serving: tlsreload.Watched[Any] | None = None, start: bool = True) -> Flask:
    kcp = kcp or gateway.from_kubeconfig(s.kubeconfig, pool_size=max(4, s.threads))
    api = kcp
    if refresher is None:
        refresher = snapshot.Refresher(lambda: snapshot.load(api, s), s.refresh)
    if start:
        refresher.start()
    m = metrics.Metrics(refresher, s)
    authorizer = auth.Authorizer(kcp, s.auth_cache, s.request_timeout, s.token_audience,
                                 throttle.Buckets(s.reviews_per_minute, s.review_sources),
                                 on_review=lambda kind: m.reviews.labels(kind).inc())
    store = sessions.Store(s.max_sessions)
    m.sessions.set_function(lambda: len(store))
    svc = Services(s, kcp, refresher, authorizer, m, logs.audit_logger(s.audit_destination),
                   snapshot.Events(kcp, s), store)
    app = Flask("admin")
    app.config["MAX_CONTENT_LENGTH"] = MAX_FORM
    app.jinja_env.autoescape = True
    app.extensions[KEY] = svc
    _operations(app, svc, serving)
    _pages(app)
    return app


def _port(bind: str) -> str:
    return bind.rpartition(":")[2]


def _operations(app: Flask, svc: Services, serving: tlsreload.Watched[Any] | None) -> None:
    ops_port = _port(svc.settings.ops_bind)
    probes = ops.Probes()
    probes.live("fleet-refresh", lambda: None if svc.refresher.alive() or not _started(svc)
                else "the refresh thread stopped")
    if serving is not None:
        probes.ready("serving-certificate",
                     lambda: None if serving.loaded() else (serving.last_error or "not loaded"))
    probes.ready("fleet-snapshot", lambda: _snapshot_problem(svc))
    ops.init_app(app, probes, ops.Exposition(svc.metrics.registry, [svc.metrics]).render)

    @app.before_request
    def ports() -> Response | None:
        on_ops = str(request.environ.get("SERVER_PORT", "")) == ops_port
        rule = str(request.url_rule) if request.url_rule is not None else ""
        if rule in ("/readyz", "/metrics") and not on_ops:
            return ops.error(404, "not found", f"served on the operations port {ops_port}")
        if on_ops and rule not in ("/readyz", "/metrics", "/healthz"):
            return ops.error(404, "not found", "the pages are on the HTTPS port")
        flask.g.started = time.perf_counter()
        return None

    @app.after_request
    def headers(resp: Response) -> Response:
        resp.headers.setdefault("Cache-Control", "no-store")
        resp.headers["X-Content-Type-Options"] = "nosniff"
        # not no-referrer: under it browsers send "Origin: null" with the sign-in form's POST,
        # which the Origin check below must refuse; same-origin keeps it, tells no other site
        resp.headers["Referrer-Policy"] = "same-origin"
        resp.headers["X-Frame-Options"] = "DENY"
        if resp.mimetype == "text/html":
            resp.headers["Content-Security-Policy"] = CSP
        page = flask.g.get("page")
        started = flask.g.get("started")
        if page is not None and started is not None:
            svc.metrics.requests.labels(page, str(resp.status_code)).inc()
            svc.metrics.request_seconds.labels(page).observe(time.perf_counter() - started)
        return resp


def _started(svc: Services) -> bool:
    return svc.refresher.get() is not None or svc.refresher.failures > 0


def _snapshot_problem(svc: Services) -> str | None:
    snap = svc.refresher.get()
    if snap is None:
        return svc.refresher.last_error or "no fleet snapshot yet"
    age = snap.age(datetime.datetime.now(datetime.UTC))
    if age > 3 * svc.settings.refresh + 30:
        return f"the fleet snapshot is {age:.0f}s old: {svc.refresher.last_error or 'refresh late'}"
    return None


# -- authentication and authorization ---------------------------------------------------------

def _wants_json() -> bool:
    best = request.accept_mimetypes.best_match(["text/html", "application/json"])
    return best == "application/json"


def _error(status: int, title: str, detail: str) -> Response:
    if _wants_json():
        return ops.error(status, title, detail)
    html = flask.render_template("error.html", status=status, title=title, detail=detail,
                                 user=flask.g.get("user"))
    return Response(html, status=status, mimetype="text/html")


def _bearer() -> str:
    header = request.headers.get("Authorization", "")
    scheme, _, value = header.partition(" ")
    if scheme.lower() == "bearer" and value.strip():
        return value.strip()
    return ""


def _forget(resp: Answer) -> Answer:
    """``resp`` with the session cookie removed (with the attributes a __Host- cookie needs)."""
    resp.delete_cookie(COOKIE, path="/", secure=True, httponly=True, samesite="Strict")
    return resp


def _throttled(e: throttle.Throttled) -> Response:
    services().metrics.throttled.inc()
    resp = _error(429, "too many requests", "too many tokens checked from your address; "
                  f"retry in {e.retry_after}s")
    resp.headers["Retry-After"] = str(e.retry_after)
    return resp


def _to_sign_in() -> Answer:
    if _wants_json():
        return ops.error(401, "unauthorized", "a bearer token is needed")
    # "&" encoded: the whole query stays in next (admin.signin rebuilds it pair by pair)
    nxt = urllib.parse.quote(request.full_path.rstrip("?"), safe="/?=")
    return flask.redirect("/login?next=" + nxt, 303)


def _guard(page: str) -> Answer | None:
    """None when the caller may see ``page``; else the answer (401/403/429/503)."""
    flask.g.page = page
    svc = services()
    token, sid = _bearer(), request.cookies.get(COOKIE, "")
    if not token and not sid:
        svc.metrics.auth.labels("no_token").inc()
        return _to_sign_in()
    try:
        if token:
            who = svc.authorizer.identify(token, request.remote_addr or "")
        else:
            who = svc.sessions.get(sid)
            if who is None:  # ended, signed out, or never made here
                svc.metrics.auth.labels("no_session").inc()
                return _forget(_to_sign_in())
        if who is None:
            svc.metrics.auth.labels("unauthenticated").inc()
            logs.audit(svc.audit, "admin_unauthenticated", page=page,
                       address=request.remote_addr or "")
            return _error(401, "unauthorized", "the token was not accepted by the KCP for the "
                          f"admin pages (TokenReview, audience {svc.settings.token_audience})")
        flask.g.user = who.user
        if not svc.authorizer.allowed(who, page):
            svc.metrics.auth.labels("denied").inc()
            logs.audit(svc.audit, "admin_denied", page=page, user=who.user)
            return _error(403, "forbidden", f"{who.user} may not get adminpages/{page} "
                          f"(group {auth.GROUP}); ask for the ClusterRole tether-admin-viewer")
    except throttle.Throttled as e:
        return _throttled(e)
    except gateway.GatewayError as e:
        svc.metrics.auth.labels("error").inc()
        log.warning("authentication against the KCP failed: %s", logs.bounded(e, 200))
        return _error(503, "unavailable", "the KCP could not check the token; retry shortly")
    svc.metrics.auth.labels("allowed").inc()
    return None


def _is_page(path: str) -> bool:
    """``path`` (decoded) is one of the pages by the app's own routes."""
    try:
        endpoint, _ = flask.current_app.url_map.bind("admin.invalid").match(path, method="GET")
    except exceptions.HTTPException:  # not found, not GET, or a redirect (RequestRedirect)
        return False
    return endpoint in PAGE_ENDPOINTS


def _safe_next(target: str) -> str:
    return signin.safe_next(target, _is_page)


def _foreign() -> Response | None:
    """The 403 for a sign-in/sign-out that did not come from the admin's own pages."""
    why = signin.cross_site(request.headers.get("Origin"), request.headers.get("Sec-Fetch-Site"),
                            f"{request.scheme}://{request.host}")
    if why is None:
        return None
    services().metrics.auth.labels("cross_site").inc()
    return _error(403, "forbidden", why)


def _lifetime(token: str, limit: float) -> float:
    """How long a session of ``token`` may last: ``limit``, never past the token's expiry."""
    exp = auth.expiry_of(token)
    return limit if exp is None else max(1.0, min(limit, exp - time.time()))


def _snap_or_503() -> snapshot.Snapshot | Response:
    snap = services().refresher.get()
    if snap is None:
        return _error(503, "starting", "the fleet has not been listed yet; retry in a few seconds")
    return snap


def _render(template: str, **ctx: Any) -> Response:
    now = datetime.datetime.now(datetime.UTC)
    html = flask.render_template(template, now=now, v=views, user=flask.g.get("user"),
                                 problem_text=fleet.PROBLEM_TEXT,
                                 audience=services().settings.token_audience, **ctx)
    return Response(html, mimetype="text/html")


def _int_arg(name: str, default: int, lo: int, hi: int) -> int | None:
    raw = request.args.get(name)
    if raw is None or raw == "":
        return default
    if not raw.isascii() or not raw.isdigit() or len(raw) > 9:
        return None
    return max(lo, min(hi, int(raw)))


def _pages(app: Flask) -> None:
    @app.get("/")
    def index() -> Answer:
        return flask.redirect("/fleet", 303)

    @app.get("/static/admin.css")
    def css() -> Answer:
        return flask.send_from_directory(app.root_path + "/static", "admin.css",
                                         mimetype="text/css", max_age=3600)

    @app.get("/static/favicon.svg")
    def icon() -> Answer:
        # linked by every page, so browsers do not ask for /favicon.ico (a 404 each time)
        return flask.send_from_directory(app.root_path + "/static", "favicon.svg",
                                         mimetype="image/svg+xml", max_age=86400)

    @app.get("/login")
    def login_form() -> Answer:
        flask.g.page = "login"
        return _render("login.html", next=_safe_next(request.args.get("next", "/fleet")),
                       message="")

    @app.post("/login")
    def login() -> Answer:
        flask.g.page = "login"
        svc = services()
        if (foreign := _foreign()) is not None:
            return foreign
        token = (request.form.get("token") or "").strip()
        nxt = _safe_next(request.form.get("next") or "/fleet")
        if not token:
            resp = _render("login.html", next=nxt, message="paste a bearer token")
            resp.status_code = 400
            return resp
        try:
            who = svc.authorizer.identify(token, request.remote_addr or "")
        except throttle.Throttled as e:
            return _throttled(e)
        except gateway.GatewayError as e:
            log.warning("sign-in: TokenReview failed: %s", logs.bounded(e, 200))
            return _error(503, "unavailable", "the KCP could not check the token; retry shortly")
        if who is None:
            svc.metrics.auth.labels("unauthenticated").inc()
            logs.audit(svc.audit, "admin_sign_in_refused", address=request.remote_addr or "")
            aud = svc.settings.token_audience
            resp = _render("login.html", next=nxt, message=(
                f"the KCP did not accept this token for the admin pages (TokenReview, audience "
                f"{aud}); make one with: kubectl create token <service-account> --audience {aud}"))
            resp.status_code = 401
            return resp
        svc.sessions.delete(request.cookies.get(COOKIE, ""))  # a session signed in again
        seconds = _lifetime(token, svc.settings.session_seconds)
        sid = svc.sessions.create(who, seconds)
        logs.audit(svc.audit, "admin_sign_in", user=who.user, address=request.remote_addr or "")
        done = flask.redirect(nxt, 303)
        done.set_cookie(COOKIE, sid, max_age=int(seconds), secure=True, httponly=True,
                        samesite="Strict", path="/")
        return done

    @app.post("/logout")
    def logout() -> Answer:
        flask.g.page = "logout"
        svc = services()
        if (foreign := _foreign()) is not None:
            return foreign
        sid = request.cookies.get(COOKIE, "")
        who = svc.sessions.get(sid)
        if svc.sessions.delete(sid) and who is not None:
            logs.audit(svc.audit, "admin_sign_out", user=who.user,
                       address=request.remote_addr or "")
        return _forget(flask.redirect("/login", 303))

    @app.get("/fleet")
    def fleet_page() -> Answer:
        if (refused := _guard("fleet")) is not None:
            return refused
        snap = _snap_or_503()
        if isinstance(snap, Response):
            return snap
        number = _int_arg("page", 1, 1, 10**6)
        if number is None:
            return _error(400, "bad request", "page must be a positive whole number")
        query = (request.args.get("q") or "")[:253]
        problem = request.args.get("problem") or ""
        if problem and problem not in fleet.PROBLEMS:
            return _error(400, "bad request",
                          f"problem must be one of {', '.join(fleet.PROBLEMS)}")
        sel = fleet.select(snap.rows, query, problem, number, services().settings.page_size)
        return _render("fleet.html", snap=snap, sel=sel, query=query, problem=problem,
                       counts=fleet.counts(snap.rows), problems=fleet.PROBLEMS)

    @app.get("/runtimes/<runtime_id>")
    def runtime_page(runtime_id: str) -> Answer:
        if (refused := _guard("runtime")) is not None:
            return refused
        snap = _snap_or_503()
        if isinstance(snap, Response):
            return snap
        row = snap.by_id.get(runtime_id)
        if row is None:
            return _error(404, "not found", "no Kyma CR carries this runtime ID "
                          "(as of the last listing)")
        svc = services()
        events: list[parts.Event] = []
        problems: list[str] = []
        now = datetime.datetime.now(datetime.UTC)
        try:
            row = row._replace(delivery=snapshot.delivery_of(svc.kcp, svc.settings, row, now))
        except gateway.GatewayError as e:
            problems.append("the runtime's RuntimeDelivery could not be read (totals of the "
                            "last listing shown): " + logs.bounded(e, 160))
        try:
            events = svc.events.get(row.kyma.partition("/")[2])
        except gateway.GatewayError as e:
            problems.append("Events could not be read: " + logs.bounded(e, 160))
        events_error = "; ".join(problems)
        mapping = snap.mapping_by_kyma.get(row.kyma.partition("/")[2])
        return _render("runtime.html", snap=snap, row=row, events=events,
                       events_error=events_error, mapping=mapping,
                       lag_chart=markupsafe.Markup(views.lag_chart(row.delivery, now)),
                       records_chart=markupsafe.Markup(views.records_chart(row.delivery, now)),
                       beats_chart=markupsafe.Markup(views.beats_chart(row.delivery, now)))

    @app.get("/compass")
    def compass_page() -> Answer:
        if (refused := _guard("compass")) is not None:
            return refused
        snap = _snap_or_503()
        if isinstance(snap, Response):
            return snap
        not_ready = [m for m in snap.mappings if m.state != "Ready"]
        return _render("compass.html", snap=snap, states=parts.states(snap.mappings),
                       not_ready=not_ready[:200], more=max(0, len(not_ready) - 200))

    @app.get("/parts")
    def parts_page() -> Answer:
        if (refused := _guard("parts")) is not None:
            return refused
        snap = _snap_or_503()
        if isinstance(snap, Response):
            return snap
        return _render("parts.html", snap=snap)
