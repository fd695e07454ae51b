"""The Flask app from its factory (no forwarder, no network), and the settings."""

from __future__ import annotations

import json
import pathlib
from typing import Any

import flask
import pytest
from prometheus_client import CollectorRegistry

from testing.webhookapp import app_settings, review
from tether.base import config
from webhook import app, keyqueue, metrics
from webhook import services as services_mod
from webhook import settings as settings_mod


def _app() -> tuple[Any, services_mod.Services]:
    s = app_settings()
    registry = CollectorRegistry()
    svc = services_mod.Services(
        s, keyqueue.KeyQueue(s.queue_size), metrics.build(registry), registry
    )
    return app.create_app(s, svc).test_client(), svc


def _post(c: Any, doc: Any) -> Any:
    return c.post("/validate", data=json.dumps(doc), content_type="application/json")


def test_allows_and_enqueues() -> None:
    c, svc = _app()
    r = _post(c, review("UPDATE"))
    assert r.status_code == 200
    assert r.get_json() == {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "response": {"uid": "req-1", "allowed": True},
    }
    assert len(svc.queue) == 1
    _post(c, review("UPDATE"))
    assert len(svc.queue) == 1
    text = c.get("/metrics").get_data(as_text=True)  # derived at scrape time
    assert "tether_webhook_queue_coalesced_total 1.0" in text
    assert "tether_webhook_queue_overflowed_total 0.0" in text


def test_skipped_requests_are_still_allowed_and_counted() -> None:
    c, svc = _app()
    for doc in (review(dry_run=True), review(ns="kube-system")):
        assert _post(c, doc).get_json()["response"]["allowed"] is True
    assert len(svc.queue) == 0
    text = c.get("/metrics").get_data(as_text=True)
    assert (
        'tether_webhook_admission_requests_total{operation="UPDATE",outcome="dry-run"} 1.0' in text
    )
    assert 'outcome="not-watched"} 1.0' in text  # the built-in Watch ignores kube-system


def test_overflow_is_counted_and_still_allowed() -> None:
    c, svc = _app()
    for name in ("a", "b", "c", "d"):
        assert _post(c, review(name=name)).status_code == 200
    assert len(svc.queue) == 2
    text = c.get("/metrics").get_data(as_text=True)
    assert "tether_webhook_queue_overflowed_total 2.0" in text


@pytest.mark.parametrize(
    ("body", "ctype", "status", "error"),
    [
        (b"{oops", "application/json", 400, "invalid JSON"),
        (b"\xff\xfe", "application/json", 400, "invalid JSON"),
        (b'{"kind": "AdmissionReview"}', "application/json", 400, "invalid AdmissionReview"),
        (b"{}", "text/plain", 415, "unsupported media type"),
        (b"x" * (65 * 1024), "application/json", 413, "request too large"),
    ],
)
def test_bad_requests(body: bytes, ctype: str, status: int, error: str) -> None:
    c, _ = _app()
    r = c.post("/validate", data=body, content_type=ctype)
    assert r.status_code == status
    assert r.get_json()["error"] == error
    assert "Traceback" not in r.get_data(as_text=True)


def test_the_api_servers_call_skips_flask_and_refusals_reach_the_route() -> None:
    """A review of known length that parses is answered outside Flask (webhook.validate's
    FastPath, the API server's call); a body that does not parse reaches the Flask route
    with its bytes intact and is refused there, naming what is wrong."""
    c, svc = _app()
    seen: list[str] = []
    c.application.before_request(lambda: seen.append(flask.request.path))
    assert _post(c, review("UPDATE")).get_json()["response"] == {"uid": "req-1", "allowed": True}
    assert seen == [] and len(svc.queue) == 1
    r = c.post("/validate", data=b'{"kind": "AdmissionReview"}', content_type="application/json")
    assert r.status_code == 400
    assert r.get_json()["details"] == [
        "apiVersion must be admission.k8s.io/v1",
        "request must be an object",
    ]
    assert seen == ["/validate"]


