"""Settings from the environment, the TLS refusal reasons and the OpenAPI document."""

from __future__ import annotations

import json
import pathlib
import ssl

import jsonschema
import pytest

from listener import settings
from listener.edge import openapi, worker
from tether.base import config
from tether.wire import changes, conversion, watches


@pytest.fixture
def files(tmp_path: pathlib.Path) -> dict[str, str]:
    for n in ("ca.crt", "tls.crt", "tls.key"):
        (tmp_path / n).write_text("x")
    return {
        "TETHER_LISTENER_CLIENT_CA_FILE": str(tmp_path / "ca.crt"),
        "TETHER_LISTENER_TLS_CERT_FILE": str(tmp_path / "tls.crt"),
        "TETHER_LISTENER_TLS_KEY_FILE": str(tmp_path / "tls.key"),
    }


def test_defaults(files: dict[str, str]) -> None:
    s = settings.from_env(files)
    assert (s.namespace, s.max_body_bytes, s.rate_burst, s.tls) == (
        "kcp-system",
        3 * 1024 * 1024,
        1000,
        True,
    )
    assert s.max_in_flight_per_runtime == 4 and s.silent_thresholds == (60, 300, 900, 3600)
    assert (s.bind, s.ops_bind) == ("0.0.0.0:8443", "0.0.0.0:9090")
    assert (s.handshake_timeout, s.head_timeout, s.body_timeout) == (5.0, 10.0, 30.0)
    assert s.parse_budget_bytes >= s.max_body_bytes * settings.PARSE_AMPLIFICATION


def test_plain_http_binds_loopback_unless_told(files: dict[str, str]) -> None:
    xfcc = {
        "TETHER_LISTENER_CLIENT_CA_FILE": files["TETHER_LISTENER_CLIENT_CA_FILE"],
        "TETHER_LISTENER_XFCC_TRUSTED_PROXIES": "127.0.0.1/32",
    }
    assert settings.from_env(xfcc).bind == "127.0.0.1:8443"
    told = {**xfcc, "TETHER_LISTENER_BIND": "0.0.0.0:8080"}
    assert settings.from_env(told).bind == "0.0.0.0:8080"


@pytest.mark.parametrize(
    ("extra", "needle"),
    [
        ({"TETHER_LISTENER_RATE_BURST": "0"}, "TETHER_LISTENER_RATE_BURST"),
        ({"TETHER_LISTENER_MAX_BODY_BYTES": "1000"}, "TETHER_LISTENER_MAX_BODY_BYTES"),
        (
            {"TETHER_LISTENER_XFCC_TRUSTED_PROXIES": "nonsense"},
            "TETHER_LISTENER_XFCC_TRUSTED_PROXIES",
        ),
        ({"TETHER_LISTENER_SILENT_THRESHOLDS_SECONDS": "a,b"}, "TETHER_LISTENER_SILENT_THRESHOLDS"),
        ({"TETHER_LISTENER_TLS_KEY_FILE": ""}, "go together"),
        ({"TETHER_LISTENER_CLIENT_CA_FILE": "/nope"}, "TETHER_LISTENER_CLIENT_CA_FILE"),
        (
            {"TETHER_LISTENER_MAX_IN_FLIGHT": "4"},
            "renamed TETHER_LISTENER_MAX_IN_FLIGHT_PER_RUNTIME",
        ),
        (
            {"TETHER_LISTENER_MAX_IN_FLIGHT_PER_RUNTIME": "99"},
            "TETHER_LISTENER_MAX_IN_FLIGHT_PER_RUNTIME",
        ),
        ({"TETHER_LISTENER_PARSE_BUDGET_BYTES": "1000"}, "TETHER_LISTENER_PARSE_BUDGET_BYTES"),
        ({"TETHER_LISTENER_MAX_CONNECTIONS": "2"}, "TETHER_LISTENER_MAX_CONNECTIONS"),
        ({"TETHER_LISTENER_HEAD_TIMEOUT_SECONDS": "0"}, "TETHER_LISTENER_HEAD_TIMEOUT_SECONDS"),
    ],
)
def test_bad_values_name_the_variable(
    files: dict[str, str], extra: dict[str, str], needle: str
) -> None:
    with pytest.raises(config.SettingError, match=needle):
        settings.from_env({**files, **extra})


