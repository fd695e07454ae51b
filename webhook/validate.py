"""The webhook's admission route: ``POST /validate`` (blueprint ``admission``).

The handler parses the AdmissionReview, decides (``admission.decide``), puts the object
key into the coalescing queue and answers ``allowed: true``; it never does network I/O.
The worker's ``Services`` are on ``app.extensions[services.KEY]`` (``webhook.app``).

``FastPath`` (the app's WSGI middleware, ``webhook.app``) answers the API server's usual call,
a JSON body of known length within the cap that parses as an AdmissionReview, in plain WSGI:
the same decision, queue and metrics (the request metrics of the route included), without
Flask's request context and hooks, which cost more than the admission itself. Every other
request, and every refusal (the body given back), goes to the Flask route below.
"""

from __future__ import annotations

import io
import logging
import time
from collections.abc import Callable, Iterable
from typing import Any

import flask
import orjson

from tether.base import ops
from webhook import admission, scope
from webhook import services as services_mod

log = logging.getLogger("webhook.app")  # the name the queue-full line has always had
JSON = "application/json"

bp = flask.Blueprint("admission", __name__)


def _services() -> services_mod.Services:
    svc = flask.current_app.extensions[services_mod.KEY]
    assert isinstance(svc, services_mod.Services)
    return svc


def _error(status: int, error: str, details: Any = None) -> flask.Response:
    return ops.error(status, error, details)


def _too_large(limit: int) -> flask.Response:
    return _error(
        413, "request too large", f"the body exceeds {limit} bytes (TETHER_WEBHOOK_MAX_BODY_BYTES)"
    )


def _discard(length: int, limit: int) -> None:
    """Read and drop a moderately oversized body so the client gets to read the 413
    (closing on a client still sending resets the connection); far larger ones are not
    read: the connection closes."""
    if length > 4 * limit:
        return
    stream = flask.request.environ.get("wsgi.input")
    left = length
    while stream is not None and left > 0:
        chunk = stream.read(min(left, 256 * 1024))
        if not chunk:
            break
        left -= len(chunk)


@bp.post("/validate")
def validate() -> flask.Response:
    return _handle_validate(_services())


@bp.app_errorhandler(413)
def too_large(_: Exception) -> flask.Response:
    return _too_large(_services().settings.server.max_body_bytes)


def _enqueue(svc: services_mod.Services, req: admission.Request) -> str:
    """Decide and queue: the outcome (enqueued, coalesced, overflowed or why not)."""
    if svc.watch_scope is not None and not svc.watch_scope.settled():
        return "watches-unknown"  # the Watch list was never read: left to the poller
    skip, chosen = scope.decide(req, svc.in_force())
    sc = svc.watch_scope
    if skip in scope.STALE_HINTS and sc is not None and sc.current() is not None:
        # registered for it from the runtime's Watches, yet none here takes it: list behind
        # (without a list the built-in Watch's skips are no hint: no read is asked for)
        sc.nudge()
    return skip if skip is not None else svc.admit_all(req, chosen)


def _handle_validate(svc: services_mod.Services) -> flask.Response:
    operation = "unknown"
    environ = flask.request.environ
    if _media_type(environ) != JSON:
        svc.count(operation, "invalid")
        return _error(415, "unsupported media type", "Content-Type must be application/json")
    length = flask.request.content_length
    if length is not None and length > svc.settings.server.max_body_bytes:
        svc.count(operation, "invalid")
        _discard(length, svc.settings.server.max_body_bytes)
        return _too_large(svc.settings.server.max_body_bytes)
    try:
        # a known length within the cap: read it directly (the hot path); else
        # werkzeug's stream enforces the cap (chunked bodies)
        raw = (
            environ["wsgi.input"].read(length)
            if length is not None
            else flask.request.get_data(cache=False)
        )
        doc = orjson.loads(raw)  # ~11 us for a 2.8 KB review, json.loads ~36 us
    except (ValueError, UnicodeDecodeError):
        svc.count(operation, "invalid")
        return _error(400, "invalid JSON", "the body is not valid JSON")
    try:
        req = admission.parse(doc)
    except admission.ReviewError as e:
        svc.count(operation, "invalid")
        return _error(400, "invalid AdmissionReview", e.details)
    return flask.Response(answer(svc, req), mimetype=JSON)


def answer(svc: services_mod.Services, req: admission.Request) -> bytes:
    """Decide, queue and count a parsed review: the answer's body. One metric write here
    (``admission_requests_total``; the queue's outcomes are derived from it at scrape time,
    ``webhook.metrics.QueueOutcomes``)."""
    operation = req.operation if req.operation in admission.OPERATIONS else "other"
    outcome = _enqueue(svc, req)
    if outcome == "overflowed":
        count = svc.overflow_log.hit()
        if count is not None:
            log.warning(
                "queue full (%d keys): %d admissions not queued since the last "
                "report; the poller will pick them up",
                svc.queue.maxsize,
                count,
            )
    svc.count(operation, outcome)
    return admission.response_bytes(req.uid)


def _media_type(environ: dict[str, Any]) -> str:
    return str(environ.get("CONTENT_TYPE", "")).partition(";")[0].strip().lower()


WSGIApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]


class FastPath:
    """WSGI middleware: ``POST /validate`` with a JSON body of known length within the cap
    that parses as an AdmissionReview is answered here; anything else goes to ``app``.

    ``observe(status, seconds, raised)`` records the route's request metrics (what
    prometheus-flask-exporter records for a request through Flask): the one latency
    histogram of a review."""

    def __init__(
        self, app: WSGIApp, svc: services_mod.Services, observe: Callable[[str, float, bool], None]
    ) -> None:
        self.app, self.svc, self.observe = app, svc, observe

    def __call__(
        self, environ: dict[str, Any], start_response: Callable[..., Any]
    ) -> Iterable[bytes]:
        length = self._length(environ)
        if length is None:
            return self.app(environ, start_response)
        t0 = time.perf_counter()
        raw = environ["wsgi.input"].read(length)
        try:
            req = admission.parse(orjson.loads(raw))
        except ValueError:  # invalid JSON or review (ReviewError): the route says what is wrong
            environ["wsgi.input"] = io.BytesIO(raw)
            return self.app(environ, start_response)
        status, raised = "200 OK", False
        try:
            body = answer(self.svc, req)
        except Exception:  # what the Flask route's JSON error handler answers
            log.exception("unexpected error in POST /validate")
            status, raised = "500 INTERNAL SERVER ERROR", True
            body = orjson.dumps({"error": "internal error", "details": "see the webhook's log"})
        start_response(status, [("Content-Type", JSON), ("Content-Length", str(len(body)))])
        seconds = time.perf_counter() - t0
        self.observe(status[:3], seconds, raised)
        level = logging.WARNING if raised else logging.DEBUG
        if ops.request_log.isEnabledFor(level):
            ops.request_log.log(level, "POST /validate %s %.1fms", status[:3], seconds * 1000)
        return [body]

    def _length(self, environ: dict[str, Any]) -> int | None:
        """The body's length when this path takes the request, else None."""
        if environ.get("PATH_INFO") != "/validate" or environ.get("REQUEST_METHOD") != "POST":
            return None
        if _media_type(environ) != JSON:
            return None
        try:
            length = int(environ.get("CONTENT_LENGTH") or "")
        except ValueError:
            return None
        return length if 0 <= length <= self.svc.settings.server.max_body_bytes else None
