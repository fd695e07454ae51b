"""The operations surface every part serves: probes, metrics, JSON errors, request logging.

One blueprint and one set of hooks, bound with ``init_app(app, probes, metrics)`` (``metrics``: a
callable rendering the exposition, usually ``Exposition(registry, extra).render``):

* ``/healthz``: 200 ``{"status": "ok"}`` while the process serves and its own threads run
  (the *liveness* checks: what only a restart mends, e.g. a dead scheduler thread); else 503.
* ``/readyz``: 200 ``{"status": "ready"}`` when the liveness and the *readiness* checks pass
  (certificates loaded, the KCP API answering...); else 503
  ``{"error": "not ready", "details": [{"check": name, "message": why}, ...]}``. The result,
  a failure too, is cached ``cache_seconds`` (2 s), so probes and scrapes cannot turn into a
  load on the KCP or a Director.
* ``/metrics``: Prometheus text of one registry; with ``PROMETHEUS_MULTIPROC_DIR`` set
  (several gunicorn workers: decided once, by ``multiprocess()``) the aggregate of every
  worker's value files instead. Scrape-time collectors (``extra``) are added either way.
* Errors: every HTTP error and every unexpected exception is answered as JSON
  ``{"error": short text, "details": any}`` (never HTML, never a traceback; the exception
  goes to the log).
* Request log: one line per request on the ``tether.requests`` logger: DEBUG, WARNING for
  answers >= 500.
* Request metrics (``request_metrics``, the parts that serve more than the probes: webhook,
  listener, admin): prometheus-flask-exporter's hooks, named in the project's convention
  (``tether_<part>_http_request_duration_seconds{method,route,status}``,
  ``tether_<part>_http_request_total{method,status}``,
  ``tether_<part>_http_request_exceptions_total{method,status}``,
  ``tether_<part>_exporter_info{version}``), in the part's registry, so they appear in the one
  ``/metrics`` above (the exporter serves no endpoint of its own: ``path=None``). ``route`` is
  the URL rule (``/v1/runtimes/<runtime_id>/changes``), ``unmatched`` for a request no rule
  matched (404, 405): never the path, which is tenant input. A request no rule matched with a
  method outside the standard ones is not counted by the exporter (the method would be a
  label value chosen by the caller).

The poller, compass and the janitor serve the same app in a thread of their own process
(``Server``: werkzeug, threaded): they are single leader-elected processes whose schedulers
must not be forked into gunicorn workers. The webhook and the listener bind it in their
gunicorn app (the listener on its operations port only, see ``listener.app``).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import flask
import werkzeug.exceptions
import werkzeug.serving
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client import multiprocess as prom_multiprocess
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector
from prometheus_flask_exporter import PrometheusMetrics

log = logging.getLogger(__name__)
request_log = logging.getLogger("tether.requests")
JSON = "application/json"
METRICS_TYPE = "text/plain; version=0.0.4; charset=utf-8"
MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"
READY_CACHE_SECONDS = 2.0
REQUEST_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)
UNMATCHED = "unmatched"  # the route label of a request no URL rule matched
STANDARD_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})

Check = Callable[[], str | None]
"""A probe check: None when fine, else the problem in a few words (no secrets)."""


def multiprocess(environ: Mapping[str, str] = os.environ) -> bool:
    """The one place that decides Prometheus multiprocess mode (several gunicorn workers
    write value files to ``PROMETHEUS_MULTIPROC_DIR``; ``/metrics`` aggregates them)."""
    return bool(environ.get(MULTIPROC_ENV))


def error(
    status: int, text: str, details: Any = None, *, retry_after: int | None = None
) -> flask.Response:
    """The JSON error answer of every part: ``{"error": text, "details": details}``."""
    resp = flask.jsonify({"error": text, "details": details})
    resp.status_code = status
    if retry_after is not None:
        resp.headers["Retry-After"] = str(retry_after)
    return resp


def ok(body: Any) -> flask.Response:
    resp = flask.jsonify(body)
    resp.status_code = 200
    return resp


class Probes:
    """Named liveness and readiness checks; readiness results cached (failures too)."""

    def __init__(
        self,
        *,
        cache_seconds: float = READY_CACHE_SECONDS,
        retry_after: int | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.retry_after = retry_after
        self._cache_seconds = cache_seconds
        self._clock = clock
        self._live: list[tuple[str, Check]] = []
        self._ready: list[tuple[str, Check]] = []
        self._lock = threading.Lock()
        self._until = float("-inf")
        self._problems: list[dict[str, str]] = []

    def live(self, name: str, check: Check) -> Probes:
        self._live.append((name, check))
        return self

    def ready(self, name: str, check: Check) -> Probes:
        self._ready.append((name, check))
        return self

    @staticmethod
    def _run(checks: Sequence[tuple[str, Check]]) -> list[dict[str, str]]:
        problems = []
        for name, check in checks:
            try:
                why = check()
            except Exception as e:  # noqa: BLE001 - a failing check is a problem, not a 500
                log.warning("probe check %s failed", name, exc_info=e)
                why = f"check failed: {type(e).__name__}"
            if why is not None:
                problems.append({"check": name, "message": why})
        return problems

    def liveness(self) -> list[dict[str, str]]:
        """The liveness problems (not cached: the checks only look at threads)."""
        return self._run(self._live)

    def readiness(self) -> list[dict[str, str]]:
        """Liveness and readiness problems, cached ``cache_seconds`` whatever the result."""
        with self._lock:
            if self._clock() < self._until:
                return self._problems
        problems = self._run(self._live) + self._run(self._ready)
        with self._lock:
            self._problems, self._until = problems, self._clock() + self._cache_seconds
        return problems


class Exposition:
    """What ``/metrics`` exposes: ``registry`` plus scrape-time collectors (``extra``); in
    multiprocess mode the aggregate of the workers' value files instead of ``registry``
    (metrics are then built unregistered, ``registry`` None)."""

    def __init__(
        self,
        registry: CollectorRegistry | None,
        extra: Sequence[Collector] = (),
        *,
        multiprocess_mode: bool | None = None,
        derive: Callable[[Iterable[Metric]], Iterable[Metric]] | None = None,
    ) -> None:
        self._derive = derive
        if multiprocess() if multiprocess_mode is None else multiprocess_mode:
            self.registry = CollectorRegistry()
            prom_multiprocess.MultiProcessCollector(self.registry)  # type: ignore[no-untyped-call]
        else:
            self.registry = registry if registry is not None else CollectorRegistry()
        for c in extra:
            try:
                self.registry.register(c)
            except ValueError:
                pass  # already registered (a single-process registry reused by a second app)

    def collect(self) -> Iterable[Metric]:
        """The families exposed: the registry's, passed through ``derive`` when given
        (metrics computed at scrape time from the others, instead of written per event)."""
        families = self.registry.collect()
        return families if self._derive is None else self._derive(families)

    def render(self) -> bytes:
        return generate_latest(self if self._derive is not None else self.registry)


def mark_worker_dead(pid: int) -> None:
    """gunicorn ``child_exit``: drop a dead worker's live gauges (multiprocess mode)."""
    if multiprocess():
        prom_multiprocess.mark_process_dead(pid)  # type: ignore[no-untyped-call]


