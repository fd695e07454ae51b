"""How the admin pages answer: an error as HTML or JSON (by ``Accept``), a page rendered
from ``admin/templates`` with what every page shows, and the request's checked arguments."""

from __future__ import annotations

import datetime
from typing import Any

import flask
from flask import Response, request

from admin import fleet, runbooks, snapshot, views
from admin import services as services_mod
from tether.base import ops


def wants_json() -> bool:
    best = request.accept_mimetypes.best_match(["text/html", "application/json"])
    return best == "application/json"


def error(status: int, title: str, detail: str) -> Response:
    if wants_json():
        return ops.error(status, title, detail)
    html = flask.render_template(
        "error.html", status=status, title=title, detail=detail, user=flask.g.get("user")
    )
    return Response(html, status=status, mimetype="text/html")


def snap_or_503() -> snapshot.Snapshot | Response:
    snap = services_mod.current().refresher.get()
    if snap is None:
        return error(503, "starting", "the fleet has not been listed yet; retry in a few seconds")
    return snap


def render(template: str, **ctx: Any) -> Response:
    now = datetime.datetime.now(datetime.UTC)
    s = services_mod.current().settings
    html = flask.render_template(
        template,
        now=now,
        v=views,
        user=flask.g.get("user"),
        problem_text=fleet.PROBLEM_TEXT,
        audience=s.token_audience,
        runbook=runbooks.Links(s.runbook_base),
        **ctx,
    )
    return Response(html, mimetype="text/html")


def int_arg(name: str, default: int, lo: int, hi: int) -> int | None:
    raw = request.args.get(name)
    if raw is None or raw == "":
        return default
    if not raw.isascii() or not raw.isdigit() or len(raw) > 9:
        return None
    return max(lo, min(hi, int(raw)))
