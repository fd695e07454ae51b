"""Local kustomize overlays of ``manifests/kcp`` and ``manifests/skr``: what an operator's
overlay would hold, for one machine. They swap only what a local machine must:

* **addresses**: each part binds its pod IP (``$(POD_IP):PORT``, from ``status.podIP``)
  instead of ``0.0.0.0``, since all pods share this machine's network; compass's Director
  and token URLs point at the Director stand-in; the runtime's listener URL is the KCP
  listener's ingress name (resolved by the pod runner's hosts file);
* **what operators create out of band**: the listener's serving certificate and its CA,
  the listener's URL for the enroller, compass's OAuth client and the Director stand-in's CA
  (the real Director has a public certificate), and the SKR bundle the enroller installs
  (``kubectl kustomize`` of ``render_skr_bundle``: the base with the pod-IP binds);
* nothing else: images, replicas, probes, RBAC and security contexts are the base's. The
  runtimes' certificates, the webhook's caBundle and the trust bundle the listener mounts
  are the enroller's.

``render_kcp``/``render_skr_bundle`` write the overlay folder (kustomization.yaml and the
files its generators read) and return it for ``kubectl apply -k``/``kubectl kustomize``.
"""

from __future__ import annotations

import dataclasses
import os
import pathlib
import subprocess
from typing import Any

import yaml

from testing import controlplane, localnet

MANIFESTS = controlplane.REPO_ROOT / "manifests"
NAMESPACE = "tether-system"
LISTENER_HOST = "listener.kcp.local"  # the KCP listener's ingress name in local overlays


@dataclasses.dataclass
class KcpInputs:
    listener_cert: bytes
    listener_key: bytes
    listener_ca: bytes  # the CA of the listener's serving certificate (given to runtimes)
    listener_url: str  # the listener as runtimes reach it
    skr_bundle: str  # what the enroller installs (kubectl kustomize of render_skr_bundle)
    director_url: str  # .../graphql
    token_url: str
    director_ca: bytes
    oauth_client_id: str
    oauth_client_secret: str
    admin_cert: bytes = b""  # the admin pages' serving certificate (Secret tether-admin-tls)
    admin_key: bytes = b""
    enroller_env: dict[str, str] = dataclasses.field(default_factory=dict)  # a test's knobs