def test_an_unexpected_error_on_the_fast_path_is_a_json_500(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    c, svc = _app()

    def broken(*_: Any) -> None:
        raise RuntimeError("a bug")

    monkeypatch.setattr(svc, "admit", broken)
    r = _post(c, review("UPDATE"))
    assert r.status_code == 500
    assert r.get_json() == {"error": "internal error", "details": "see the webhook's log"}
    text = c.get("/metrics").get_data(as_text=True)
    assert 'tether_webhook_http_request_exceptions_total{method="POST",status="500"} 1.0' in text
    assert (
        "tether_webhook_http_request_duration_seconds_count"
        '{method="POST",route="/validate",status="500"} 1.0'
    ) in text


def test_unknown_path_and_method_are_json() -> None:
    c, _ = _app()
    r = c.get("/validate")
    assert r.status_code == 405 and r.get_json()["error"] == "method not allowed"
    assert c.get("/nope").status_code == 404


def test_readyz_needs_a_running_forwarder() -> None:
    c, _ = _app()
    r = c.get("/readyz")
    assert r.status_code == 503
    assert {"check": "forwarder", "message": "forwarder not running"} in r.get_json()["details"]
    assert c.get("/healthz").status_code == 200


def test_overflow_log_is_rate_limited() -> None:
    now = [0.0]
    ol = services_mod.OverflowLog(60, clock=lambda: now[0])
    assert ol.hit() == 1
    assert ol.hit() is None and ol.hit() is None
    now[0] = 61
    assert ol.hit() == 3


def _env(tmp_path: pathlib.Path, **extra: str) -> dict[str, str]:
    for f in ("ca", "crt", "key", "scrt", "skey"):
        (tmp_path / f).write_text("x")
    env = {
        "TETHER_RUNTIME_ID": "rt-1",
        "TETHER_LISTENER_URL": "https://listener:8443/",
        "TETHER_LISTENER_CA_FILE": str(tmp_path / "ca"),
        "TETHER_CLIENT_CERT_FILE": str(tmp_path / "crt"),
        "TETHER_CLIENT_KEY_FILE": str(tmp_path / "key"),
        "TETHER_WEBHOOK_CERT_FILE": str(tmp_path / "scrt"),
        "TETHER_WEBHOOK_KEY_FILE": str(tmp_path / "skey"),
    }
    env.update(extra)
    return env


def test_settings_from_env(tmp_path: pathlib.Path) -> None:
    s = settings_mod.from_env(
        _env(tmp_path, TETHER_WEBHOOK_QUEUE_SIZE="5", TETHER_LABEL_SELECTOR="w=1")
    )
    assert s.listener.base_url == "https://listener:8443"
    assert s.queue_size == 5 and s.filter.selector_text == "w=1"
    assert s.server.workers == 2 and s.forwarder.threads == 2


@pytest.mark.parametrize(
    ("var", "value"),
    [
        ("TETHER_RUNTIME_ID", "bad id!"),
        ("TETHER_LISTENER_URL", "http://plain"),
        ("TETHER_CLIENT_CERT_FILE", "/nonexistent"),
        ("TETHER_WEBHOOK_QUEUE_SIZE", "0"),
        ("TETHER_LABEL_SELECTOR", "a in (b"),
        ("TETHER_LOG_LEVEL", "loud"),
        ("TETHER_WEBHOOK_DRAIN_SECONDS", "30"),
        ("TETHER_WEBHOOK_COALESCE_SECONDS", "9"),
        ("TETHER_QUEUE_SIZE", "5"),  # renamed: refused with the new name
    ],
)
def test_bad_settings_name_the_variable(tmp_path: pathlib.Path, var: str, value: str) -> None:
    with pytest.raises(config.SettingError, match=var):
        settings_mod.from_env(_env(tmp_path, **{var: value}))


def test_missing_runtime_id(tmp_path: pathlib.Path) -> None:
    env = _env(tmp_path)
    del env["TETHER_RUNTIME_ID"]
    with pytest.raises(config.SettingError, match="TETHER_RUNTIME_ID: not set"):
        settings_mod.from_env(env)


def _exit_code(argv: list[str]) -> object:
    from webhook import main

    with pytest.raises(SystemExit) as e:
        main.main(argv)
    return e.value.code


def test_main_stops_with_a_clear_error(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    for k, v in _env(tmp_path).items():
        monkeypatch.setenv(k, v)
    assert _exit_code(["--listener-url", "ftp://x"]) == 2
    assert capsys.readouterr().err == (
        "tether webhook: TETHER_LISTENER_URL: 'ftp://x' must be an https:// URL with a host\n"
    )


def test_main_refuses_certificates_that_do_not_load(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from tether.base import certs

    for k, v in _env(tmp_path).items():  # the files exist but hold no PEM
        monkeypatch.setenv(k, v)
    assert _exit_code([]) == 2
    assert "TETHER_LISTENER_CA_FILE: " in capsys.readouterr().err
    ca = certs.CertificateAuthority.create("t")
    ca.issue("s", server=True).write(tmp_path / "scrt", tmp_path / "skey")
    ca.issue("other", client=True).write(tmp_path / "crt", tmp_path / "other.key")
    ca.issue("c", client=True).write(
        tmp_path / "unused.crt", tmp_path / "key"
    )  # key of another cert
    (tmp_path / "ca").write_bytes(ca.cert_pem)
    assert _exit_code([]) == 2
    assert (
        "TETHER_CLIENT_KEY_FILE: " in (err := capsys.readouterr().err) and "does not match" in err
    )
    ca.issue("c", client=True).write(tmp_path / "crt", tmp_path / "key")
    monkeypatch.setenv("TETHER_KUBECONFIG", str(tmp_path / "ca"))  # not a kubeconfig
    assert _exit_code([]) == 2
    assert "TETHER_KUBECONFIG: " in capsys.readouterr().err


def test_request_metrics_by_route_in_the_one_exposition() -> None:
    """prometheus-flask-exporter's request metrics (issue 28, item 8): labelled by URL rule,
    served by the part's own /metrics (the exporter registers no endpoint of its own); an
    unknown path or a made-up method never becomes a label value."""
    c, _ = _app()
    assert _post(c, review()).status_code == 200
    for path in ("/nope-1", "/nope-2", "/tenant/secret-name"):
        assert c.get(path).status_code == 404
    assert c.open("/nope-3", method="BREW").status_code in (404, 405)
    text = c.get("/metrics").get_data(as_text=True)
    assert (
        "tether_webhook_http_request_duration_seconds_count"
        '{method="POST",route="/validate",status="200"} 1.0'
    ) in text
    assert (
        "tether_webhook_http_request_duration_seconds_count"
        '{method="GET",route="unmatched",status="404"} 3.0'
    ) in text
    assert 'tether_webhook_http_request_total{method="POST",status="200"} 1.0' in text
    assert "nope" not in text and "secret-name" not in text and "BREW" not in text
    assert "tether_webhook_exporter_info" in text
    assert text.count("# TYPE tether_webhook_http_request_duration_seconds histogram") == 1
