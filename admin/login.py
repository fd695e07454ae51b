"""Sign-in and sign-out (blueprint ``signin``): ``GET /login`` (the form), ``POST /login``
(a bearer token for the pages' audience in, a session cookie out: HttpOnly, Secure,
SameSite=Strict, ``__Host-``, holding the sealed session, never the token;
``admin.sessions``), ``POST /logout`` (ends the session on every replica: the sign-out
ledger, ``admin.signouts``). Both POSTs must come from the admin's own origin
(``admin.signin.cross_site``: else 403), and ``next`` is followed only to one of the pages
(``admin.signin.safe_next``).

A sign-in, in order: same origin (403) -> the source's budget, one per attempt whatever the
token (429, ``admin.throttle``) -> TokenReview for the pages' audience (401) -> the page
right: SubjectAccessReview ``get adminpages/<the page next leads to>``, the check every page
makes (403) -> a session (a sealed cookie: no KCP write, nothing kept in the process). So a
credential without a page right makes no session. Behind an authenticating proxy
(``admin.proxyauth``) no sign-in is needed: the proxy's identity is checked per request."""

from __future__ import annotations

import logging
import time
import urllib.parse

import flask
from flask import Response, request
from werkzeug import exceptions
from werkzeug.wrappers import Response as Answer

from admin import auth, guard, pages, respond, sessioncookie, signin, signouts, throttle
from admin import services as services_mod
from tether.base import logs
from tether.kube import apitypes, gateway

log = logging.getLogger("admin.app")  # the name its lines have always had
bp = flask.Blueprint("signin", __name__)


def _is_page(path: str) -> bool:
    """``path`` (decoded) is one of the pages by the app's own routes."""
    try:
        endpoint, _ = flask.current_app.url_map.bind("admin.invalid").match(path, method="GET")
    except exceptions.HTTPException:  # not found, not GET, or a redirect (RequestRedirect)
        return False
    return endpoint in pages.ENDPOINTS


def _safe_next(target: str) -> str:
    return signin.safe_next(target, _is_page)


def _page_of(nxt: str) -> str:
    """The page name (``auth.PAGES``) whose right a sign-in leading to ``nxt`` needs (``nxt``
    is already one of the pages: ``_safe_next``)."""
    path = urllib.parse.unquote(urllib.parse.urlsplit(nxt).path)
    try:
        endpoint, _ = flask.current_app.url_map.bind("admin.invalid").match(path, method="GET")
    except exceptions.HTTPException:
        return "fleet"
    page = str(endpoint).removeprefix("pages.").removesuffix("_page")
    return page if page in auth.PAGES else "fleet"


def _foreign(page: str) -> Response | None:
    """For a sign-in/sign-out (``page``, as the request log and templates name it): the 403
    when it did not come from the admin's own pages."""
    flask.g.page = page
    why = signin.cross_site(
        request.headers.get("Origin"),
        request.headers.get("Sec-Fetch-Site"),
        f"{request.scheme}://{request.host}",
    )
    if why is None:
        return None
    services_mod.current().metrics.auth.labels("cross_site").inc()
    return respond.error(403, "forbidden", why)


def _lifetime(token: str, limit: float) -> float:
    """How long a session of ``token`` may last: ``limit``, never past the token's expiry."""
    exp = auth.expiry_of(token)
    return limit if exp is None else max(1.0, min(limit, exp - time.time()))


def _form(nxt: str, message: str, status: int) -> Response:
    resp = respond.render("login.html", next=nxt, message=message)
    resp.status_code = status
    return resp


@bp.get("/login")
def login_form() -> Answer:
    flask.g.page = "login"
    return respond.render(
        "login.html", next=_safe_next(request.args.get("next", "/fleet")), message=""
    )


@bp.post("/login")
def login() -> Answer:
    if (foreign := _foreign("login")) is not None:
        return foreign
    svc = services_mod.current()
    token = (request.form.get("token") or "").strip()
    nxt = _safe_next(request.form.get("next") or "/fleet")
    if not token:
        return _form(nxt, "paste a bearer token", 400)
    page = _page_of(nxt)
    try:  # every attempt costs the source one, a cached token's too (sign_in)
        who = svc.authorizer.identify(token, request.remote_addr or "", sign_in=True)
        allowed = who is not None and svc.authorizer.allowed(who, page)
    except throttle.Throttled as e:
        return guard.throttled(e)
    except gateway.GatewayError as e:
        log.warning("sign-in: TokenReview/SubjectAccessReview failed: %s", logs.bounded(e, 200))
        return guard.unavailable()
    if who is None:
        svc.metrics.auth.labels("unauthenticated").inc()
        logs.audit(svc.audit, "admin_sign_in_refused", address=request.remote_addr or "")
        aud = svc.settings.token_audience
        return _form(
            nxt,
            "the KCP did not accept this token for the admin pages (TokenReview, "
            f"audience {aud}); make one with: kubectl create token <service-account> "
            f"--audience {aud}",
            401,
        )
    if not allowed:
        svc.metrics.auth.labels("denied").inc()
        logs.audit(
            svc.audit,
            "admin_sign_in_denied",
            user=who.user,
            page=page,
            address=request.remote_addr or "",
        )
        return _form(
            nxt,
            f"{who.user} may not get adminpages/{page} (group "
            f"{apitypes.TETHER_GROUP}), so no session was made; ask for the "
            "ClusterRole tether-admin-viewer",
            403,
        )
    return _signed_in(svc, who, token, nxt)


def _signed_in(svc: services_mod.Services, who: auth.Identity, token: str, nxt: str) -> Answer:
    """A new session for ``who`` (its cookie replaces the browser's previous one, which stays
    valid until it expires or is signed out), and the way on to ``nxt``."""
    seconds = _lifetime(token, svc.settings.session_seconds)
    try:
        value = svc.sessions.create(who, seconds)
    except sessioncookie.TooLarge as e:
        return _form(nxt, f"{e}: use the token as a bearer token instead of signing in", 400)
    svc.metrics.sign_ins.inc()
    logs.audit(svc.audit, "admin_sign_in", user=who.user, address=request.remote_addr or "")
    done = flask.redirect(nxt, 303)
    done.set_cookie(
        guard.COOKIE,
        value,
        max_age=int(seconds),
        secure=True,
        httponly=True,
        samesite="Strict",
        path="/",
    )
    return done


@bp.post("/logout")
def logout() -> Answer:
    if (foreign := _foreign("logout")) is not None:
        return foreign
    svc = services_mod.current()
    try:
        who = svc.sessions.end(request.cookies.get(guard.COOKIE, ""))
    except (gateway.GatewayError, signouts.Full, signouts.Missing) as e:
        log.warning("sign-out not recorded: %s", logs.bounded(e, 200))
        return respond.error(
            503,
            "unavailable",
            "the sign-out could not be recorded for every replica "
            f"(ConfigMap {signouts.NAME}); retry shortly",
        )
    if who is not None:
        logs.audit(svc.audit, "admin_sign_out", user=who.user, address=request.remote_addr or "")
    return guard.forget(flask.redirect("/login", 303))
