"""Tether installed the way an operator installs it, on two local planes: ``kubectl apply
-k`` of the local overlay (``testing.overlays``) of ``manifests/kcp``, every Deployment run
by the pod runner (``testing.podrunner``); the enroller among them installs Tether into the
runtime (server-side apply of the bundle rendered from the local overlay of
``manifests/skr``) and the runner runs what it installed; the Director stand-in is the one
external system. Used by the operational test
(``tests/deployed``) and by ``make demo``.

What lifecycle-manager and KEB would have created is created first, as they would: the
Kyma CRD (the stand-in copy), the ``kcp-system`` namespace, one Kyma CR with its
``skr-domain`` and the runtime's kubeconfig Secret; in the runtime, ``kyma-system``.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import pathlib
import secrets
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

from kubernetes import client

from testing import controlplane, overlays, podrunner
from tether.base import certs
from tether.kube import apitypes

KCP_NS = "kcp-system"
RUNTIME_ID = "rt-local-1"
DOMAIN = "c-local1.kyma.local"
KYMA = "kyma-local-1"
WEBHOOK_DNS = "tether-webhook.tether-system.svc"
ADMIN_HOST = "admin.kcp.local"  # the admin pages' name in the local overlay's certificate
WATCHES_DIR = controlplane.REPO_ROOT / "manifests" / "kcp" / "watches"  # applied after the CRDs
INJECTOR_DIR = (
    controlplane.REPO_ROOT / "manifests" / "kcp" / "injector"
)  # optional, after WATCHES_DIR


@dataclasses.dataclass
class Fleet:
    skr: controlplane.ControlPlane
    kcp: controlplane.ControlPlane
    work: pathlib.Path
    kcp_pods: podrunner.PodRunner
    skr_pods: podrunner.PodRunner
    director: subprocess.Popen[bytes]
    director_url: str
    applied: dict[str, str]  # plane -> kubectl apply output

    def stop(self) -> None:
        self.skr_pods.stop()
        self.kcp_pods.stop()
        controlplane.stop_group(self.director, timeout=10)

    def wait_for(
        self,
        what: str,
        probe: Callable[[], Any],
        timeout: float = 60.0,
        *,
        logs_of: str = "",
        poll: float = 0.3,
    ) -> Any:
        """``probe()``'s first truthy answer within ``timeout`` seconds; else an
        AssertionError naming ``what``, the last answer, both planes' pods and the tail of
        the KCP Deployment ``logs_of``'s log (when given)."""
        deadline = time.monotonic() + timeout
        last: Any = None
        while time.monotonic() < deadline:
            last = probe()
            if last:
                return last
            time.sleep(poll)
        tail = f"\n{self.kcp_pods.logs(logs_of)[-3000:]}" if logs_of else ""
        raise AssertionError(
            f"timed out waiting for {what} (last: {last!r})\n"
            f"{self.kcp_pods.table()}\n{self.skr_pods.table()}{tail}"
        )


def kubectl(
    plane: controlplane.ControlPlane, *args: str, check: bool = True
) -> subprocess.CompletedProcess[str]:
    done = plane.kubectl(*args)
    if check and done.returncode != 0:
        raise RuntimeError(f"kubectl {' '.join(args)} on {plane.name}: {done.stderr.strip()}")
    return done


def runtime_secret(fleet: Fleet, name: str = "tether-runtime-client") -> dict[str, Any]:
    """A Secret in Tether's namespace of the runtime, as served (default: its client
    certificate's, which the enroller writes)."""
    doc: dict[str, Any] = json.loads(
        kubectl(fleet.skr, "get", "secret", name, "-n", overlays.NAMESPACE, "-o", "json").stdout
    )
    return doc


def prepare_kcp(kcp: controlplane.ControlPlane, skr: controlplane.ControlPlane) -> None:
    """What lifecycle-manager keeps in the KCP for one runtime."""
    api = kcp.api_client()
    try:
        controlplane.install_crds(api, controlplane.KYMA_CRD)
        core = client.CoreV1Api(api)
        core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=KCP_NS)))
        client.CustomObjectsApi(api).create_namespaced_custom_object(
            apitypes.KYMAS.group,
            apitypes.KYMAS.version,
            KCP_NS,
            apitypes.KYMAS.plural,
            {
                "apiVersion": f"{apitypes.KYMAS.group}/{apitypes.KYMAS.version}",
                "kind": "Kyma",
                "metadata": {
                    "name": KYMA,
                    "annotations": {"skr-domain": DOMAIN},
                    "labels": {
                        "kyma-project.io/runtime-id": RUNTIME_ID,
                        apitypes.GLOBAL_ACCOUNT_LABEL: "ga-local",
                        apitypes.SUBACCOUNT_LABEL: "sa-local",
                        apitypes.SHOOT_NAME_LABEL: "c-local1",
                        apitypes.INSTANCE_ID_LABEL: "inst-local",
                        apitypes.PLAN_ID_LABEL: "plan-local",
                        apitypes.PLAN_NAME_LABEL: "azure",
                    },
                },
                "spec": {"channel": "regular", "modules": [{"name": "application-connector"}]},
            },
        )
        core.create_namespaced_secret(
            KCP_NS,
            client.V1Secret(
                metadata=client.V1ObjectMeta(
                    name=f"kubeconfig-{KYMA}", labels={apitypes.KYMA_NAME_LABEL: KYMA}
                ),
                data={"config": base64.b64encode(skr.kubeconfig.read_bytes()).decode()},
            ),
        )
    finally:
        api.close()
    sapi = skr.api_client()
    try:
        client.CoreV1Api(sapi).create_namespace(
            client.V1Namespace(metadata=client.V1ObjectMeta(name="kyma-system"))
        )
    finally:
        sapi.close()


