"""The webhook's Flask app: ``POST /validate`` and the operations surface (``common.ops``:
``/healthz``, ``/readyz``, ``/metrics``, JSON errors, request log) on the same TLS port.

The handler parses the AdmissionReview, decides (``admission.decide``), puts the object
key into the coalescing queue and answers ``allowed: true``; it never does network I/O.
"""

from __future__ import annotations

import logging
import time
from typing import Any

import flask
import orjson

from common import ops
from webhook import admission
from webhook import services as services_mod
from webhook import settings as settings_mod

log = logging.getLogger(__name__)
JSON = "application/json"


def _error(status: int, error: str, details: Any = None) -> flask.Response:
    return ops.error(status, error, details)


def _too_large(limit: int) -> flask.Response:
    return _error(413, "request too large",
                  f"the body exceeds {limit} bytes (TETHER_WEBHOOK_MAX_BODY_BYTES)")


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


def _handle_validate(svc: services_mod.Services) -> flask.Response:
    t0 = time.perf_counter()
    m = svc.metrics
    operation = "unknown"
    try:
        environ = flask.request.environ
        if environ.get("CONTENT_TYPE", "").partition(";")[0].strip().lower() != JSON:
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
            raw = (environ["wsgi.input"].read(length) if length is not None
                   else flask.request.get_data(cache=False))
            doc = orjson.loads(raw)  # ~11 us for a 2.8 KB review, json.loads ~36 us
        except (ValueError, UnicodeDecodeError):
            svc.count(operation, "invalid")
            return _error(400, "invalid JSON", "the body is not valid JSON")
        try:
            req = admission.parse(doc)
        except admission.ReviewError as e:
            svc.count(operation, "invalid")
            return _error(400, "invalid AdmissionReview", e.details)
        operation = req.operation if req.operation in admission.OPERATIONS else "other"
        outcome: str | None = admission.decide(req, svc.settings.filter)
        if outcome is None:
            outcome = svc.queue.put(admission.item_of(req, time.time()))
            if outcome == "coalesced":
                m.coalesced.inc()
            elif outcome == "overflowed":
                m.overflowed.inc()
                count = svc.overflow_log.hit()
                if count is not None:
                    log.warning("queue full (%d keys): %d admissions not queued since the last "
                                "report; the poller will pick them up", svc.queue.maxsize, count)
        svc.count(operation, outcome)
        return flask.Response(admission.response_bytes(req.uid), mimetype=JSON)
    finally:
        m.handler_seconds.observe(time.perf_counter() - t0)


def _serving_problem(svc: services_mod.Services) -> str | None:
    if svc.serving is not None and not svc.serving.loaded():
        return svc.serving.last_error or "serving certificate not loaded"
    return None


def _forwarder_problem(svc: services_mod.Services) -> str | None:
    fwd = svc.forwarder
    if fwd is None or not fwd.alive():
        return "forwarder not running"
    if not fwd.client.certs_loaded():
        return "client certificate not loaded"
    return None


def create_app(s: settings_mod.Settings, svc: services_mod.Services | None = None) -> flask.Flask:
    svc = svc or services_mod.build(s)
    app = flask.Flask("webhook")
    app.config["MAX_CONTENT_LENGTH"] = s.server.max_body_bytes
    app.extensions["tether.webhook"] = svc
    probes = (ops.Probes()
              .ready("serving-certificate", lambda: _serving_problem(svc))
              .ready("forwarder", lambda: _forwarder_problem(svc)))
    # the handler has its own latency histogram: no per-request metric hooks on /validate
    ops.init_app(app, probes, ops.Exposition(svc.registry).render)

    @app.post("/validate")
    def validate() -> flask.Response:
        return _handle_validate(svc)

    @app.errorhandler(413)
    def too_large(_: Exception) -> flask.Response:
        return _too_large(s.server.max_body_bytes)

    return app
