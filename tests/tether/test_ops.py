"""The operations surface shared by every part (``tether.base.ops``), from its app factory."""

from __future__ import annotations

import flask
from prometheus_client import CollectorRegistry, Counter

from tether.base import ops


def test_readiness_is_cached_failures_too_and_names_the_check() -> None:
    now = [0.0]
    state = {"ca": "cannot load ca.pem: ValueError"}
    calls = []

    def ca() -> str | None:
        calls.append(1)
        return state["ca"]

    probes = ops.Probes(cache_seconds=2.0, retry_after=5, clock=lambda: now[0]).ready(
        "client-ca", ca
    )
    c = ops.create_app("t", probes, lambda: b"").test_client()
    r = c.get("/readyz")
    assert r.status_code == 503 and r.headers["Retry-After"] == "5"
    assert r.json == {
        "error": "not ready",
        "details": [{"check": "client-ca", "message": "cannot load ca.pem: ValueError"}],
    }
    state["ca"] = None
    assert c.get("/readyz").status_code == 503 and len(calls) == 1  # the failure is cached
    now[0] = 2.5
    assert c.get("/readyz").json == {"status": "ready"} and len(calls) == 2


def test_liveness_fails_healthz_and_readyz_a_raising_check_is_a_problem() -> None:
    def boom() -> str | None:
        raise RuntimeError("secret detail")

    probes = (
        ops.Probes(cache_seconds=0)
        .live("scheduler", lambda: "scheduler not running")
        .ready("kcp", boom)
    )
    c = ops.create_app("t", probes, lambda: b"").test_client()
    r = c.get("/healthz")
    assert r.status_code == 503 and r.json["details"] == [
        {"check": "scheduler", "message": "scheduler not running"}
    ]
    assert c.get("/readyz").json["details"] == [
        {"check": "scheduler", "message": "scheduler not running"},
        {"check": "kcp", "message": "check failed: RuntimeError"},
    ]


def test_errors_are_json_never_html_nor_a_traceback() -> None:
    app = ops.create_app("t", ops.Probes(), lambda: b"")

    @app.get("/boom")
    def boom() -> flask.Response:
        raise RuntimeError("a detail for the log only")

    c = app.test_client()
    for path, method, status in (
        ("/nope", "GET", 404),
        ("/healthz", "POST", 405),
        ("/boom", "GET", 500),
    ):
        r = c.open(path, method=method)
        assert r.status_code == status and r.mimetype == "application/json", path
        assert set(r.json) == {"error", "details"}
        assert "detail for the log" not in r.get_data(as_text=True)


def test_metrics_single_process_and_scrape_time_collectors() -> None:
    reg = CollectorRegistry()
    Counter("tether_t_things", "things", registry=reg).inc(2)
    extra = CollectorRegistry()
    Counter("tether_t_extra", "extra", registry=extra).inc()
    exp = ops.Exposition(reg, [extra], multiprocess_mode=False)
    body = ops.create_app("t", ops.Probes(), exp.render).test_client().get("/metrics")
    assert body.mimetype == "text/plain"
    text = body.get_data(as_text=True)
    assert "tether_t_things_total 2.0" in text and "tether_t_extra_total 1.0" in text


def test_multiprocess_is_decided_by_the_environment() -> None:
    assert ops.multiprocess({"PROMETHEUS_MULTIPROC_DIR": "/tmp/x"})
    assert not ops.multiprocess({"PROMETHEUS_MULTIPROC_DIR": ""}) and not ops.multiprocess({})
