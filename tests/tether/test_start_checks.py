"""Every part checks its settings, certificates and kubeconfig before it starts anything.

Each case runs the real entry point (``python -m command.cli PART``) with a minimal valid
environment plus one bad value, and expects exit code 2, exactly one line on stderr naming
the variable (``tether PART: VARIABLE: problem``), no traceback and nothing started (no
gunicorn or server log line, nothing on stdout). No planes: the failures come first.
"""

from __future__ import annotations

import concurrent.futures
import os
import pathlib
import socket
import subprocess
import sys

import pytest

from tether.base import certs

ROOT = pathlib.Path(__file__).resolve().parents[2]
KUBECONFIG = """apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:1", insecure-skip-tls-verify: true}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    d = tmp_path_factory.mktemp("start")
    ca = certs.CertificateAuthority.create("start-checks")
    (d / "ca.crt").write_bytes(ca.cert_pem)
    ca.issue("localhost", server=True).write(d / "tls.crt", d / "tls.key")
    ca.issue("rt-1", client=True).write(d / "client.crt", d / "client.key")
    ca.issue("other", client=True).write(d / "other.crt", d / "other.key")
    (d / "kubeconfig").write_text(KUBECONFIG)
    (d / "secret").write_text("s3cret")
    return {p.name: str(p) for p in d.iterdir()}


def valid_env(part: str, f: dict[str, str]) -> dict[str, str]:
    port = str(_free_port())
    if part in ("webhook", "poller"):
        env = {
            "TETHER_RUNTIME_ID": "rt-1",
            "TETHER_LISTENER_URL": "https://127.0.0.1:1",
            "TETHER_LISTENER_CA_FILE": f["ca.crt"],
            "TETHER_CLIENT_CERT_FILE": f["client.crt"],
            "TETHER_CLIENT_KEY_FILE": f["client.key"],
            "TETHER_KUBECONFIG": f["kubeconfig"],
        }
        if part == "webhook":
            env |= {
                "TETHER_WEBHOOK_CERT_FILE": f["tls.crt"],
                "TETHER_WEBHOOK_KEY_FILE": f["tls.key"],
                "TETHER_WEBHOOK_BIND": f"127.0.0.1:{port}",
            }
        else:
            env |= {"TETHER_POLLER_BIND": f"127.0.0.1:{port}"}
        return env
    if part == "listener":
        return {
            "TETHER_LISTENER_TLS_CERT_FILE": f["tls.crt"],
            "TETHER_LISTENER_TLS_KEY_FILE": f["tls.key"],
            "TETHER_LISTENER_CLIENT_CA_FILE": f["ca.crt"],
            "TETHER_LISTENER_KUBECONFIG": f["kubeconfig"],
            "TETHER_LISTENER_BIND": f"127.0.0.1:{port}",
            "TETHER_LISTENER_OPS_BIND": f"127.0.0.1:{_free_port()}",
        }
    if part == "janitor":
        return {
            "TETHER_LISTENER_KUBECONFIG": f["kubeconfig"],
            "TETHER_LISTENER_JANITOR_BIND": f"127.0.0.1:{port}",
        }
    if part == "injector":
        return {
            "TETHER_INJECTOR_KUBECONFIG": f["kubeconfig"],
            "TETHER_INJECTOR_BIND": f"127.0.0.1:{port}",
        }
    assert part == "compass"
    return {
        "TETHER_COMPASS_DIRECTOR_URL": "https://127.0.0.1:1/graphql",
        "TETHER_COMPASS_OAUTH_TOKEN_URL": "https://127.0.0.1:1/token",
        "TETHER_COMPASS_OAUTH_CLIENT_ID": "id",
        "TETHER_COMPASS_OAUTH_CLIENT_SECRET_FILE": f["secret"],
        "TETHER_COMPASS_DIRECTOR_CA_FILE": f["ca.crt"],
        "TETHER_COMPASS_KUBECONFIG": f["kubeconfig"],
        "TETHER_COMPASS_BIND": f"127.0.0.1:{port}",
    }


def run(part: str, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    keep = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("TETHER_") and k not in ("KUBECONFIG", "PROMETHEUS_MULTIPROC_DIR")
    }
    return subprocess.run(
        [sys.executable, "-m", "command.cli", part, *args],
        cwd=ROOT,
        env={**keep, **env},
        capture_output=True,
        text=True,
        timeout=60,
    )


# (part, kind, variable, value: a literal, or "@name" for one of the files)
CASES = [
    ("webhook", "log level", "TETHER_LOG_LEVEL", "verbose"),
    ("webhook", "url", "TETHER_LISTENER_URL", "http://listener:8443"),
    ("webhook", "duration", "TETHER_WEBHOOK_HEAD_TIMEOUT_SECONDS", "10s"),
    ("webhook", "renamed duration", "TETHER_WEBHOOK_KEEPALIVE", "75"),
    ("webhook", "missing certificate", "TETHER_WEBHOOK_CERT_FILE", "/nonexistent/tls.crt"),
    ("webhook", "not a certificate", "TETHER_LISTENER_CA_FILE", "@kubeconfig"),
    ("webhook", "key of another certificate", "TETHER_CLIENT_KEY_FILE", "@other.key"),
    ("webhook", "not a kubeconfig", "TETHER_KUBECONFIG", "@ca.crt"),
    ("listener", "log level", "TETHER_LISTENER_LOG_LEVEL", "verbose"),
    ("listener", "shared log level", "TETHER_LOG_LEVEL", "verbose"),
    ("listener", "address (no URL setting)", "TETHER_LISTENER_BIND", "localhost"),
    ("listener", "duration", "TETHER_LISTENER_BODY_TIMEOUT_SECONDS", "-1"),
    ("listener", "missing certificate", "TETHER_LISTENER_TLS_CERT_FILE", "/nonexistent/tls.crt"),
    ("listener", "missing CA", "TETHER_LISTENER_CLIENT_CA_FILE", "/nonexistent/ca.crt"),
    ("listener", "key of another certificate", "TETHER_LISTENER_TLS_KEY_FILE", "@other.key"),
    ("listener", "not a kubeconfig", "TETHER_LISTENER_KUBECONFIG", "@tls.crt"),
    ("janitor", "log level", "TETHER_LISTENER_LOG_LEVEL", "verbose"),
    ("janitor", "address (no URL setting)", "TETHER_LISTENER_JANITOR_BIND", "0.0.0.0:http"),
    ("janitor", "duration", "TETHER_LISTENER_JANITOR_INTERVAL_SECONDS", "10m"),
    ("janitor", "not a kubeconfig", "TETHER_LISTENER_KUBECONFIG", "@ca.crt"),
    ("janitor", "missing kubeconfig", "TETHER_LISTENER_KUBECONFIG", "/nonexistent/kubeconfig"),
    ("injector", "log level", "TETHER_INJECTOR_LOG_LEVEL", "verbose"),
    ("injector", "address (no URL setting)", "TETHER_INJECTOR_BIND", "0.0.0.0:http"),
    ("injector", "duration", "TETHER_INJECTOR_RESYNC_SECONDS", "5m"),
    ("injector", "bound", "TETHER_INJECTOR_MAX_RECORDS", "0"),
    ("injector", "not a kubeconfig", "TETHER_INJECTOR_KUBECONFIG", "@ca.crt"),
    ("injector", "missing kubeconfig", "TETHER_INJECTOR_KUBECONFIG", "/nonexistent/kubeconfig"),
    ("poller", "log level", "TETHER_LOG_LEVEL", "verbose"),
    ("poller", "url", "TETHER_LISTENER_URL", "listener:8443"),
    ("poller", "duration", "TETHER_POLLER_INTERVAL_SECONDS", "inf"),
    ("poller", "renamed duration", "TETHER_POLLER_LIST_TIMEOUT", "30"),
    ("poller", "missing certificate", "TETHER_CLIENT_CERT_FILE", "/nonexistent/client.crt"),
    ("poller", "key of another certificate", "TETHER_CLIENT_KEY_FILE", "@other.key"),
    ("poller", "not a kubeconfig", "TETHER_KUBECONFIG", "@client.key"),
    ("compass", "log level", "TETHER_LOG_LEVEL", "verbose"),
    ("compass", "url", "TETHER_COMPASS_DIRECTOR_URL", "http://director/graphql"),
    ("compass", "duration", "TETHER_COMPASS_INTERVAL_SECONDS", "٣"),
    ("compass", "renamed", "TETHER_LEASE_NAMESPACE", "tether-system"),
    ("compass", "missing certificate", "TETHER_COMPASS_DIRECTOR_CA_FILE", "/nonexistent/ca.crt"),
    ("compass", "not a certificate", "TETHER_COMPASS_DIRECTOR_CA_FILE", "@secret"),
    ("compass", "not a kubeconfig", "TETHER_COMPASS_KUBECONFIG", "@ca.crt"),
]


@pytest.fixture(scope="module")
def outcomes(files: dict[str, str]) -> dict[tuple[str, str], subprocess.CompletedProcess[str]]:
    """Every case's process, run side by side (each is a fresh interpreter: ~1 s)."""

    def one(case: tuple[str, str, str, str]) -> subprocess.CompletedProcess[str]:
        part, _, variable, value = case
        env = valid_env(part, files)
        env[variable] = files[value[1:]] if value.startswith("@") else value
        return run(part, env)

    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        return dict(zip([(c[0], c[1]) for c in CASES], pool.map(one, CASES), strict=True))


