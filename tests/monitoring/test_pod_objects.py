"""The pod runner's Pod objects, which let a Prometheus discover the pods it runs as in a
cluster (kubernetes_sd_configs role pod, manifests/monitoring/prometheus/scrape-config.yaml):
for every Deployment of manifests/kcp and manifests/skr, the Pod object and status the
runner writes are accepted by a real kube-apiserver under PodSecurity `restricted` (the
label of tether-system), with a loopback pod IP, and carry what the scrape configuration
selects by (the part's label, the metrics port's name, phase Running)."""

from __future__ import annotations

import pathlib
import subprocess
from typing import Any

import pytest
import yaml
from kubernetes import client

from testing import controlplane, podrunner, podspec

pytestmark = pytest.mark.processes  # starts processes of its own (testing/tiers.py)

REPO = controlplane.REPO_ROOT


class _Running:
    """A process that runs (what ``Container.running`` asks of its popen)."""

    pid = 0

    def poll(self) -> None:
        return None


def rendered(kind: str) -> list[dict[str, Any]]:
    """The objects of ``kind`` that manifests/kcp and manifests/skr render."""
    kubectl = controlplane.binaries() / "kubectl"
    out = []
    for base in ("manifests/kcp", "manifests/skr"):
        text = subprocess.run(
            [str(kubectl), "kustomize", str(REPO / base)],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        out += [d for d in yaml.safe_load_all(text) if d and d["kind"] == kind]
    return out


def deployments() -> list[dict[str, Any]]:
    return rendered("Deployment")


def runner_pod(d: dict[str, Any], namespace: str, ip: str, tmp: pathlib.Path) -> podrunner.Pod:
    template = d["spec"]["template"]
    name = f"{d['metadata']['name']}-0123456789-abcde"
    facts = podspec.PodFacts(
        name=name,
        namespace=namespace,
        uid="u",
        node=podrunner.NODE,
        pod_ip=ip,
        host_ip="127.0.0.1",
        service_account=template["spec"].get("serviceAccountName", "default"),
        labels=template["metadata"].get("labels") or {},
        annotations={},
    )
    containers = [
        podrunner.Container(c, tmp / f"{c['name']}.log") for c in template["spec"]["containers"]
    ]
    return podrunner.Pod(
        name,
        d["metadata"]["name"],
        "0123456789abcdef",
        ip,
        tmp,
        facts,
        template["spec"],
        containers,
    )


def test_pod_objects_are_accepted_and_discoverable(
    kcp_api: client.ApiClient, kcp_namespace: str, tmp_path: pathlib.Path
) -> None:
    core = client.CoreV1Api(kcp_api)
    core.patch_namespace(
        kcp_namespace,
        {"metadata": {"labels": {"pod-security.kubernetes.io/enforce": "restricted"}}},
    )
    scrape = yaml.safe_load(
        (REPO / "manifests" / "monitoring" / "prometheus" / "scrape-config.yaml").read_text()
    )
    ports = {
        j["kubernetes_sd_configs"][0]["selectors"][0]["label"].split("=", 1)[1]: set()
        for j in scrape["scrape_configs"]
    }
    for j in scrape["scrape_configs"]:
        app = j["kubernetes_sd_configs"][0]["selectors"][0]["label"].split("=", 1)[1]
        ports[app] |= {r["regex"] for r in j["relabel_configs"] if r.get("action") == "keep"}
    # a pod naming a PriorityClass is admitted only when the class exists (the webhook's,
    # which the manifests hold)
    scheduling = client.SchedulingV1Api(kcp_api)
    for pc in rendered("PriorityClass"):
        try:
            scheduling.create_priority_class(pc)
        except client.ApiException as e:
            if e.status != 409:
                raise
    seen = set()
    for i, d in enumerate(deployments()):
        d["spec"]["template"]["spec"].pop(
            "serviceAccountName", None
        )  # no ServiceAccount in this namespace
        pod = runner_pod(d, kcp_namespace, f"127.131.0.{i + 1}", tmp_path)
        for c in pod.containers:
            c.popen = _Running()  # type: ignore[assignment]
        body: Any = podrunner.pod_object(pod, d)
        body["metadata"]["namespace"] = kcp_namespace
        core.create_namespaced_pod(kcp_namespace, body)
        try:
            core.patch_namespaced_pod_status(
                pod.name, kcp_namespace, {"status": podrunner.pod_status(pod)}
            )
            got = core.read_namespaced_pod(pod.name, kcp_namespace)
            assert got.spec.node_name == podrunner.NODE
            assert (got.status.phase, got.status.pod_ip) == ("Running", pod.ip)
            assert {c.type: c.status for c in got.status.conditions}["Ready"] == "True"
            app = got.metadata.labels["app.kubernetes.io/name"]
            names = {p.name for c in got.spec.containers for p in c.ports or []}
            if app in ports:
                assert ports[app] <= names, (app, ports[app], names)
                seen.add(app)
            for c in pod.containers:  # a readiness probe failing makes the pod unready
                c.popen = None
            core.patch_namespaced_pod_status(
                pod.name, kcp_namespace, {"status": podrunner.pod_status(pod)}
            )
            got = core.read_namespaced_pod(pod.name, kcp_namespace)
            assert got.status.phase == "Pending"
            assert {c.type: c.status for c in got.status.conditions}["Ready"] == "False"
        finally:
            core.delete_namespaced_pod(pod.name, kcp_namespace, grace_period_seconds=0)
    assert seen >= {
        "tether-listener",
        "tether-compass",
        "tether-enroller",
        "tether-webhook",
        "tether-poller",
    }