def start_director(
    work: pathlib.Path, ca: certs.CertificateAuthority, secret: str
) -> tuple[subprocess.Popen[bytes], str]:
    ca.issue("director", dns_names=["localhost"], ip_addresses=["127.0.0.1"], server=True).write(
        work / "director.crt", work / "director.key"
    )
    port = controlplane.free_port()
    with open(work / "director.log", "ab") as out:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "standins.director",
                "--port",
                str(port),
                "--cert",
                str(work / "director.crt"),
                "--key",
                str(work / "director.key"),
                f"--client-secret={secret}",
            ],
            cwd=controlplane.REPO_ROOT,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            preexec_fn=controlplane.die_with_parent(),
        )
    url = f"https://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while not _port_open(port):
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(
                f"Director stand-in did not start: {(work / 'director.log').read_text()[-2000:]}"
            )
        time.sleep(0.1)
    return proc, url


def _port_open(port: int) -> bool:
    import socket

    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


def enrollment(kcp: controlplane.ControlPlane, name: str = KYMA) -> dict[str, Any] | None:
    done = kubectl(kcp, "get", "runtimeenrollment", name, "-n", KCP_NS, "-o", "json", check=False)
    return json.loads(done.stdout) if done.returncode == 0 else None


def condition(obj: dict[str, Any] | None, kind: str) -> str | None:
    for c in ((obj or {}).get("status") or {}).get("conditions") or []:
        if c["type"] == kind:
            return str(c["status"])
    return None


def render_injector(folder: pathlib.Path) -> pathlib.Path:
    """The optional injector overlay (``manifests/kcp/injector``, not in the KCP base) with
    the local overlays' one change: the injector binds its pod IP."""
    bind = overlays._pod_ip_bind(
        "kcp/injector", "tether-injector", {0: {"TETHER_INJECTOR_BIND": "9092"}}
    )
    return overlays._write(
        folder,
        {},
        {
            "apiVersion": "kustomize.config.k8s.io/v1beta1",
            "kind": "Kustomization",
            "resources": [overlays._base(folder, "kcp/injector")],
            "patches": bind,
        },
    )


