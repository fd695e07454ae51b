"""Who may see a page: an authenticating proxy's identity headers (``admin.proxyauth``, only
with the proxy's verified client certificate), a bearer token (TokenReview for the pages'
audience, ``admin.auth``) or a session cookie (``admin.sessions``), then a
SubjectAccessReview for ``get`` on ``adminpages/<page>``. In that order: a request carrying
identity headers is judged by them alone (refused 401 when not from the proxy, whatever
token or cookie it also has). 401 without (a browser is sent to ``/login``), 403 when RBAC
does not allow it, 429 when the caller's source has no TokenReview left
(``admin.throttle``), 503 when the KCP cannot answer; each outcome counted and the refusals
audited."""

from __future__ import annotations

import logging
import urllib.parse

import flask
from flask import Response, request
from werkzeug.wrappers import Response as Answer

from admin import auth, proxyauth, respond, throttle
from admin import services as services_mod
from tether.base import logs, ops
from tether.http import httpconn
from tether.kube import apitypes, gateway

log = logging.getLogger("admin.app")  # the name its lines have always had
COOKIE = "__Host-tether_admin_session"  # __Host-: Secure, Path=/, no Domain, by the browser


def bearer() -> str:
    header = request.headers.get("Authorization", "")
    scheme, _, value = header.partition(" ")
    if scheme.lower() == "bearer" and value.strip():
        return value.strip()
    return ""


def forget(resp: Answer) -> Answer:
    """``resp`` with the session cookie removed (with the attributes a __Host- cookie needs)."""
    resp.delete_cookie(COOKIE, path="/", secure=True, httponly=True, samesite="Strict")
    return resp


def throttled(e: throttle.Throttled) -> Response:
    services_mod.current().metrics.throttled.inc()
    resp = respond.error(
        429,
        "too many requests",
        f"too many tokens checked from your address; retry in {e.retry_after}s",
    )
    resp.headers["Retry-After"] = str(e.retry_after)
    return resp


def unavailable() -> Response:
    return respond.error(503, "unavailable", "the KCP could not check the token; retry shortly")


def _to_sign_in() -> Answer:
    if respond.wants_json():
        return ops.error(401, "unauthorized", "a bearer token is needed")
    # "&" encoded: the whole query stays in next (admin.signin rebuilds it pair by pair)
    nxt = urllib.parse.quote(request.full_path.rstrip("?"), safe="/?=")
    return flask.redirect("/login?next=" + nxt, 303)


def peer_cn() -> str | None:
    """The common name of the client certificate the TLS handshake verified, else None."""
    return httpconn.certificate_cn(request.environ.get("gunicorn.socket"))


def proxied() -> auth.Identity | Response | None:
    """The authenticating proxy's identity, the refusal of identity headers that did not come
    from it (401, or 400 out of bounds), or None when the request carries none (or no proxy
    is trusted)."""
    svc = services_mod.current()
    if svc.proxy is None:
        return None
    found = proxyauth.decide(dict(request.headers), peer_cn(), svc.proxy)
    if found is None or isinstance(found, auth.Identity):
        return found
    svc.metrics.auth.labels("proxy_refused").inc()
    logs.audit(
        svc.audit,
        "admin_proxy_refused",
        reason=found.reason,
        certificate=(peer_cn() or "")[:64],
        address=request.remote_addr or "",
    )
    return respond.error(
        found.status, "unauthorized" if found.status == 401 else "bad request", found.message
    )


def guard(page: str) -> Answer | None:
    """None when the caller may see ``page``; else the answer (400/401/403/429/503)."""
    flask.g.page = page
    svc = services_mod.current()
    from_proxy = proxied()
    if isinstance(from_proxy, Response):
        return from_proxy
    token, sid = bearer(), request.cookies.get(COOKIE, "")
    if from_proxy is None and not token and not sid:
        svc.metrics.auth.labels("no_token").inc()
        return _to_sign_in()
    try:
        if from_proxy is not None:
            who: auth.Identity | None = from_proxy
        elif token:
            who = svc.authorizer.identify(token, request.remote_addr or "")
        else:
            who = svc.sessions.get(sid)
            if who is None:  # ended, signed out, or never made here
                svc.metrics.auth.labels("no_session").inc()
                return forget(_to_sign_in())
        if who is None:
            svc.metrics.auth.labels("unauthenticated").inc()
            logs.audit(
                svc.audit, "admin_unauthenticated", page=page, address=request.remote_addr or ""
            )
            return respond.error(
                401,
                "unauthorized",
                "the token was not accepted by the KCP for "
                f"the admin pages (TokenReview, audience {svc.settings.token_audience})",
            )
        flask.g.user = who.user
        if not svc.authorizer.allowed(who, page):
            svc.metrics.auth.labels("denied").inc()
            logs.audit(svc.audit, "admin_denied", page=page, user=who.user)
            return respond.error(
                403,
                "forbidden",
                f"{who.user} may not get adminpages/{page} "
                f"(group {apitypes.TETHER_GROUP}); ask for the ClusterRole tether-admin-viewer",
            )
    except throttle.Throttled as e:
        return throttled(e)
    except gateway.GatewayError as e:
        svc.metrics.auth.labels("error").inc()
        log.warning("authentication against the KCP failed: %s", logs.bounded(e, 200))
        return unavailable()
    svc.metrics.auth.labels("allowed").inc()
    return None
