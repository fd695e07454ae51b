"""The operator commands' connection options (``admin.kubeargs``), as kubectl has them, with
defaults that match the manifests (plain data: the manifests are read as YAML, a kubeconfig
is loaded from a file, nothing is asked of an API server)."""

from __future__ import annotations

import argparse
import pathlib

import pytest
import yaml

from admin import kubeargs, records_cli, status_cli

ROOT = pathlib.Path(__file__).resolve().parents[2]


def _parse(p: argparse.ArgumentParser, *argv: str) -> argparse.Namespace:
    return p.parse_args(list(argv))


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: pathlib.Path) -> pathlib.Path:
    for name in ("TETHER_KCP_NAMESPACE", "TETHER_HEARTBEAT_NAMESPACE", "KUBECONFIG"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    return tmp_path


def _listener_env() -> dict[str, str]:
    doc = yaml.safe_load((ROOT / "manifests/kcp/listener/deployment.yaml").read_text())
    container = doc["spec"]["template"]["spec"]["containers"][0]
    return {e["name"]: e.get("value", "") for e in container["env"]}


def test_the_defaults_are_the_manifests_namespaces(clean_env: pathlib.Path) -> None:
    """``tether status`` run as the demo prints it finds the heartbeat Leases where the
    listener writes them (it looked in kcp-system, and called a healthy runtime silent)."""
    args = _parse(status_cli.parser(), "rt-1")
    env = _listener_env()
    assert args.heartbeat_namespace == env["TETHER_LISTENER_HEARTBEAT_NAMESPACE"]
    assert args.heartbeat_namespace == "tether-heartbeats"
    docs = yaml.safe_load_all((ROOT / "manifests/kcp/listener/heartbeats.yaml").read_text())
    namespaces = [d["metadata"]["name"] for d in docs if d and d["kind"] == "Namespace"]
    assert namespaces == [args.heartbeat_namespace]
    assert args.namespace == env["TETHER_LISTENER_NAMESPACE"] == "kcp-system"
    deployment = yaml.safe_load((ROOT / "manifests/kcp/listener/deployment.yaml").read_text())
    assert args.tether_namespace == deployment["metadata"]["namespace"] == "tether-system"


def test_the_environment_overrides_the_defaults(
    clean_env: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TETHER_KCP_NAMESPACE", "kcp-a")
    monkeypatch.setenv("TETHER_HEARTBEAT_NAMESPACE", "beats-a")
    args = _parse(status_cli.parser())
    assert (args.namespace, args.heartbeat_namespace) == ("kcp-a", "beats-a")


@pytest.mark.parametrize("make", [status_cli.parser, records_cli.parser])
def test_n_is_namespace_and_context_is_taken(make: object, clean_env: pathlib.Path) -> None:
    p = make()  # type: ignore[operator]
    short = _parse(p, "rt-1", "-n", "kcp-b", "--context", "prod")
    long = _parse(p, "rt-1", "--namespace", "kcp-b", "--context", "prod")
    assert short.namespace == long.namespace == "kcp-b"
    assert short.context == "prod"


def test_the_kubeconfig_is_chosen_as_kubectl_chooses_it(
    clean_env: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert kubeargs.kubeconfig_path(None) is None  # in-cluster
    home = clean_env / ".kube" / "config"
    home.parent.mkdir()
    home.write_text("{}")
    assert kubeargs.kubeconfig_path(None) == str(home)
    monkeypatch.setenv("KUBECONFIG", "/a:/b")
    assert kubeargs.kubeconfig_path(None) == "/a:/b"
    assert kubeargs.kubeconfig_path("/given") == "/given"


def test_a_context_without_a_kubeconfig_is_one_line(clean_env: pathlib.Path) -> None:
    args = _parse(status_cli.parser(), "--context", "prod")
    assert kubeargs.connect(args) == (
        "--context needs a kubeconfig (--kubeconfig, $KUBECONFIG or ~/.kube/config)"
    )


def test_an_unknown_context_is_refused_by_name(clean_env: pathlib.Path) -> None:
    path = clean_env / "kubeconfig"
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:9"}}],
                "users": [{"name": "u", "user": {"token": "secret-token-value"}}],
                "contexts": [{"name": "good", "context": {"cluster": "c", "user": "u"}}],
                "current-context": "good",
            }
        )
    )
    args = _parse(status_cli.parser(), "--kubeconfig", str(path), "--context", "nosuch")
    got = kubeargs.connect(args)
    assert isinstance(got, str) and got.startswith("--kubeconfig: ") and "nosuch" in got
    assert "secret-token-value" not in got
    ok = kubeargs.connect(_parse(status_cli.parser(), "--kubeconfig", str(path)))
    assert not isinstance(ok, str)
    ok.close()
