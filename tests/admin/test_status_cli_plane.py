"""``tether status`` as an operator runs it against a real KCP: kubectl's ``--context`` and
``-n``, and the runtime's Events in the detail view, as its page shows them."""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys
from typing import Any

import pytest
import yaml
from kubernetes import client

from testing import adminenv

pytestmark = pytest.mark.processes


@pytest.fixture(scope="module")
def runtime(admin_env: adminenv.Env) -> str:
    """A runtime with a Warning Event about its Kyma CR, as the enroller records one."""
    rid = admin_env.runtime("ctx", webhook=3)
    client.CoreV1Api(admin_env.api).create_namespaced_event(
        admin_env.kcp_ns,
        client.CoreV1Event(
            metadata=client.V1ObjectMeta(name="ctx.enroll-failed"),
            involved_object=client.V1ObjectReference(
                kind="Kyma", name="ctx", namespace=admin_env.kcp_ns
            ),
            reason="EnrollFailed",
            message="the runtime's API answered 403",
            type="Warning",
            count=2,
            last_timestamp=adminenv.now(),
        ),
    )
    return rid


@pytest.fixture(scope="module")
def two_contexts(
    admin_env: adminenv.Env, tmp_path_factory: pytest.TempPathFactory
) -> tuple[str, str]:
    """The KCP's kubeconfig with a second context, ``off`` (a closed port), as the current
    one, the way an operator's kubeconfig holds several clusters: its path and the KCP's
    context."""
    cfg: dict[str, Any] = yaml.safe_load(pathlib.Path(admin_env.kubeconfig).read_text())
    good = cfg["current-context"]
    ctx = next(c for c in cfg["contexts"] if c["name"] == good)["context"]
    cluster = next(c for c in cfg["clusters"] if c["name"] == ctx["cluster"])
    off = {**cluster["cluster"], "server": "https://127.0.0.1:9"}
    cfg["clusters"].append({"name": "off", "cluster": off})
    cfg["contexts"].append({"name": "off", "context": {**ctx, "cluster": "off"}})
    cfg["current-context"] = "off"
    path = tmp_path_factory.mktemp("kubeconfig") / "config"
    path.write_text(yaml.safe_dump(cfg))
    return str(path), good


def _status(admin_env: adminenv.Env, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TETHER_")}
    env.pop("KUBECONFIG", None)
    return subprocess.run(
        [sys.executable, "-m", "command.cli", "status", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env=env,
    )


def test_context_and_n_choose_the_kcp_as_kubectl_does(
    admin_env: adminenv.Env,
    runtime: str,
    two_contexts: tuple[str, str],
) -> None:
    kubeconfig, good = two_contexts
    where = [
        "--kubeconfig",
        kubeconfig,
        "-n",
        admin_env.kcp_ns,
        "--heartbeat-namespace",
        admin_env.kcp_ns,
        "--tether-namespace",
        admin_env.tether_ns,
    ]
    off = _status(admin_env, runtime, *where)
    assert off.returncode == 2 and off.stderr.startswith("tether status: cannot read the KCP")
    unknown = _status(admin_env, runtime, *where, "--context", "nosuch")
    assert unknown.returncode == 2 and "nosuch" in unknown.stderr, unknown.stderr
    out = _status(admin_env, runtime, *where, "--context", good)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0] == f"Runtime {runtime}"
    events = lines[lines.index("Events:") + 2]
    assert events.split()[2:5] == ["Warning", "Kyma", "EnrollFailed"]
    assert events.endswith("the runtime's API answered 403 (x2)")
    assert "silent" not in out.stdout  # its heartbeat was found where -n and the flags say
    doc = json.loads(_status(admin_env, runtime, *where, "--context", good, "-o", "json").stdout)
    assert [(e["reason"], e["count"]) for e in doc["recentEvents"]] == [("EnrollFailed", 2)]