@pytest.mark.parametrize(
    ("part", "kind", "variable", "value"), CASES, ids=[f"{c[0]}-{c[1]}" for c in CASES]
)
def test_a_bad_value_stops_the_part_with_one_line(
    outcomes: dict[tuple[str, str], subprocess.CompletedProcess[str]],
    part: str,
    kind: str,
    variable: str,
    value: str,
) -> None:
    done = outcomes[part, kind]
    lines = done.stderr.splitlines()
    assert done.returncode == 2, done.stderr
    assert len(lines) == 1 and lines[0].startswith(f"tether {part}: {variable}: "), done.stderr
    assert "Traceback" not in done.stderr and done.stdout == ""


@pytest.mark.parametrize(
    "part", ["webhook", "listener", "janitor", "poller", "compass", "injector"]
)
def test_a_valid_environment_passes_the_checks(files: dict[str, str], part: str) -> None:
    done = run(part, valid_env(part, files), "--check")
    assert (done.returncode, done.stdout, done.stderr) == (0, f"tether {part}: settings ok\n", "")


@pytest.mark.processes
def test_the_compass_kubeconfig_flag_still_works(files: dict[str, str]) -> None:
    env = valid_env("compass", files)
    del env["TETHER_COMPASS_KUBECONFIG"]
    done = run("compass", env, "--kubeconfig", files["ca.crt"], "--check")
    assert done.returncode == 2 and done.stderr.startswith(
        "tether compass: TETHER_COMPASS_KUBECONFIG: "
    )


@pytest.mark.processes
def test_help_shows_every_option_and_version() -> None:
    from compass import settings

    done = run("compass", {}, "--help")
    assert done.returncode == 0
    for o in settings.SPEC.options:
        head = f"  {o.name}" + (f" ({o.flag})" if o.flag else "")
        assert f"{head}  default: {o.default_text()}" in done.stdout
    done = run("--version", {})
    assert (
        done.returncode == 0
        and done.stdout.startswith("tether ")
        and done.stdout.strip() != "tether"
    )
