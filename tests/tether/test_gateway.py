"""The gateway's error mapping (plain data: exceptions of the kubernetes client and of
urllib3, no server) and its kubeconfig errors."""

from __future__ import annotations

import json
import pathlib
import socket

import pytest
import urllib3
from kubernetes.client import exceptions

from tether.kube import gateway
from tether.kube.gateway import errors


@pytest.mark.parametrize(
    ("status", "kind"),
    [
        (400, gateway.Rejected),
        (413, gateway.Rejected),
        (422, gateway.Rejected),
        (401, gateway.Forbidden),
        (403, gateway.Forbidden),
        (404, gateway.NotFound),
        (409, gateway.Conflict),
        (410, gateway.Gone),
        (429, gateway.Unavailable),
        (500, gateway.Unavailable),
        (503, gateway.Unavailable),
        (504, gateway.Unavailable),
        (405, gateway.GatewayError),
        (418, gateway.GatewayError),
    ],
)
def test_status_maps_to_its_error(status: int, kind: type[gateway.GatewayError]) -> None:
    e = errors.translate(exceptions.ApiException(status=status), "get leases")
    assert type(e) is kind
    assert e.status == status and str(e) == f"get leases: HTTP {status}"


def test_forbidden_is_unavailable_and_the_rest_is_not() -> None:
    # callers that only care "retry later" catch Unavailable; RBAC is distinguishable
    assert issubclass(gateway.Forbidden, gateway.Unavailable)
    for kind in (gateway.Rejected, gateway.NotFound, gateway.Conflict, gateway.Gone):
        assert not issubclass(kind, gateway.Unavailable)
        assert issubclass(kind, gateway.GatewayError)


def test_rejected_carries_the_api_reason_bounded_and_nothing_else_does() -> None:
    body = json.dumps({"kind": "Status", "message": "x" * 1000 + " too large"})
    e = errors.translate(exceptions.ApiException(status=413, body=body), "create records")
    assert isinstance(e, gateway.Rejected) and str(e).startswith("create records: HTTP 413: x")
    assert len(str(e)) <= 300
    secret = json.dumps({"message": "token=s3cr3t"})
    for status in (403, 409, 500):
        assert "s3cr3t" not in str(
            errors.translate(exceptions.ApiException(status=status, body=secret), "op")
        )
    assert (
        str(errors.translate(exceptions.ApiException(status=422, body="<html>"), "op"))
        == "op: HTTP 422"
    )


@pytest.mark.parametrize(
    "exc",
    [
        urllib3.exceptions.NewConnectionError(None, "refused"),  # type: ignore[arg-type]
        urllib3.exceptions.ReadTimeoutError(None, "/", "read timed out"),  # type: ignore[arg-type]
        urllib3.exceptions.ProtocolError("connection aborted"),
        urllib3.exceptions.SSLError("bad handshake"),
        ConnectionResetError(104, "reset"),
        TimeoutError("timed out"),
        exceptions.ApiException(status=None, reason="no answer"),
    ],
)
def test_transport_failures_are_unavailable(exc: BaseException) -> None:
    e = errors.translate(exc, "list configmaps")
    assert type(e) is gateway.Unavailable and e.status is None
    assert str(e).startswith("list configmaps: ")


def test_a_gateway_error_passes_through_and_others_are_named() -> None:
    nf = gateway.NotFound("get x: HTTP 404", 404)
    assert errors.translate(nf, "other") is nf
    assert type(errors.translate(ValueError("bad json"), "op")) is gateway.Unavailable
    assert str(errors.translate(KeyError("k"), "op")) == "op: KeyError"


def test_raised_from_the_original_on_a_dead_server() -> None:
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    kubeconfig = f"""
apiVersion: v1
kind: Config
clusters: [{{name: c, cluster: {{server: "https://127.0.0.1:{port}", insecure-skip-tls-verify: true}}}}]
users: [{{name: u, user: {{token: not-a-real-token}}}}]
contexts: [{{name: x, context: {{cluster: c, user: u}}}}]
current-context: x
"""  # noqa: E501
    kube = gateway.from_kubeconfig_bytes(kubeconfig, timeout=2)
    try:
        with pytest.raises(gateway.Unavailable) as e:
            kube.get(gateway.CONFIGMAPS, "default", "x")
        assert isinstance(e.value.__cause__, urllib3.exceptions.HTTPError | OSError)
        assert "not-a-real-token" not in str(e.value)
    finally:
        kube.close()


def test_resource_paths() -> None:
    rec = gateway.Resource("tether.kyma-project.io", "v1", "runtimeconfigmaps")
    assert (
        rec.path("ns", "a/b", "status")
        == "/apis/tether.kyma-project.io/v1/namespaces/ns/runtimeconfigmaps/a%2Fb/status"
    )
    assert gateway.CONFIGMAPS.path() == "/api/v1/configmaps"
    assert gateway.NAMESPACES.path("ignored", "team-a") == "/api/v1/namespaces/team-a"
    assert gateway.kube.list_query(label_selector="a=b", limit=5, continue_token="t") == [
        ("labelSelector", "a=b"),
        ("limit", "5"),
        ("continue", "t"),
    ]


@pytest.mark.parametrize("content", ["- a\n- b\n", "just text\n", "{}\n", "clusters: 5\n"])
def test_not_a_kubeconfig(tmp_path: pathlib.Path, content: str) -> None:
    path = tmp_path / "config"
    path.write_text(content)
    with pytest.raises(gateway.KubeConfigError, match="cannot load Kubernetes configuration"):
        gateway.from_kubeconfig(str(path))
    with pytest.raises(gateway.KubeConfigError):
        gateway.from_kubeconfig_bytes(content)


def test_missing_file(tmp_path: pathlib.Path) -> None:
    with pytest.raises(gateway.KubeConfigError):
        gateway.from_kubeconfig(str(tmp_path / "nope"))
