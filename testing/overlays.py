"""Local kustomize overlays of ``manifests/kcp`` and ``manifests/skr``: what an operator's
overlay would hold, for one machine. They swap only what a local machine must:

* **addresses**: each part binds its pod IP (``$(POD_IP):PORT``, from ``status.podIP``)
  instead of ``0.0.0.0``, since all pods share this machine's network; compass's Director
  and token URLs point at the Director stand-in; the runtime's listener URL is the KCP
  listener's ingress name (resolved by the pod runner's hosts file);
* **certificate Secrets** (which operators create out of band): the listener's serving
  certificate and the runtime CA, the runtime's client certificate, the webhook's serving
  certificate with the webhook configuration's caBundle, compass's OAuth client and the
  Director stand-in's CA (the real Director has a public certificate);
* nothing else: images, replicas, probes, RBAC and security contexts are the base's.

``render_kcp``/``render_skr`` write the overlay folder (kustomization.yaml and the files
its generators read) and return it for ``kubectl apply -k``.
"""

from __future__ import annotations

import dataclasses
import os
import pathlib
from typing import Any

import yaml

from testing import controlplane

MANIFESTS = controlplane.REPO_ROOT / "manifests"
NAMESPACE = "tether-system"
LISTENER_HOST = "listener.kcp.local"  # the KCP listener's ingress name in local overlays


@dataclasses.dataclass
class KcpInputs:
    listener_cert: bytes
    listener_key: bytes
    runtime_ca: bytes         # the CA of the runtimes' client certificates
    director_url: str         # .../graphql
    token_url: str
    director_ca: bytes
    oauth_client_id: str
    oauth_client_secret: str


@dataclasses.dataclass
class SkrInputs:
    runtime_id: str
    listener_url: str
    listener_ca: bytes        # the CA of the listener's serving certificate
    client_cert: bytes
    client_key: bytes
    webhook_cert: bytes       # for tether-webhook.tether-system.svc
    webhook_key: bytes
    webhook_ca: bytes         # the webhook configuration's caBundle


def _pod_ip_bind(deployment: str, containers: dict[int, dict[str, str]]) -> list[dict[str, Any]]:
    """Patches that put POD_IP first in each container's env and set its bind variables to
    ``$(POD_IP):PORT`` (``containers``: index -> variable -> port)."""
    ops: list[dict[str, Any]] = []
    for index in containers:
        ops.append({"op": "add", "path": f"/spec/template/spec/containers/{index}/env/0",
                    "value": {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}})
    patches: list[dict[str, Any]] = []
    smp_containers = []
    for index, binds in containers.items():
        smp_containers.append({"$index": index,
                               "env": [{"name": k, "value": f"$(POD_IP):{port}"} for k, port in binds.items()]})
    patches.append({"target": {"kind": "Deployment", "name": deployment},
                    "patch": yaml.safe_dump({"apiVersion": "apps/v1", "kind": "Deployment",
                                             "metadata": {"name": deployment, "namespace": NAMESPACE},
                                             "spec": {"template": {"spec": {"containers": smp_containers}}}})})
    # after the merge patch, which moves the variables it sets to the front
    patches.append(_json6902("Deployment", deployment, ops))
    return patches


def _json6902(kind: str, name: str, ops: list[dict[str, Any]]) -> dict[str, Any]:
    return {"target": {"kind": kind, "name": name}, "patch": yaml.safe_dump(ops)}


def _names(deployment: pathlib.Path) -> list[str]:
    doc = next(d for d in yaml.safe_load_all(deployment.read_text()) if d and d["kind"] == "Deployment")
    return [c["name"] for c in doc["spec"]["template"]["spec"]["containers"]]


def _smp_env(patches: list[dict[str, Any]], containers: list[str]) -> None:
    """Strategic merge patches address containers by name: resolve the ``$index`` markers."""
    for p in patches:
        doc = yaml.safe_load(p["patch"])
        if isinstance(doc, dict):
            for c in doc["spec"]["template"]["spec"]["containers"]:
                c["name"] = containers[c.pop("$index")]
            p["patch"] = yaml.safe_dump(doc)


def _write(folder: pathlib.Path, files: dict[str, bytes], kustomization: dict[str, Any]) -> pathlib.Path:
    folder.mkdir(parents=True, exist_ok=True)
    for name, data in files.items():
        path = folder / name
        path.write_bytes(data)
        path.chmod(0o600)
    (folder / "kustomization.yaml").write_text(yaml.safe_dump(kustomization, sort_keys=False))
    return folder


def _base(folder: pathlib.Path, part: str) -> str:
    return os.path.relpath(MANIFESTS / part, folder)