def install(
    skr: controlplane.ControlPlane,
    kcp: controlplane.ControlPlane,
    work: pathlib.Path,
    *,
    timeout: float = 180.0,
    say: Any = None,
    enroller_env: dict[str, str] | None = None,
    injector: bool = False,
    **runner_kw: Any,
) -> Fleet:
    """Prepare both planes, apply the KCP overlay, run its Deployments; the enroller then
    installs Tether into the runtime, whose Deployments the runner runs too. Returns when
    all are available and the runtime's RuntimeEnrollment is Ready (``TimeoutError`` with
    the runner's table and the failing logs otherwise). ``injector``: the optional
    configuration injector too (``kubectl apply -k`` of ``render_injector``, after the
    Watches' manifests: its RoleBinding is in their namespace)."""
    say = say or (lambda msg: None)
    work.mkdir(parents=True, exist_ok=True)
    prepare_kcp(kcp, skr)
    ca = certs.CertificateAuthority.create("tether-local-kcp-ca")
    listener = ca.issue("tether-listener", dns_names=[overlays.LISTENER_HOST], server=True)
    admin = ca.issue("tether-admin", dns_names=[ADMIN_HOST], server=True)
    ca.write(work / "kcp-ca.crt", work / "kcp-ca.key")
    oauth_secret = secrets.token_urlsafe(24)
    director, director_url = start_director(work, ca, oauth_secret)
    kcp_pods = skr_pods = None
    try:
        bundle = kubectl(
            kcp, "kustomize", str(overlays.render_skr_bundle(work / "overlay-skr-bundle"))
        ).stdout
        # the listener Service's port as runtimes reach it (its ingress name resolves to it)
        kdir = overlays.render_kcp(
            work / "overlay-kcp",
            overlays.KcpInputs(
                listener_cert=listener.cert_pem,
                listener_key=listener.key_pem,
                listener_ca=ca.cert_pem,
                listener_url=f"https://{overlays.LISTENER_HOST}:443",
                skr_bundle=bundle,
                director_url=f"{director_url}/graphql",
                token_url=f"{director_url}/oauth2/token",
                director_ca=ca.cert_pem,
                oauth_client_id="tether",
                oauth_client_secret=oauth_secret,
                admin_cert=admin.cert_pem,
                admin_key=admin.key_pem,
                enroller_env=dict(enroller_env or {}),
            ),
        )
        applied = {"kcp": kubectl(kcp, "apply", "-k", str(kdir)).stdout}
        say(f"KCP: kubectl apply -k {kdir}")
        # the shipped Watch once its CRD is served (docs/operations.md, "Deploying")
        kubectl(
            kcp,
            "wait",
            "--for",
            "condition=established",
            "--timeout=60s",
            f"crd/{apitypes.WATCHES.plural}.{apitypes.WATCHES.group}",
        )
        applied["kcp"] += kubectl(kcp, "apply", "-k", str(WATCHES_DIR)).stdout
        say(f"KCP: kubectl apply -k {WATCHES_DIR}")
        if injector:
            idir = render_injector(work / "overlay-kcp-injector")
            applied["kcp"] += kubectl(kcp, "apply", "-k", str(idir)).stdout
            say(f"KCP: kubectl apply -k {idir} (the optional injector)")
        kcp_pods = podrunner.PodRunner(kcp, overlays.NAMESPACE, work, **runner_kw).start()
        kcp_pods.wait_available(timeout)
        listener_ip, _ = kcp_pods.service_address("tether-listener", "https")
        deadline = time.monotonic() + timeout
        while condition(enrollment(kcp), "Enrolled") != "True":
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"the runtime was not enrolled within {timeout:.0f}s: "
                    f"{json.dumps((enrollment(kcp) or {}).get('status'))}\n"
                    f"{kcp_pods.logs('tether-enroller')[-3000:]}"
                )
            time.sleep(0.5)
        say(
            "KCP: the enroller installed Tether into the runtime "
            f"(RuntimeEnrollment {KCP_NS}/{KYMA})"
        )
        skr_pods = podrunner.PodRunner(
            skr, overlays.NAMESPACE, work, hosts={overlays.LISTENER_HOST: listener_ip}, **runner_kw
        ).start()
        skr_pods.wait_available(timeout)
        while condition(enrollment(kcp), "Ready") != "True":
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"the runtime's enrollment is not Ready: "
                    f"{json.dumps((enrollment(kcp) or {}).get('status'))}"
                )
            time.sleep(0.5)
        say(f"KCP: RuntimeEnrollment {KCP_NS}/{KYMA} Ready")
    except BaseException:
        for r in (skr_pods, kcp_pods):
            if r is not None:
                r.stop()
        controlplane.stop_group(director, timeout=10)
        raise
    return Fleet(skr, kcp, work, kcp_pods, skr_pods, director, director_url, applied)


def operator_token(
    kcp: controlplane.ControlPlane, name: str = "tether-operator", seconds: int = 8 * 3600
) -> str:
    """A ServiceAccount ``tether-system/<name>`` bound to the manifests' ClusterRole
    ``tether-admin-viewer`` (every admin page), and a bearer token for it (TokenRequest) made
    for the admin pages' audience: what an operator gets with
    ``kubectl create token tether-operator --audience tether-admin``."""
    api = kcp.api_client()
    try:
        core: Any = client.CoreV1Api(api)
        rbac: Any = client.RbacAuthorizationV1Api(api)
        try:
            core.create_namespaced_service_account(
                overlays.NAMESPACE, client.V1ServiceAccount(metadata=client.V1ObjectMeta(name=name))
            )
            rbac.create_cluster_role_binding(
                {
                    "apiVersion": "rbac.authorization.k8s.io/v1",
                    "kind": "ClusterRoleBinding",
                    "metadata": {"name": f"{name}-admin-viewer"},
                    "subjects": [
                        {"kind": "ServiceAccount", "name": name, "namespace": overlays.NAMESPACE}
                    ],
                    "roleRef": {
                        "apiGroup": "rbac.authorization.k8s.io",
                        "kind": "ClusterRole",
                        "name": "tether-admin-viewer",
                    },
                }
            )
        except client.ApiException as e:
            if e.status != 409:
                raise
        tr: Any = core.create_namespaced_service_account_token(
            name,
            overlays.NAMESPACE,
            client.AuthenticationV1TokenRequest(
                spec=client.V1TokenRequestSpec(
                    audiences=["tether-admin"], expiration_seconds=seconds
                )
            ),
        )
        return str(tr.status.token)
    finally:
        api.close()


def admin_address(fleet: Fleet) -> tuple[str, int]:
    """The admin pages' Service (HTTPS) as this machine reaches it; its certificate names
    ``ADMIN_HOST`` and is signed by ``work/kcp-ca.crt``."""
    return fleet.kcp_pods.service_address("tether-admin", "https")