def blueprint(probes: Probes, metrics: Callable[[], bytes]) -> flask.Blueprint:
    bp = flask.Blueprint("ops", __name__)

    @bp.get("/healthz")
    def healthz() -> flask.Response:
        problems = probes.liveness()
        if problems:
            return error(503, "not live", problems)
        return ok({"status": "ok"})

    @bp.get("/readyz")
    def readyz() -> flask.Response:
        problems = probes.readiness()
        if problems:
            return error(503, "not ready", problems, retry_after=probes.retry_after)
        return ok({"status": "ready"})

    @bp.get("/metrics")
    def metrics_endpoint() -> flask.Response:
        return flask.Response(metrics(), mimetype=METRICS_TYPE)

    return bp


def _log_request(resp: flask.Response) -> flask.Response:
    level = logging.WARNING if resp.status_code >= 500 else logging.DEBUG
    if request_log.isEnabledFor(level):
        started = flask.g.get("ops_started")
        ms = (time.perf_counter() - started) * 1000 if started is not None else -1.0
        request_log.log(
            level, "%s %s %d %.1fms", flask.request.method, flask.request.path, resp.status_code, ms
        )
    return resp


def init_app(app: flask.Flask, probes: Probes, metrics: Callable[[], bytes]) -> flask.Flask:
    """Registers the probes, ``/metrics``, the JSON error handlers and the request log."""
    app.register_blueprint(blueprint(probes, metrics))
    json_errors(app)

    @app.before_request
    def _start() -> None:
        if request_log.isEnabledFor(logging.DEBUG):
            flask.g.ops_started = time.perf_counter()

    app.after_request(_log_request)
    return app


