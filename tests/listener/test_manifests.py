"""manifests/kcp (the listener's part) applied to the real KCP apiserver with server-side
dry run; the Role is the one the other listener tests run under."""

from __future__ import annotations

import pytest
import yaml
from kubernetes import client

from listener.storage.namespaces import STORAGE_LABEL
from testing import controlplane

pytestmark = pytest.mark.processes  # starts processes of its own (testing/tiers.py)

KCP = controlplane.REPO_ROOT / "manifests" / "kcp"


def test_listener_base_renders_the_expected_objects(kcp: controlplane.ControlPlane) -> None:
    out = kcp.kubectl("kustomize", str(KCP / "listener"))
    assert out.returncode == 0, out.stderr
    docs = list(yaml.safe_load_all(out.stdout))
    by = {(d["kind"], d["metadata"]["name"]): d for d in docs}
    for expected in [
        ("Namespace", "tether-system"),
        ("ServiceAccount", "tether-listener"),
        ("Role", "tether-listener"),
        ("RoleBinding", "tether-listener"),
        ("Deployment", "tether-listener"),
        ("Service", "tether-listener"),
        ("PodDisruptionBudget", "tether-listener"),
        ("NetworkPolicy", "tether-listener"),
        ("Namespace", "tether-heartbeats"),
        ("Role", "tether-listener-heartbeats"),
        ("RoleBinding", "tether-listener-heartbeats"),
    ]:
        assert expected in by
    # cluster-wide only Tether's own records: a Watch stores them in its storage namespace
    cluster = [d for d in docs if d["kind"].startswith("Cluster")]
    assert {(d["kind"], d["metadata"]["name"]) for d in cluster} == {
        ("ClusterRole", "tether-listener-records"),
        ("ClusterRoleBinding", "tether-listener-records"),
    }
    assert [
        (r["apiGroups"], r["resources"], set(r["verbs"]))
        for r in by[("ClusterRole", "tether-listener-records")]["rules"]
    ] == [
        (
            ["tether.kyma-project.io"],
            ["runtimeconfigmaps"],
            {"get", "list", "watch", "create", "update", "patch", "delete"},
        )
    ]  # delete: policy.yaml narrows it; watch: the pod's view of the records
    role = by[("Role", "tether-listener")]
    assert role["metadata"]["namespace"] == "kcp-system"
    rules = {
        (r["apiGroups"][0], r["resources"][0], tuple(r.get("resourceNames", ()))): set(r["verbs"])
        for r in role["rules"]
    }
    assert rules == {  # exactly what the listener needs (rbac.yaml); no delete, no Lease
        ("operator.kyma-project.io", "kymas", ()): {"list", "watch"},  # watch: the pod's view
        ("tether.kyma-project.io", "runtimedeliveries", ()): {"get", "create"},
        ("tether.kyma-project.io", "runtimedeliveries/status", ()): {"update"},
        ("tether.kyma-project.io", "runtimestatesummaries", ()): {"get", "list", "watch", "create"},
        ("tether.kyma-project.io", "runtimestatesummaries/status", ()): {"update"},
        ("tether.kyma-project.io", "watches", ()): {"get", "list"},  # what is admitted
    }
    assert all(r["resources"] != ["secrets"] for r in role["rules"])
    beats = by[("Role", "tether-listener-heartbeats")]
    assert beats["metadata"]["namespace"] == "tether-heartbeats"
    assert [(r["resources"], set(r["verbs"])) for r in beats["rules"]] == [
        (["leases"], {"list", "watch", "create", "patch"})
    ]
    dep = by[("Deployment", "tether-listener")]["spec"]
    assert dep["replicas"] >= 2
    pod = dep["template"]["spec"]
    c = pod["containers"][0]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert c["securityContext"]["readOnlyRootFilesystem"] is True
    assert {"livenessProbe", "readinessProbe", "startupProbe"} <= set(c)
    assert c["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "ops"}
    # the data port is admitted only from the ingress, the operations port from monitoring
    policy = by[("NetworkPolicy", "tether-listener")]["spec"]
    ingress = {r["ports"][0]["port"]: r["from"] for r in policy["ingress"]}
    assert set(ingress) == {8443, 9090} and all(ingress.values())
    monitoring = [r for r in policy["ingress"] if r["ports"][0]["port"] == 9090][0]
    assert {p["port"] for p in monitoring["ports"]} == {9090}
    # egress: the shared policies (../networkpolicies; tests/foundation/test_privileges.py)
    assert policy["policyTypes"] == ["Ingress"]

    # the janitor is a Deployment of its own (../janitor), not a container of these pods
    assert [x["name"] for x in pod["containers"]] == ["listener"]


def test_the_listeners_policy_admits_its_namespace_and_marked_namespaces(
    kcp: controlplane.ControlPlane,
) -> None:
    """policy.yaml admits the listener's records in its namespace and in Namespaces labelled
    record-storage=true, and every Namespace a shipped Watch stores in carries that label
    (manifests/kcp/watches and the example's); it matches the listener's ServiceAccount only;
    the Deployment leaves STORAGE_NAMESPACES empty (a consumer's Watch needs no listener
    patch); TETHER_LISTENER_QUOTA_WRITERS is replicas x workers."""
    out = kcp.kubectl("kustomize", str(KCP / "listener"))
    assert out.returncode == 0, out.stderr
    by = {(d["kind"], d["metadata"]["name"]): d for d in yaml.safe_load_all(out.stdout) if d}
    policy = by[("ValidatingAdmissionPolicy", "tether-listener-records")]["spec"]
    binding = by[("ValidatingAdmissionPolicyBinding", "tether-listener-records")]["spec"]
    assert binding == {"policyName": "tether-listener-records", "validationActions": ["Deny"]}
    assert policy["failurePolicy"] == "Fail"
    assert policy["matchConditions"][0]["expression"] == (
        "request.userInfo.username == 'system:serviceaccount:tether-system:tether-listener'"
    )
    variables = {v["name"]: v["expression"] for v in policy["variables"]}
    assert variables["own"] == "'kcp-system'"
    assert f"'{STORAGE_LABEL}' in namespaceObject.metadata.labels" in variables["marked"]
    assert policy["validations"][0]["expression"] == (
        "request.namespace == variables.own || variables.marked"
    )
    dep = by[("Deployment", "tether-listener")]["spec"]
    env = {e["name"]: e.get("value") for e in dep["template"]["spec"]["containers"][0]["env"]}
    assert env["TETHER_LISTENER_NAMESPACE"] == "kcp-system"
    assert not env.get("TETHER_LISTENER_STORAGE_NAMESPACES")
    for where in (KCP / "watches", controlplane.REPO_ROOT / "manifests" / "examples" / "injector"):
        shipped = [
            d
            for path in sorted(where.glob("*.yaml"))
            for d in yaml.safe_load_all(path.read_text())
            if d and "kind" in d
        ]
        marked = {
            d["metadata"]["name"]
            for d in shipped
            if d["kind"] == "Namespace"
            and (d["metadata"].get("labels") or {}).get(STORAGE_LABEL) == "true"
        }
        stores = {
            d["spec"].get("storage", {}).get("namespace", "kcp-system")
            for d in shipped
            if d["kind"] == "Watch"
        }
        assert stores and stores <= marked | {"kcp-system"}, (where, stores, marked)
    assert int(env["TETHER_LISTENER_QUOTA_WRITERS"]) == (
        dep["replicas"] * int(env["TETHER_LISTENER_WORKERS"])
    )


def test_whole_kcp_kustomization_builds(kcp: controlplane.ControlPlane) -> None:
    out = kcp.kubectl("kustomize", str(KCP))
    assert out.returncode == 0, out.stderr
    names = {(d["kind"], d["metadata"]["name"]) for d in yaml.safe_load_all(out.stdout) if d}
    assert ("CustomResourceDefinition", "runtimeconfigmaps.tether.kyma-project.io") in names
    assert ("CustomResourceDefinition", "runtimedeliveries.tether.kyma-project.io") in names
    assert ("Deployment", "tether-listener") in names


def test_server_side_dry_run_accepts_the_listener_objects(
    kcp: controlplane.ControlPlane, kcp_api: client.ApiClient
) -> None:
    core = client.CoreV1Api(kcp_api)
    for ns in (
        "tether-system",
        "kcp-system",
        "tether-heartbeats",
    ):  # namespaced objects need theirs
        try:
            core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=ns)))
        except client.ApiException as e:
            if e.status != 409:
                raise
    for base in ("crds", "listener", "janitor"):
        out = kcp.kubectl(
            "apply",
            "-k",
            str(KCP / base),
            "--dry-run=server",
            "--server-side",
            "--field-manager=tether-test",
            "--force-conflicts",
        )
        assert out.returncode == 0, out.stderr
        assert "(server dry run)" in out.stdout
    with pytest.raises(client.ApiException) as err:
        client.AppsV1Api(kcp_api).read_namespaced_deployment("tether-listener", "tether-system")
    assert err.value.status == 404


def test_the_shipped_watch_stores_in_its_namespace_with_a_reader_role(
    kcp: controlplane.ControlPlane,
) -> None:
    """manifests/kcp/watches: the Watch configuration stores in tether-configuration, where
    the Role tether-records-reader reads RuntimeConfigMaps (get, list, watch), nothing else
    (docs/watches.md, "Where records are stored and who can read them")."""
    out = kcp.kubectl("kustomize", str(KCP / "watches"))
    assert out.returncode == 0, out.stderr
    by = {(d["kind"], d["metadata"]["name"]): d for d in yaml.safe_load_all(out.stdout) if d}
    assert ("Namespace", "tether-configuration") in by
    watch = by[("Watch", "configuration")]
    assert watch["metadata"]["namespace"] == "kcp-system"
    assert watch["spec"]["storage"] == {"namespace": "tether-configuration"}
    role = by[("Role", "tether-records-reader")]
    assert role["metadata"]["namespace"] == "tether-configuration"
    assert [(r["apiGroups"], r["resources"], set(r["verbs"])) for r in role["rules"]] == [
        (["tether.kyma-project.io"], ["runtimeconfigmaps"], {"get", "list", "watch"})
    ]
    assert not any(k.startswith("Cluster") for k, _ in by)
