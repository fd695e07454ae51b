"""manifests/skr applied to the real SKR apiserver with server-side dry run."""

from __future__ import annotations

import pytest
import yaml
from kubernetes import client

from testing import controlplane

pytestmark = pytest.mark.processes
SKR = controlplane.REPO_ROOT / "manifests" / "skr"


def test_kustomize_renders_the_expected_objects(skr: controlplane.ControlPlane) -> None:
    out = skr.kubectl("kustomize", str(SKR))
    assert out.returncode == 0, out.stderr
    docs = list(yaml.safe_load_all(out.stdout))
    kinds = {(d["kind"], d["metadata"]["name"]) for d in docs}
    for expected in [
        ("Namespace", "tether-system"),
        ("ServiceAccount", "tether-webhook"),
        ("ClusterRole", "tether-webhook"),
        ("ServiceAccount", "tether-poller"),
        ("ClusterRole", "tether-poller"),
        ("Role", "tether-poller-leases"),
        ("Deployment", "tether-webhook"),
        ("Service", "tether-webhook"),
        ("PodDisruptionBudget", "tether-webhook"),
        ("NetworkPolicy", "tether-webhook"),
        ("ValidatingWebhookConfiguration", "tether-configmaps"),
    ]:
        assert expected in kinds
    by_kind = {d["kind"]: d for d in docs if d["metadata"]["name"] != "tether-poller"}
    rules = by_kind["ClusterRole"]["rules"]
    assert rules == [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list"]}]
    dep = by_kind["Deployment"]["spec"]
    assert dep["replicas"] == 2
    c = dep["template"]["spec"]["containers"][0]
    assert c["command"] == ["tether", "webhook"]
    assert c["securityContext"]["readOnlyRootFilesystem"] is True
    assert dep["template"]["spec"]["securityContext"]["runAsNonRoot"] is True
    # a key goes to the forwarder after the API server's call, not within it, and soon
    # (bench/HISTORY.md, "Where the webhook's 3.5 ms went")
    env = {e["name"]: e.get("value") for e in c["env"]}
    assert 0 < float(env["TETHER_WEBHOOK_COALESCE_SECONDS"]) <= 0.05
    hook = by_kind["ValidatingWebhookConfiguration"]["webhooks"][0]
    assert (hook["failurePolicy"], hook["timeoutSeconds"], hook["sideEffects"]) == (
        "Ignore",
        2,
        "NoneOnDryRun",
    )
    assert hook["namespaceSelector"]["matchExpressions"][0]["values"] == [
        "kube-system",
        "tether-system",
    ]


def test_server_side_dry_run_accepts_everything(
    skr: controlplane.ControlPlane, skr_api: client.ApiClient
) -> None:
    """The whole of manifests/skr: the shared objects, the webhook and the poller."""
    core = client.CoreV1Api(skr_api)
    try:  # namespaced objects are dry-run into Tether's own namespace, which must exist
        core.create_namespace(
            client.V1Namespace(metadata=client.V1ObjectMeta(name="tether-system"))
        )
    except client.ApiException as e:
        if e.status != 409:
            raise
    out = skr.kubectl(
        "apply", "-k", str(SKR), "--dry-run=server", "--server-side", "--field-manager=tether-test"
    )
    assert out.returncode == 0, out.stderr
    for name in (
        "deployment.apps/tether-webhook",
        "validatingwebhookconfiguration.admissionregistration.k8s.io/tether-configmaps",
        "networkpolicy.networking.k8s.io/tether-webhook",
        "poddisruptionbudget.policy/tether-webhook",
    ):
        assert name in out.stdout, out.stdout
    for name in (
        "deployment.apps/tether-poller",
        "service/tether-poller",
        "poddisruptionbudget.policy/tether-poller",
        "networkpolicy.networking.k8s.io/tether-poller",
    ):
        assert name in out.stdout, out.stdout
    # nothing was created by the dry run
    with pytest.raises(client.ApiException) as err:
        client.AdmissionregistrationV1Api(skr_api).read_validating_webhook_configuration(
            "tether-configmaps"
        )
    assert err.value.status == 404
    with pytest.raises(client.ApiException) as err:
        client.AppsV1Api(skr_api).read_namespaced_deployment("tether-poller", "tether-system")
    assert err.value.status == 404