def route(req: flask.Request) -> str:
    """The ``route`` label: the URL rule that matched, never the path (tenant input)."""
    return str(req.url_rule) if req.url_rule is not None else UNMATCHED


def request_metrics(
    app: flask.Flask,
    part: str,
    registry: CollectorRegistry | None,
    *,
    buckets: Sequence[float] = REQUEST_BUCKETS,
) -> PrometheusMetrics:
    """prometheus-flask-exporter's request metrics for ``app``, named ``tether_<part>_http_*``
    and registered in ``registry`` (None, in multiprocess mode: a throwaway registry; the
    values go to the workers' files either way, which ``Exposition`` aggregates). Bind it
    before the part's own hooks, so that its timer starts first and the method guard below
    runs even when a later hook answers early."""

    @app.before_request
    def _bounded_method() -> None:
        # an unmatched request's method is whatever the caller sent: not a label value
        if flask.request.url_rule is None and flask.request.method not in STANDARD_METHODS:
            flask.request.prom_do_not_track = True  # type: ignore[attr-defined]

    # PrometheusMetrics, not the exporter's multiprocess classes: those add a metrics server of
    # their own (and a registry reading the files) where ops.Exposition already serves them
    return PrometheusMetrics(
        app,
        path=None,
        registry=registry or CollectorRegistry(),
        defaults_prefix=f"tether_{part}",
        group_by=route,
        buckets=tuple(buckets),
    )


def json_errors(app: flask.Flask) -> None:
    """Every HTTP error (404, 405, 413...) and unexpected exception answered as JSON."""

    @app.errorhandler(werkzeug.exceptions.HTTPException)
    def http_error(e: werkzeug.exceptions.HTTPException) -> flask.Response:
        return error(e.code or 500, (e.name or "error").lower(), e.description)

    @app.errorhandler(Exception)
    def unexpected(e: Exception) -> flask.Response:
        log.error(
            "unexpected error in %s %s", flask.request.method, flask.request.url_rule, exc_info=e
        )
        return error(500, "internal error", f"see the {app.name}'s log")


class Server:
    """An ops app served by werkzeug's threaded server in a daemon thread."""

    def __init__(self, app: flask.Flask, bind: str) -> None:
        host, _, port = bind.rpartition(":")
        self._server = werkzeug.serving.make_server(host.strip("[]"), int(port), app, threaded=True)
        self.port = self._server.server_port
        self._thread = threading.Thread(target=self._server.serve_forever, name="http", daemon=True)

    def start(self) -> Server:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._thread.join(5)


def create_app(name: str, probes: Probes, metrics: Callable[[], bytes]) -> flask.Flask:
    """An app with only the operations surface (poller, compass, janitor)."""
    return init_app(flask.Flask(name), probes, metrics)


def scheduler_app(
    name: str,
    registry: CollectorRegistry,
    running: Callable[[], bool],
    not_running: str,
    *,
    cache_seconds: float = READY_CACHE_SECONDS,
) -> flask.Flask:
    """The operations app of a leader-elected part (compass, the enroller, the janitor, the
    injector): ready while ``running()`` (its scheduler, and its elector where it says so),
    else not ready with ``not_running``; ``/metrics`` from ``registry``."""
    probes = Probes(cache_seconds=cache_seconds).ready(
        "scheduler", lambda: None if running() else not_running
    )
    return create_app(name, probes, Exposition(registry).render)