def render_kcp(folder: pathlib.Path, i: KcpInputs) -> pathlib.Path:
    listener = _pod_ip_bind("tether-listener", {
        0: {"TETHER_LISTENER_BIND": "8443", "TETHER_LISTENER_OPS_BIND": "9090"},
        1: {"TETHER_LISTENER_JANITOR_BIND": "9091"}})
    _smp_env(listener, _names(MANIFESTS / "kcp" / "listener" / "deployment.yaml"))
    compass = _pod_ip_bind("tether-compass", {0: {"TETHER_COMPASS_BIND": "8080"}})
    _smp_env(compass, _names(MANIFESTS / "kcp" / "compass" / "deployment.yaml"))
    director_trust = _json6902("Deployment", "tether-compass", [
        {"op": "add", "path": "/spec/template/spec/containers/0/env/-",
         "value": {"name": "TETHER_COMPASS_DIRECTOR_CA_FILE", "value": "/etc/tether/director-ca/ca.crt"}},
        {"op": "add", "path": "/spec/template/spec/containers/0/volumeMounts/-",
         "value": {"name": "director-ca", "mountPath": "/etc/tether/director-ca", "readOnly": True}},
        {"op": "add", "path": "/spec/template/spec/volumes/-",
         "value": {"name": "director-ca", "secret": {"secretName": "tether-director-ca"}}}])
    urls = {"target": {"kind": "ConfigMap", "name": "tether-compass"},
            "patch": yaml.safe_dump({"apiVersion": "v1", "kind": "ConfigMap",
                                     "metadata": {"name": "tether-compass", "namespace": NAMESPACE},
                                     "data": {"director-url": i.director_url, "token-url": i.token_url}})}
    files = {"listener.crt": i.listener_cert, "listener.key": i.listener_key,
             "runtime-ca.crt": i.runtime_ca, "director-ca.crt": i.director_ca,
             "client_secret": i.oauth_client_secret.encode()}
    return _write(folder, files, {
        "apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization",
        "resources": [_base(folder, "kcp")],
        "generatorOptions": {"disableNameSuffixHash": True},
        "secretGenerator": [
            {"name": "tether-listener-tls", "namespace": NAMESPACE, "type": "kubernetes.io/tls",
             "files": ["tls.crt=listener.crt", "tls.key=listener.key"]},
            {"name": "tether-compass-oauth", "namespace": NAMESPACE,
             "files": ["client_secret"], "literals": [f"client_id={i.oauth_client_id}"]},
            {"name": "tether-director-ca", "namespace": NAMESPACE, "files": ["ca.crt=director-ca.crt"]},
        ],
        "configMapGenerator": [
            {"name": "tether-runtime-ca", "namespace": NAMESPACE, "files": ["ca.crt=runtime-ca.crt"]},
        ],
        "patches": [*listener, *compass, director_trust, urls],
    })


def render_skr(folder: pathlib.Path, i: SkrInputs) -> pathlib.Path:
    import base64

    webhook = _pod_ip_bind("tether-webhook", {0: {"TETHER_WEBHOOK_BIND": "8443"}})
    _smp_env(webhook, _names(MANIFESTS / "skr" / "webhook" / "deployment.yaml"))
    poller = _pod_ip_bind("tether-poller", {0: {"TETHER_POLLER_BIND": "8080"}})
    _smp_env(poller, _names(MANIFESTS / "skr" / "poller" / "deployment.yaml"))
    ca_bundle = _json6902("ValidatingWebhookConfiguration", "tether-configmaps", [
        {"op": "add", "path": "/webhooks/0/clientConfig/caBundle",
         "value": base64.b64encode(i.webhook_ca).decode()}])
    files = {"client.crt": i.client_cert, "client.key": i.client_key, "listener-ca.crt": i.listener_ca,
             "webhook.crt": i.webhook_cert, "webhook.key": i.webhook_key}
    return _write(folder, files, {
        "apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization",
        "resources": [_base(folder, "skr")],
        "generatorOptions": {"disableNameSuffixHash": True},
        "secretGenerator": [
            {"name": "tether-runtime-client", "namespace": NAMESPACE,
             "files": ["tls.crt=client.crt", "tls.key=client.key", "ca.crt=listener-ca.crt"],
             "literals": [f"runtime-id={i.runtime_id}", f"listener-url={i.listener_url}"]},
            {"name": "tether-webhook-serving", "namespace": NAMESPACE, "type": "kubernetes.io/tls",
             "files": ["tls.crt=webhook.crt", "tls.key=webhook.key"]},
        ],
        "patches": [*webhook, *poller, ca_bundle],
    })
