"""``tether records`` against a real KCP: the runtime's RuntimeConfigMap objects in two
namespaces (a Watch's storage namespace and the listener's), listed cluster-wide by the
runtime-id label; one record in detail without its values; an operator without the
cluster-wide list sees the listener namespace only, and is told so."""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client

from testing import controlplane, watchenv
from testing.listenerenv import install_crd
from tether.kube import apitypes
from tether.wire import watches

pytestmark = pytest.mark.processes  # starts processes of its own (testing/tiers.py)

SECRET = "value-that-must-not-print"
RES = apitypes.RUNTIME_CONFIGMAPS


def _watch(name: str, storage: str | None) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "resource": {"group": "", "version": "v1", "resource": "configmaps", "kind": "ConfigMap"},
        "selector": {"matchLabels": {"a": "b"}},
        "send": {"mode": "full"},
    }
    if storage:
        spec["storage"] = {"namespace": storage}
    return {
        "apiVersion": apitypes.WATCHES.api_version,
        "kind": "Watch",
        "metadata": {"name": name},
        "spec": spec,
    }


def _record(
    rid: str,
    watch: str,
    ns: str,
    name: str,
    *,
    deleted: bool = False,
    source: str = "webhook",
    epoch: int = 0,
) -> dict[str, Any]:
    return {
        "apiVersion": RES.api_version,
        "kind": apitypes.RUNTIME_CONFIGMAP_KIND,
        "metadata": {
            "name": f"rcm-{uuid.uuid4().hex[:12]}",
            "labels": {
                apitypes.RUNTIME_ID_LABEL: rid,
                watches.WATCH_LABEL: watch,
                "tether.kyma-project.io/namespace": ns,
                apitypes.KYMA_NAME_LABEL: f"kyma-{rid}",
            },
        },
        "spec": {
            "runtimeId": rid,
            "watch": watch,
            "namespace": ns,
            "name": name,
            "uid": "u-1",
            "resourceVersion": "42",
            "observedAt": "2026-12-04T11:00:00Z",
            "deleted": deleted,
            "source": source,
            "epoch": epoch,
            "data": {} if deleted else {"config.yaml": SECRET},
        },
    }


@pytest.fixture(scope="module")
def scene(kcp: controlplane.ControlPlane, kcp_api: client.ApiClient) -> Iterator[dict[str, str]]:
    """Runtime ``rid``: two records in the listener namespace ``home`` (Watch
    configuration, one a tombstone) and one in the storage namespace ``store`` (Watch
    digest), and a stray one of Watch digest in ``home``; another runtime's record beside
    them."""
    install_crd(kcp_api)
    controlplane.install_crds(kcp_api, watchenv.CRD_FILE)
    core, objects = client.CoreV1Api(kcp_api), client.CustomObjectsApi(kcp_api)
    rid, other = f"rt-{uuid.uuid4().hex[:8]}", f"rt-{uuid.uuid4().hex[:8]}"
    home, store = f"kh-{uuid.uuid4().hex[:6]}", f"ks-{uuid.uuid4().hex[:6]}"
    for ns in (home, store):
        core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=ns)))
    w = apitypes.WATCHES
    for body in (_watch("configuration", None), _watch("digest", store)):
        objects.create_namespaced_custom_object(w.group, w.version, home, w.plural, body)
    for kcp_ns, body in (
        (home, _record(rid, "configuration", "team-a", "app-config")),
        (
            home,
            _record(rid, "configuration", "team-a", "old", deleted=True, source="poller", epoch=1),
        ),
        (store, _record(rid, "digest", "team-b", "settings", source="poller")),
        (home, _record(rid, "digest", "team-b", "settings", source="poller")),
        (home, _record(other, "configuration", "team-a", "app-config")),
    ):
        objects.create_namespaced_custom_object(RES.group, RES.version, kcp_ns, RES.plural, body)
    yield {"rid": rid, "other": other, "home": home, "store": store}
    objects.delete_collection_namespaced_custom_object(w.group, w.version, home, w.plural)
    for ns in (home, store):
        objects.delete_collection_namespaced_custom_object(RES.group, RES.version, ns, RES.plural)
        core.delete_namespace(ns)


