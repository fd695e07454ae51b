"""The admin pages (blueprint ``pages``): ``/fleet``, ``/runtimes/<runtime ID>``,
``/compass``, ``/parts``, ``/rollout``, ``/`` (to ``/fleet``) and the stylesheet and icon. Each
page is guarded (``admin.guard``) and drawn from the fleet snapshot (``admin.snapshot``); the
runtime page reads the KCP per request (its RuntimeDelivery and Events), the rollout page its
ConfigMap (``admin.rolloutview``)."""

from __future__ import annotations

import datetime

import flask
import markupsafe
from flask import request
from werkzeug.wrappers import Response as Answer

from admin import fleet, guard, parts, respond, rolloutview, runbooks, snapshot, views
from admin import services as services_mod
from tether.base import logs
from tether.kube import gateway

bp = flask.Blueprint("pages", __name__)
# the endpoints a sign-in may lead back to (admin.login)
ENDPOINTS = frozenset(
    {
        "pages.fleet_page",
        "pages.runtime_page",
        "pages.compass_page",
        "pages.parts_page",
        "pages.rollout_page",
    }
)


@bp.get("/")
def index() -> Answer:
    return flask.redirect("/fleet", 303)


@bp.get("/static/admin.css")
def css() -> Answer:
    return flask.send_from_directory(
        flask.current_app.root_path + "/static", "admin.css", mimetype="text/css", max_age=3600
    )


@bp.get("/static/favicon.svg")
def icon() -> Answer:
    # linked by every page, so browsers do not ask for /favicon.ico (a 404 each time)
    return flask.send_from_directory(
        flask.current_app.root_path + "/static",
        "favicon.svg",
        mimetype="image/svg+xml",
        max_age=86400,
    )


def _guarded_snapshot(page: str) -> snapshot.Snapshot | Answer:
    """The fleet snapshot when the caller may see ``page``; else the refusal or the 503."""
    if (refused := guard.guard(page)) is not None:
        return refused
    return respond.snap_or_503()


@bp.get("/fleet")
def fleet_page() -> Answer:
    snap = _guarded_snapshot("fleet")
    if isinstance(snap, Answer):
        return snap
    number = respond.int_arg("page", 1, 1, 10**6)
    if number is None:
        return respond.error(400, "bad request", "page must be a positive whole number")
    query = (request.args.get("q") or "")[:253]
    problem = request.args.get("problem") or ""
    if problem and problem not in fleet.PROBLEMS:
        return respond.error(
            400, "bad request", f"problem must be one of {', '.join(fleet.PROBLEMS)}"
        )
    sel = fleet.select(snap.rows, query, problem, number, services_mod.current().settings.page_size)
    return respond.render(
        "fleet.html",
        snap=snap,
        sel=sel,
        query=query,
        problem=problem,
        counts=fleet.counts(snap.rows),
        problems=fleet.PROBLEMS,
    )


@bp.get("/runtimes/<runtime_id>")
def runtime_page(runtime_id: str) -> Answer:
    snap = _guarded_snapshot("runtime")
    if isinstance(snap, Answer):
        return snap
    row = snap.by_id.get(runtime_id)
    if row is None:
        return respond.error(
            404, "not found", "no Kyma CR carries this runtime ID (as of the last listing)"
        )
    now = datetime.datetime.now(datetime.UTC)
    row, events, events_error = _runtime_reads(row, now)
    mapping = snap.mapping_by_kyma.get(row.kyma.partition("/")[2])
    links = runbooks.Links(services_mod.current().settings.runbook_base)
    return respond.render(
        "runtime.html",
        snap=snap,
        row=row,
        events=events,
        events_error=events_error,
        mapping=mapping,
        refusals=runbooks.refusals(row.delivery, links),
        lag_chart=markupsafe.Markup(views.lag_chart(row.delivery, now)),
        records_chart=markupsafe.Markup(views.records_chart(row.delivery, now)),
        beats_chart=markupsafe.Markup(views.beats_chart(row.delivery, now)),
    )


def _runtime_reads(
    row: fleet.Row, now: datetime.datetime
) -> tuple[fleet.Row, list[parts.Event], str]:
    """The runtime's row with its RuntimeDelivery read now, its Events, and what could not
    be read (the page still shows the rest)."""
    svc = services_mod.current()
    events: list[parts.Event] = []
    problems: list[str] = []
    try:
        row = row._replace(delivery=snapshot.delivery_of(svc.kcp, svc.settings, row, now))
    except gateway.GatewayError as e:
        problems.append(
            "the runtime's RuntimeDelivery could not be read (totals of the "
            "last listing shown): " + logs.bounded(e, 160)
        )
    try:
        events = svc.events.get(row.kyma.partition("/")[2])
    except gateway.GatewayError as e:
        problems.append("Events could not be read: " + logs.bounded(e, 160))
    return row, events, "; ".join(problems)


@bp.get("/compass")
def compass_page() -> Answer:
    snap = _guarded_snapshot("compass")
    if isinstance(snap, Answer):
        return snap
    not_ready = [m for m in snap.mappings if m.state != "Ready"]
    return respond.render(
        "compass.html",
        snap=snap,
        states=parts.states(snap.mappings),
        not_ready=not_ready[:200],
        more=max(0, len(not_ready) - 200),
    )


@bp.get("/parts")
def parts_page() -> Answer:
    snap = _guarded_snapshot("parts")
    if isinstance(snap, Answer):
        return snap
    return respond.render("parts.html", snap=snap)


@bp.get("/rollout")
def rollout_page() -> Answer:
    if (refused := guard.guard("rollout")) is not None:
        return refused
    svc = services_mod.current()
    r, problem = rolloutview.read(svc.kcp, svc.settings.namespace, svc.settings.request_timeout)
    return respond.render("rollout.html", r=r, problem=problem)
