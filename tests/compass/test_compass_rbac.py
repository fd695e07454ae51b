"""The RBAC of manifests/kcp/compass suffices: compass runs as its ServiceAccount (a
client certificate for that user) and gets a Kyma CR to Ready, Lease included."""

from __future__ import annotations

import time
import uuid

import pytest
import yaml
from kubernetes import client, utils

from compass import service
from testing import compassenv as h
from testing import controlplane
from tether.kube import gateway
from tether.runtime import leader

pytestmark = pytest.mark.processes  # starts processes of its own (testing/tiers.py)

RBAC = controlplane.REPO_ROOT / "manifests" / "kcp" / "compass" / "rbac.yaml"
SA_USER = "system:serviceaccount:tether-system:tether-compass"


def test_compass_runs_with_only_its_manifest_rbac(
    kcp: controlplane.ControlPlane,
    kcp_api: client.ApiClient,
    kcp_namespace: str,
    mapping_crd: str,
    clean_director: h.Director,
    skr: controlplane.ControlPlane,
) -> None:
    ns = kcp_namespace
    lease_ns = f"lease-{uuid.uuid4().hex[:6]}"
    client.CoreV1Api(kcp_api).create_namespace(
        client.V1Namespace(metadata=client.V1ObjectMeta(name=lease_ns))
    )
    text = RBAC.read_text().replace("namespace: kcp-system", f"namespace: {ns}")
    docs = list(yaml.safe_load_all(text))
    for doc in docs:
        if doc["metadata"]["namespace"] == "tether-system" and doc["kind"] in (
            "Role",
            "RoleBinding",
        ):
            doc["metadata"]["namespace"] = lease_ns
    utils.create_from_yaml(kcp_api, yaml_objects=docs)
    h.create_kubeconfig_secret(kcp_api, ns, "rbac-00", skr)
    h.create_kyma(kcp_api, ns, "rbac-00", h.kyma_labels("ga-rbac", "rbac-shoot-0"))
    sa_api = gateway.from_kubeconfig(
        str(kcp.issue_client_cert(SA_USER, ("system:serviceaccounts",)))
    )
    s = h.make_settings(clean_director, ns, lease_namespace=lease_ns)
    svc, _ = h.make_service(sa_api, s)
    sched = service.scheduler(svc)
    el = leader.LeaderElector(
        sa_api,
        leader.LeaseSettings(namespace=lease_ns, name=s.lease_name, retry_period=0.3),
        on_started=sched.resume,
        on_stopped=sched.pause,
    )
    try:
        el.start()
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            m = h.get_mapping(kcp_api, ns, "rbac-00")
            if m and (m.get("status") or {}).get("state") == "Ready":
                break
            time.sleep(0.2)
        assert (h.get_mapping(kcp_api, ns, "rbac-00") or {})["status"]["state"] == "Ready"
        assert el.is_leader
        # and the deletion path (delete, finalizer removal) is allowed as well
        h.delete_kyma(kcp_api, ns, "rbac-00")
        deadline = time.monotonic() + 30
        while h.get_mapping(kcp_api, ns, "rbac-00") is not None and time.monotonic() < deadline:
            time.sleep(0.2)
        assert h.get_mapping(kcp_api, ns, "rbac-00") is None
    finally:
        el.stop()
        sched.shutdown(wait=True)
        svc.close()
        sa_api.close()


def test_manifests_apply_server_side_dry_run(
    kcp: controlplane.ControlPlane, kcp_api: client.ApiClient, mapping_crd: str
) -> None:
    for ns in ("kcp-system", "tether-system"):
        try:
            client.CoreV1Api(kcp_api).create_namespace(
                client.V1Namespace(metadata=client.V1ObjectMeta(name=ns))
            )
        except client.ApiException as e:
            if e.status != 409:
                raise
    out = kcp.kubectl(
        "apply",
        "--dry-run=server",
        "-k",
        str(controlplane.REPO_ROOT / "manifests" / "kcp" / "compass"),
    )
    assert out.returncode == 0, out.stderr
    for kind in (
        "deployment.apps/tether-compass",  # its CRD: manifests/kcp/crds
        "role.rbac.authorization.k8s.io/tether-compass",
        "serviceaccount/tether-compass",
    ):
        assert kind in out.stdout
