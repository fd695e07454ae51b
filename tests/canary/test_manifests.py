"""The canary's manifests (manifests/kcp/canary, optional): what they render to. Its RBAC is
exactly what canary/ calls, nothing cluster-wide: the one Watch by name, Kyma CRs listed,
one kubeconfig Secret by name (a placeholder until an overlay names the probe runtime), the
shipped Watch's records through their reader Role, its Lease; the shared egress policies
select it, its own admits the runtimes' public API servers only. (The demo runs these
manifests with the pod runner under the ServiceAccount's token: tests/foundation/test_demo.py.)"""

from __future__ import annotations

import subprocess
from typing import Any

import pytest
import yaml

from testing import controlplane

pytestmark = pytest.mark.processes  # kubectl kustomize (testing/tiers.py)

KCP = controlplane.REPO_ROOT / "manifests" / "kcp"


def render(path: str) -> list[dict[str, Any]]:
    done = subprocess.run(
        [str(controlplane.binaries() / "kubectl"), "kustomize", str(KCP / path)],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return [d for d in yaml.safe_load_all(done.stdout) if d]


def test_the_overlay_is_optional_and_runs_tether_canary_probing_nothing() -> None:
    assert "canary" not in (KCP / "kustomization.yaml").read_text()
    docs = render("canary")
    [deploy] = [d for d in docs if d["kind"] == "Deployment"]
    pod = deploy["spec"]["template"]["spec"]
    [c] = pod["containers"]
    assert c["command"] == ["tether", "canary"] and pod["serviceAccountName"] == "tether-canary"
    env = {e["name"]: e.get("value") for e in c["env"]}
    assert "TETHER_CANARY_RUNTIME" not in env  # an overlay names the probe runtime
    assert env["TETHER_CANARY_BIND"] == "0.0.0.0:9093"
    assert [p["containerPort"] for p in c["ports"]] == [9093]
    assert c["securityContext"]["readOnlyRootFilesystem"] is True
    labels = deploy["spec"]["template"]["metadata"]["labels"]
    for policy in render("networkpolicies"):  # DNS and the KCP API server, as every KCP part
        expr = policy["spec"]["podSelector"]["matchExpressions"][0]
        assert labels[expr["key"]] in expr["values"], policy["metadata"]["name"]


def test_rbac_is_what_the_canary_calls_and_nothing_cluster_wide() -> None:
    docs = render("canary")
    assert not [d for d in docs if d["kind"].startswith("Cluster")]
    rules = {
        (d["metadata"]["namespace"], d["metadata"]["name"]): d["rules"]
        for d in docs
        if d["kind"] == "Role"
    }
    assert rules[("kcp-system", "tether-canary-kubeconfig")] == [
        {
            "apiGroups": [""],
            "resources": ["secrets"],
            "resourceNames": ["kubeconfig-probe-runtime"],
            "verbs": ["get"],
        }
    ]
    assert rules[("kcp-system", "tether-canary")] == [
        {
            "apiGroups": ["tether.kyma-project.io"],
            "resources": ["watches"],
            "resourceNames": ["configuration"],
            "verbs": ["get"],
        },
        {"apiGroups": ["operator.kyma-project.io"], "resources": ["kymas"], "verbs": ["list"]},
    ]
    [records] = [
        d
        for d in docs
        if d["kind"] == "RoleBinding" and d["metadata"]["namespace"] == "tether-configuration"
    ]
    assert records["roleRef"]["name"] == "tether-records-reader"
    bound = {
        (d["metadata"]["namespace"], d["roleRef"]["name"])
        for d in docs
        if d["kind"] == "RoleBinding"
        and d["subjects"]
        == [{"kind": "ServiceAccount", "name": "tether-canary", "namespace": "tether-system"}]
    }
    assert bound == set(rules) | {("tether-configuration", "tether-records-reader")}


def test_egress_reaches_public_api_servers_only() -> None:
    [policy] = [d for d in render("canary") if d["kind"] == "NetworkPolicy"]
    [egress] = policy["spec"]["egress"]
    [block] = egress["to"]
    assert block["ipBlock"]["cidr"] == "0.0.0.0/0"
    assert {"10.0.0.0/8", "127.0.0.0/8", "169.254.0.0/16"} <= set(block["ipBlock"]["except"])
    assert {p["port"] for p in egress["ports"]} == {443, 6443}
