"""Baseline for bench/webhook_admission.py: a no-op Flask ``POST /validate`` under the very
same gunicorn settings as the webhook (gthread, TLS, keep-alive). Reads the body, answers a
constant allowed AdmissionReview. Run: python bench/webhook_noop_server.py (env as the webhook)."""

from __future__ import annotations

import os
import sys
from typing import Any

import flask
from gunicorn.app.base import BaseApplication

from webhook import server
from webhook import settings as settings_mod

ANSWER = b'{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","response":{"uid":"x","allowed":true}}'


def create_app() -> flask.Flask:
    app = flask.Flask("noop")

    @app.post("/validate")
    def validate() -> flask.Response:
        flask.request.get_data(cache=False)
        return flask.Response(ANSWER, mimetype="application/json")

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
