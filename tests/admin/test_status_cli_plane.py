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

from testing import adminenv, watchenv

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


def _operator(kubeconfig: pathlib.Path | str, *args: str) -> subprocess.CompletedProcess[str]:
    """An operator command with ``kubeconfig``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TETHER_")}
    return subprocess.run(
        [sys.executable, "-m", "command.cli", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={**env, "KUBECONFIG": str(kubeconfig)},
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


def test_explain_names_why_an_object_was_not_sent(admin_env: adminenv.Env) -> None:
    """An unlabelled ConfigMap, a namespace outside the Watch, a kind no Watch takes, and a
    runtime at its quota, each named by ``tether explain`` from the KCP's objects."""
    ns = admin_env.kcp_ns
    watchenv.install_crd(admin_env.api)
    cm = {"group": "", "version": "v1", "resource": "configmaps", "kind": "ConfigMap"}
    sync = {"matchLabels": {"tether.example/sync": "true"}}
    watchenv.apply(admin_env.api, watchenv.watch("config", cm, ns, selector=sync))
    watchenv.apply(admin_env.api, watchenv.watch("team-a", cm, ns, namespaces=["team-a"]))
    rid = admin_env.runtime("explained", webhook=3, refused={"quota_records": 2}, record_limit=3)

    def explain(*args: str) -> str:
        out = _operator(admin_env.plane.kubeconfig, "explain", rid, *args, "-n", ns)
        assert out.returncode == 0, out.stderr
        return out.stdout

    unlabelled = explain("team-a/app", "--labels", "")
    assert "config: no, its labels do not match its selector 'tether.example/sync=true'" in (
        unlabelled
    )
    assert "team-a: yes, sends it (full)" in unlabelled
    outside = explain("team-b/app", "--labels", "tether.example/sync=true")
    assert "team-a: no, namespace team-b is not among ['team-a']" in outside
    assert "Taken by: config" in outside
    secret = explain("team-a/db", "--kind", "Secret")
    assert "Taken by: no Watch in force" in secret
    assert secret.count("no, it watches ConfigMap (v1)") == 2
    assert "Quota: at its quota: 3 of 3 records stored; 2 refused for quota_records" in secret
    doc = json.loads(explain("team-a/app", "--labels", "", "-o", "json"))
    assert doc["takenBy"] == ["team-a"] and doc["quota"].startswith("at its quota")
    unknown = _operator(admin_env.plane.kubeconfig, "explain", "rt-nobody", "team-a/app", "-n", ns)
    assert unknown.returncode == 1 and "no Kyma CR" in unknown.stderr
    # the admin pages' identity may not read Watches: one line saying which list failed
    pages = _operator(admin_env.kubeconfig, "explain", rid, "team-a/app", "-n", ns)
    assert pages.returncode == 2 and pages.stderr.startswith("tether explain: cannot read")
    assert "watches" in pages.stderr
