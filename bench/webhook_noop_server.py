"""Baseline for bench/webhook_admission.py: a no-op ``POST /validate`` under the very same
gunicorn settings as the webhook (gthread, TLS, keep-alive). Reads the body, parses it
(orjson, as the webhook) and answers allowed with the request's uid: the least a correct
webhook does (an answer with another uid is a failed call to the API server). The review is
answered by a plain WSGI callable before Flask, as the webhook's own ``validate.FastPath``
answers it, so the baseline is the least a server can do, not Flask's routing (~20 us more
per request). Anything else (``/readyz``) is Flask's. Run: python
bench/webhook_noop_server.py (env as the webhook). bench/e2e.py and
bench/webhook_admission.py also run a Go no-op beside it (testing/gonoop)."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterable
from typing import Any

import flask
import orjson
from gunicorn.app.base import BaseApplication

from webhook import server
from webhook import settings as settings_mod

HEAD = b'{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","response":{"uid":'


def answer(body: bytes) -> bytes:
    """Allowed, with the review's uid ("" when the body is no review: the API server never
    sends one)."""
    try:
        request = orjson.loads(body).get("request")
        uid = request.get("uid") if isinstance(request, dict) else ""
    except (ValueError, AttributeError):
        uid = ""
    return HEAD + orjson.dumps(uid if isinstance(uid, str) else "") + b',"allowed":true}}'


class Noop:
    """WSGI: ``POST /validate`` with a Content-Length read and answered; else ``app``."""

    def __init__(self, app: Callable[..., Iterable[bytes]]) -> None:
        self.app = app

    def __call__(
        self, environ: dict[str, Any], start_response: Callable[..., Any]
    ) -> Iterable[bytes]:
        length = environ.get("CONTENT_LENGTH")
        if (
            environ.get("PATH_INFO") != "/validate"
            or environ.get("REQUEST_METHOD") != "POST"
            or not length
        ):
            return self.app(environ, start_response)
        body = answer(environ["wsgi.input"].read(int(length)))
        start_response(
            "200 OK", [("Content-Type", "application/json"), ("Content-Length", str(len(body)))]
        )
        return [body]


def create_app() -> flask.Flask:
    app = flask.Flask("noop")
    app.wsgi_app = Noop(app.wsgi_app)  # type: ignore[method-assign]

    @app.post("/validate")
    def validate() -> flask.Response:
        return flask.Response(
            answer(flask.request.get_data(cache=False)), mimetype="application/json"
        )

    @app.get("/readyz")
    def readyz() -> flask.Response:
        return flask.Response(b"{}", mimetype="application/json")

    return app


class NoopServer(BaseApplication):  # type: ignore[misc]
    def __init__(self, s: settings_mod.Settings) -> None:
        self.settings = s
        super().__init__()

    def load_config(self) -> None:
        for key, value in server.gunicorn_options(self.settings).items():
            if value is not None:
                self.cfg.set(key, value)

    def load(self) -> Any:
        return create_app()


if __name__ == "__main__":
    NoopServer(settings_mod.from_env(dict(os.environ))).run()
    sys.exit(0)