def test_shared_variables_are_fallbacks(files: dict[str, str]) -> None:
    s = settings.from_env(
        {
            **files,
            "TETHER_KCP_NAMESPACE": "kcp-x",
            "TETHER_AUDIT_LOG": "/a",
            "TETHER_LOG_LEVEL": "debug",
        }
    )
    assert (s.namespace, s.audit_log, s.log_level) == ("kcp-x", "/a", "DEBUG")
    s = settings.from_env(
        {**files, "TETHER_KCP_NAMESPACE": "kcp-x", "TETHER_LISTENER_NAMESPACE": "own"}
    )
    assert s.namespace == "own"
    with pytest.raises(config.SettingError, match="LOG_FORMAT"):
        settings.from_env({**files, "TETHER_LOG_FORMAT": "xml"})


def test_plain_http_only_behind_a_trusted_proxy(files: dict[str, str]) -> None:
    base = {"TETHER_LISTENER_CLIENT_CA_FILE": files["TETHER_LISTENER_CLIENT_CA_FILE"]}
    with pytest.raises(config.SettingError, match="TLS_CERT_FILE: not set; it is required"):
        settings.from_env(base)
    s = settings.from_env({**base, "TETHER_LISTENER_XFCC_TRUSTED_PROXIES": "127.0.0.6/32,::1"})
    assert not s.tls and s.xfcc_trusted_proxies == ("127.0.0.6/32", "::1")


def test_tls_reasons() -> None:
    def err(verify: str, reason: str = "CERTIFICATE_VERIFY_FAILED") -> ssl.SSLError:
        e = ssl.SSLCertVerificationError(1, "x")
        e.verify_message = verify
        e.reason = reason
        return e

    assert worker.tls_reason(err("certificate has expired")) == "certificate_expired"
    assert worker.tls_reason(err("unable to get local issuer certificate")) == "unknown_ca"
    assert worker.tls_reason(err("", "TLSV1_ALERT_PROTOCOL_VERSION")) == "protocol"
    assert worker.tls_reason(ssl.SSLError(1, "?")) == "handshake_failed"


def test_openapi_file_is_generated_from_the_shared_schemas() -> None:
    assert openapi.OPENAPI_FILE.read_text() == openapi.render(), (
        "listener/openapi.json is stale: "
        ".venv/bin/python -m listener.edge.openapi > listener/openapi.json"
    )
    doc = json.loads(openapi.render())
    comp = doc["components"]["schemas"]
    record_src = changes.load_schema(openapi.RECORD_FILE)
    assert (
        comp["ConfigMapChange"]["properties"]["namespace"] == record_src["properties"]["namespace"]
    )
    assert "$defs" not in json.dumps(comp) and "$id" not in json.dumps(comp)


def test_openapi_schemas_accept_and_reject_like_the_shared_ones() -> None:
    doc = json.loads(openapi.render())
    wrapper = {**doc["components"], "$ref": "#/schemas/ChangeRequest"}
    text = json.dumps(wrapper).replace("#/components/schemas/", "#/schemas/")
    validator = jsonschema.Draft202012Validator(json.loads(text))
    good = conversion.from_configmap(
        {"metadata": {"namespace": "a", "name": "b", "resourceVersion": "1"}, "data": {"k": "v"}},
        runtime_id="rt",
        source="webhook",
    )
    samples: list[object] = [
        good,
        changes.batch([good]),
        {**good, "runtimeId": "a,b"},
        {**good, "deleted": True},
        {**good, "binaryData": {"k": "***"}},
        changes.batch([]),
        {**good, "data": {"": "x"}},
        [],
        "x",
    ]
    w = watches.parse(
        {
            "metadata": {"name": "w"},
            "spec": {
                "resource": {
                    "group": "",
                    "version": "v1",
                    "resource": "configmaps",
                    "kind": "ConfigMap",
                }
            },
        }
    )
    v2 = changes.from_object(
        {"metadata": {"namespace": "a", "name": "b", "resourceVersion": "1"}, "data": {"k": "v"}},
        watch=w,
        runtime_id="rt",
        source="webhook",
    )
    samples += [
        v2,
        changes.batch([v2]),
        {**v2, "watch": ""},
        {**v2, "resource": {}},
        changes.batch([v2, good]),
    ]
    for s in samples:
        shared = not (
            changes.validate_batch(s)
            if isinstance(s, dict) and s.get("kind") in changes.LIST_KINDS
            else changes.validate_record(s)
        )
        assert validator.is_valid(s) == shared, s


def test_api_reference_is_generated_from_the_openapi_document() -> None:
    from listener.edge import apidoc

    path = pathlib.Path(__file__).resolve().parents[2] / "docs" / "api.md"
    assert path.read_text() == apidoc.render(), (
        "docs/api.md is stale: .venv/bin/python -m listener.edge.apidoc > docs/api.md"
    )
    assert "`POST /v1/runtimes/{runtimeId}/changes`" in path.read_text()
