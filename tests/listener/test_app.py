"""The listener's HTTP behaviour that needs no Kubernetes, through the app factory.

The KCP gateway points at a closed local port: routing, the two ports, error shapes and the
refusal of a caller without a certificate all happen before any KCP call; readiness reports
the unreachable KCP. Persisting, authorization against Kyma CRs and the 413/415 answers
(which come after authentication, a KCP lookup) stay on real planes (tests/listener).
"""

from __future__ import annotations

import pathlib
from typing import Any

import flask
import pytest

from listener import app as app_mod
from listener import settings
from tether.base import certs
from tether.kube import gateway

KUBECONFIG = """apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "http://127.0.0.1:9"}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
"""
DATA = {"SERVER_PORT": "8443"}
OPS = {"SERVER_PORT": "9090"}
PATH = "/v1/runtimes/rt-1/changes"


@pytest.fixture
def app(tmp_path: pathlib.Path) -> flask.Flask:
    ca = certs.CertificateAuthority.create("test ca")
    (tmp_path / "ca.pem").write_bytes(ca.cert_pem)
    s = settings.Settings(
        client_ca_file=str(tmp_path / "ca.pem"),
        kcp_timeout=0.5,
        bind="127.0.0.1:8443",
        ops_bind="127.0.0.1:9090",
        audit_log="stdout",
    )
    return app_mod.create_app(s, kcp=gateway.from_kubeconfig_bytes(KUBECONFIG, timeout=0.5))


def get(
    app: flask.Flask, path: str, environ: dict[str, str], method: str = "GET", **kw: Any
) -> Any:
    return app.test_client().open(path, method=method, environ_overrides=environ, **kw)


def assert_json_error(r: Any, status: int) -> None:
    assert r.status_code == status, r.get_data(as_text=True)
    assert r.mimetype == "application/json"
    assert set(r.get_json()) == {"error", "details"}
    assert r.headers["Cache-Control"] == "no-store"


def test_unknown_paths_and_methods_are_json_on_both_ports(app: flask.Flask) -> None:
    for environ in (DATA, OPS):
        assert_json_error(get(app, "/nope", environ), 404)
        assert_json_error(get(app, "/healthz", environ, method="POST"), 405)
    assert_json_error(get(app, PATH, DATA, method="GET"), 405)
    assert_json_error(get(app, "/v1/runtimes/rt-1/state", DATA, method="DELETE"), 405)


def test_runtime_api_only_on_the_data_port_operations_only_on_the_ops_port(
    app: flask.Flask,
) -> None:
    for path in ("/readyz", "/metrics"):
        r = get(app, path, DATA)
        assert_json_error(r, 404)
        assert "operations port 9090" in r.get_json()["details"]
    r = get(app, PATH, OPS, method="POST", json={})
    assert_json_error(r, 404)
    assert "data port" in r.get_json()["details"]
    for environ in (DATA, OPS):
        assert get(app, "/healthz", environ).get_json() == {"status": "ok"}


def test_no_certificate_is_401_json_before_any_kcp_call(app: flask.Flask) -> None:
    r = get(app, PATH, DATA, method="POST", data=b"x" * 100, content_type="text/plain")
    assert_json_error(r, 401)
    assert r.get_json()["details"]["reason"] == "no_certificate"
    assert_json_error(get(app, "/v1/runtimes/rt-1/state", DATA), 401)


def test_readiness_names_the_unreachable_kcp_with_retry_after(app: flask.Flask) -> None:
    r = get(app, "/readyz", OPS)
    assert_json_error(r, 503)
    assert r.headers["Retry-After"] == "5"
    assert [p["check"] for p in r.get_json()["details"]] == ["kcp-api"]


def test_openapi_and_metrics_content_types(app: flask.Flask) -> None:
    r = get(app, "/openapi.json", DATA)
    assert r.status_code == 200 and r.mimetype == "application/json"
    assert r.get_json()["openapi"].startswith("3.")
    r = get(app, "/metrics", OPS)
    assert r.status_code == 200 and r.mimetype == "text/plain"
    assert "tether_listener_requests_total" in r.get_data(as_text=True)


def test_an_unexpected_exception_is_a_500_without_details(app: flask.Flask) -> None:
    @app.get("/v1/boom")
    def boom() -> flask.Response:
        raise RuntimeError("internal detail")

    r = get(app, "/v1/boom", DATA)
    assert_json_error(r, 500)
    assert "internal detail" not in r.get_data(as_text=True)