def records(kubeconfig: pathlib.Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "command.cli", "records", "--kubeconfig", str(kubeconfig), *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_lists_the_runtimes_records_across_namespaces(
    kcp: controlplane.ControlPlane, scene: dict[str, str]
) -> None:
    got = records(kcp.kubeconfig, scene["rid"], "--namespace", scene["home"], "-o", "json")
    assert got.returncode == 0, got.stderr
    doc = json.loads(got.stdout)
    assert doc["total"] == 4 and doc["namespace"] is None and doc["note"] is None
    assert doc["storageChecked"] is True
    assert [
        (
            r["watch"],
            r["namespace"],
            r["name"],
            r["state"],
            r["source"],
            r["epoch"],
            r["kcpNamespace"],
            r["stray"],
        )
        for r in doc["records"]
    ] == [
        ("configuration", "team-a", "app-config", "live", "webhook", 0, scene["home"], False),
        ("configuration", "team-a", "old", "tombstone", "poller", 1, scene["home"], False),
        ("digest", "team-b", "settings", "live", "poller", 0, scene["home"], True),
        ("digest", "team-b", "settings", "live", "poller", 0, scene["store"], False),
    ]
    table = records(kcp.kubeconfig, scene["rid"], "--watch", "digest", "--namespace", scene["home"])
    lines = table.stdout.splitlines()
    assert table.returncode == 0 and lines[0].split() == list(
        ("WATCH", "NAMESPACE/NAME", "STATE", "EPOCH", "SOURCE", "OBSERVED", "KCP-NAMESPACE", "AGE")
    )
    assert len(lines) == 3 and lines[2].split()[:5] == [
        "digest",
        "team-b/settings",
        "live",
        "0",
        "poller",
    ]
    assert f"{scene['home']} (stray)" in lines[1] and "stray" not in lines[2]
    assert "not in its Watch's storage namespace" in table.stderr
    assert SECRET not in got.stdout + table.stdout
    capped = records(kcp.kubeconfig, scene["rid"], "--limit", "1", "-o", "json")
    assert len(json.loads(capped.stdout)["records"]) == 1 and "3 more of 4" in capped.stderr


def test_one_record_in_detail_shows_keys_and_sizes_not_values(
    kcp: controlplane.ControlPlane, scene: dict[str, str]
) -> None:
    one = records(kcp.kubeconfig, scene["rid"], "team-a/app-config")
    assert one.returncode == 0, one.stderr
    assert "Record team-a/app-config (Watch configuration)" in one.stdout
    assert "config.yaml" in one.stdout and f"{len(SECRET)} B" in one.stdout
    assert f"in {scene['home']}" in one.stdout and f"kyma-{scene['rid']}" in one.stdout
    assert SECRET not in one.stdout + one.stderr
    shown = records(
        kcp.kubeconfig, scene["rid"], "team-a/app-config", "--show-values", "-o", "json"
    )
    assert json.loads(shown.stdout)[0]["record"]["data"] == {"config.yaml": SECRET}
    assert records(kcp.kubeconfig, scene["rid"], "team-a/nope").returncode == 1
    assert records(kcp.kubeconfig, f"rt-{uuid.uuid4().hex[:8]}").returncode == 1
    bad = records(pathlib.Path("/nonexistent"), scene["rid"])
    assert bad.returncode == 2 and "--kubeconfig" in bad.stderr and "Traceback" not in bad.stderr


def test_without_the_cluster_wide_list_it_lists_the_listener_namespace_and_says_so(
    kcp: controlplane.ControlPlane, kcp_api: client.ApiClient, scene: dict[str, str]
) -> None:
    user = f"reader-{uuid.uuid4().hex[:6]}"
    rbac = client.RbacAuthorizationV1Api(kcp_api)
    rbac.create_namespaced_role(
        scene["home"],
        client.V1Role(
            metadata=client.V1ObjectMeta(name=user),
            rules=[
                client.V1PolicyRule(
                    api_groups=[RES.group], resources=[RES.plural], verbs=["get", "list"]
                )
            ],
        ),
    )
    rbac.create_namespaced_role_binding(
        scene["home"],
        client.V1RoleBinding(
            metadata=client.V1ObjectMeta(name=user),
            role_ref=client.V1RoleRef(
                api_group="rbac.authorization.k8s.io", kind="Role", name=user
            ),
            subjects=[
                client.RbacV1Subject(kind="User", name=user, api_group="rbac.authorization.k8s.io")
            ],
        ),
    )
    kubeconfig = kcp.issue_client_cert(user)
    got = records(kubeconfig, scene["rid"], "--namespace", scene["home"], "-o", "json")
    assert got.returncode == 0, got.stderr
    doc = json.loads(got.stdout)
    assert doc["namespace"] == scene["home"] and doc["total"] == 3
    assert doc["storageChecked"] is False  # the Watches are not readable to this user
    assert "forbidden" in got.stderr and scene["home"] in got.stderr
    denied = records(kubeconfig, scene["rid"], "--namespace", scene["store"])
    assert denied.returncode == 2 and "cannot read the KCP" in denied.stderr
    assert "Traceback" not in denied.stderr


def test_kubectl_tether_records_runs_the_same_command(
    kcp: controlplane.ControlPlane, scene: dict[str, str]
) -> None:
    """``kubectl tether records``: kubectl finds ``kubectl-tether`` on PATH (the venv's bin)
    and passes the line and its environment ($KUBECONFIG)."""
    venv_bin = pathlib.Path(sys.executable).parent
    assert (venv_bin / "kubectl-tether").is_file(), "pip install -e . (setup.cfg entry points)"
    env = {
        **os.environ,
        "KUBECONFIG": str(kcp.kubeconfig),
        "PATH": f"{venv_bin}{os.pathsep}{os.environ.get('PATH', '')}",
    }
    out = subprocess.run(
        [
            str(controlplane.binaries() / "kubectl"),
            "tether",
            "records",
            scene["rid"],
            "--watch",
            "configuration",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env=env,
    )
    assert out.returncode == 0, out.stderr
    assert [ln.split()[1] for ln in out.stdout.splitlines()[1:]] == [
        "team-a/app-config",
        "team-a/old",
    ]