def kustomize(overlay: pathlib.Path) -> list[dict[str, Any]]:
    """Every object of ``kubectl kustomize overlay`` (the plane's kubectl)."""
    kubectl = controlplane.binaries() / "kubectl"
    done = subprocess.run(
        [str(kubectl), "kustomize", str(overlay)], capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        raise controlplane.ControlPlaneError(f"kubectl kustomize {overlay}: {done.stderr.strip()}")
    return [d for d in yaml.safe_load_all(done.stdout) if d]


def _pod_ip_bind(
    part: str, deployment: str, containers: dict[int, dict[str, str]]
) -> list[dict[str, Any]]:
    """Patches that put POD_IP first in each container's env and set its bind variables to
    ``$(POD_IP):PORT`` (``containers``: index -> variable -> port) in the Deployment of
    ``manifests/<part>``. A strategic merge patch addresses containers by name, a JSON patch
    by index: the names are read from the manifest."""
    names = _names(MANIFESTS / part / "deployment.yaml")
    ops: list[dict[str, Any]] = []
    for index in containers:
        ops.append(
            {
                "op": "add",
                "path": f"/spec/template/spec/containers/{index}/env/0",
                "value": {
                    "name": "POD_IP",
                    "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}},
                },
            }
        )
    patches: list[dict[str, Any]] = []
    smp_containers = []
    for index, binds in containers.items():
        smp_containers.append(
            {
                "name": names[index],
                "env": [{"name": k, "value": f"$(POD_IP):{port}"} for k, port in binds.items()],
            }
        )
    patches.append(
        {
            "target": {"kind": "Deployment", "name": deployment},
            "patch": yaml.safe_dump(
                {
                    "apiVersion": "apps/v1",
                    "kind": "Deployment",
                    "metadata": {"name": deployment, "namespace": NAMESPACE},
                    "spec": {"template": {"spec": {"containers": smp_containers}}},
                }
            ),
        }
    )
    # after the merge patch, which moves the variables it sets to the front
    patches.append(_json6902("Deployment", deployment, ops))
    return patches


def _json6902(kind: str, name: str, ops: list[dict[str, Any]]) -> dict[str, Any]:
    return {"target": {"kind": kind, "name": name}, "patch": yaml.safe_dump(ops)}


def _names(deployment: pathlib.Path) -> list[str]:
    doc = next(
        d for d in yaml.safe_load_all(deployment.read_text()) if d and d["kind"] == "Deployment"
    )
    return [c["name"] for c in doc["spec"]["template"]["spec"]["containers"]]


def _write(
    folder: pathlib.Path, files: dict[str, bytes], kustomization: dict[str, Any]
) -> pathlib.Path:
    folder.mkdir(parents=True, exist_ok=True)
    for name, data in files.items():
        path = folder / name
        path.write_bytes(data)
        path.chmod(0o600)
    (folder / "kustomization.yaml").write_text(yaml.safe_dump(kustomization, sort_keys=False))
    return folder


def _base(folder: pathlib.Path, part: str) -> str:
    return os.path.relpath(MANIFESTS / part, folder)


# The KCP API server's address in the egress policy (manifests/kcp/networkpolicies): the
# placeholder replaced as every landscape must replace it. The pod runner enforces no
# NetworkPolicy; the patch shows the overlay an operator writes.
KCP_APISERVER_LOCAL = _json6902(
    "NetworkPolicy",
    "tether-kcp-apiserver",
    [
        {
            "op": "replace",
            "path": "/spec/egress/0/to",
            "value": [{"ipBlock": {"cidr": "127.0.0.1/32"}}],
        }
    ],
)


def render_kcp(folder: pathlib.Path, i: KcpInputs) -> pathlib.Path:
    listener = _pod_ip_bind(
        "kcp/listener",
        "tether-listener",
        {0: {"TETHER_LISTENER_BIND": "8443", "TETHER_LISTENER_OPS_BIND": "9090"}},
    )
    janitor = _pod_ip_bind(
        "kcp/janitor", "tether-janitor", {0: {"TETHER_LISTENER_JANITOR_BIND": "9091"}}
    )
    compass = _pod_ip_bind("kcp/compass", "tether-compass", {0: {"TETHER_COMPASS_BIND": "8080"}})
    enroller = _pod_ip_bind(
        "kcp/enroller", "tether-enroller", {0: {"TETHER_ENROLLER_BIND": "8080"}}
    )
    admin = _pod_ip_bind(
        "kcp/admin",
        "tether-admin",
        {0: {"TETHER_ADMIN_BIND": "8443", "TETHER_ADMIN_OPS_BIND": "9090"}},
    )
    enroller.append(
        _json6902(
            "Deployment",
            "tether-enroller",
            [
                {
                    "op": "add",
                    "path": "/spec/template/spec/containers/0/env/-",
                    "value": {
                        "name": "TETHER_ENROLLER_BUNDLE_FILE",
                        "value": "/etc/tether/bundle/skr-bundle.yaml",
                    },
                },
                {
                    "op": "add",
                    "path": "/spec/template/spec/containers/0/volumeMounts/-",
                    "value": {
                        "name": "bundle",
                        "mountPath": "/etc/tether/bundle",
                        "readOnly": True,
                    },
                },
                {
                    "op": "add",
                    "path": "/spec/template/spec/volumes/-",
                    "value": {"name": "bundle", "configMap": {"name": "tether-enroller-bundle"}},
                },
                *(
                    {
                        "op": "add",
                        "path": "/spec/template/spec/containers/0/env/-",
                        "value": {"name": k, "value": v},
                    }
                    for k, v in sorted({**localnet.ENV, **i.enroller_env}.items())
                ),
            ],
        )
    )
    director_trust = _json6902(
        "Deployment",
        "tether-compass",
        [
            {
                "op": "add",
                "path": "/spec/template/spec/containers/0/env/-",
                "value": {
                    "name": "TETHER_COMPASS_DIRECTOR_CA_FILE",
                    "value": "/etc/tether/director-ca/ca.crt",
                },
            },
            {
                "op": "add",
                "path": "/spec/template/spec/containers/0/volumeMounts/-",
                "value": {
                    "name": "director-ca",
                    "mountPath": "/etc/tether/director-ca",
                    "readOnly": True,
                },
            },
            {
                "op": "add",
                "path": "/spec/template/spec/volumes/-",
                "value": {"name": "director-ca", "secret": {"secretName": "tether-director-ca"}},
            },
            *(
                {
                    "op": "add",
                    "path": "/spec/template/spec/containers/0/env/-",
                    "value": {"name": k, "value": v},
                }
                for k, v in sorted(localnet.ENV.items())
            ),
        ],
    )
    urls = {
        "target": {"kind": "ConfigMap", "name": "tether-compass"},
        "patch": yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": "tether-compass", "namespace": NAMESPACE},
                "data": {"director-url": i.director_url, "token-url": i.token_url},
            }
        ),
    }
    files = {
        "listener.crt": i.listener_cert,
        "listener.key": i.listener_key,
        "listener-ca.crt": i.listener_ca,
        "director-ca.crt": i.director_ca,
        "skr-bundle.yaml": i.skr_bundle.encode(),
        "client_secret": i.oauth_client_secret.encode(),
        "admin.crt": i.admin_cert,
        "admin.key": i.admin_key,
    }
    return _write(
        folder,
        files,
        {
            "apiVersion": "kustomize.config.k8s.io/v1beta1",
            "kind": "Kustomization",
            "resources": [_base(folder, "kcp")],
            "generatorOptions": {"disableNameSuffixHash": True},
            "secretGenerator": [
                {
                    "name": "tether-listener-tls",
                    "namespace": NAMESPACE,
                    "type": "kubernetes.io/tls",
                    "files": ["tls.crt=listener.crt", "tls.key=listener.key"],
                },
                {
                    "name": "tether-admin-tls",
                    "namespace": NAMESPACE,
                    "type": "kubernetes.io/tls",
                    "files": ["tls.crt=admin.crt", "tls.key=admin.key"],
                },
                {
                    "name": "tether-compass-oauth",
                    "namespace": NAMESPACE,
                    "files": ["client_secret"],
                    "literals": [f"client_id={i.oauth_client_id}"],
                },
                {
                    "name": "tether-director-ca",
                    "namespace": NAMESPACE,
                    "files": ["ca.crt=director-ca.crt"],
                },
            ],
            "configMapGenerator": [  # tether-runtime-ca (the runtimes' CAs) is the enroller's
                {
                    "name": "tether-listener-ca",
                    "namespace": NAMESPACE,
                    "files": ["ca.crt=listener-ca.crt"],
                },
                {
                    "name": "tether-enroller",
                    "namespace": NAMESPACE,
                    "literals": [f"listener-url={i.listener_url}"],
                },
                {
                    "name": "tether-enroller-bundle",
                    "namespace": NAMESPACE,
                    "files": ["skr-bundle.yaml"],
                },
            ],
            "patches": [
                *listener,
                *janitor,
                *compass,
                *enroller,
                *admin,
                director_trust,
                urls,
                KCP_APISERVER_LOCAL,
            ],
        },
    )


def render_skr_bundle(folder: pathlib.Path) -> pathlib.Path:
    """The SKR overlay the enroller's bundle is rendered from (``kubectl kustomize``): the
    base with each part binding its pod IP. Certificates, the caBundle and the runtime's
    identity are the enroller's to fill in, per runtime."""
    webhook = _pod_ip_bind("skr/webhook", "tether-webhook", {0: {"TETHER_WEBHOOK_BIND": "8443"}})
    poller = _pod_ip_bind("skr/poller", "tether-poller", {0: {"TETHER_POLLER_BIND": "8080"}})
    return _write(
        folder,
        {},
        {
            "apiVersion": "kustomize.config.k8s.io/v1beta1",
            "kind": "Kustomization",
            "resources": [_base(folder, "skr")],
            "patches": [*webhook, *poller],
        },
    )
