"""cert-manager on a local control plane: its controller and cainjector, built from the Go
module ``github.com/cert-manager/cert-manager`` (``hack/build-cert-manager.sh``, cached
outside the checkout like the control plane), run as processes against a plane's
kubeconfig, with the CRDs that ship in that module (``deploy/crds``).

    cm = CertManager(plane, work).start()   # CRDs installed, both processes running
    apply_overlay_issuers(plane)             # the overlay's Issuers and Certificates
    wait_ready(api, NAMESPACE, "certificates", "tether-listener-serving")
    cm.stop()

``install`` is ``testing.deployed.install`` on that overlay: cert-manager runs on the KCP
plane and the local overlay's base is ``manifests/overlays/cert-manager`` instead of
``manifests/kcp`` (``render_kcp``), without the listener certificate the local overlay
otherwise makes.

Used by tests/certmanager and tests/deployed/test_cert_manager_deployed.py.

Environment:
    TETHER_CERT_MANAGER_DIR    folder holding bin/controller, bin/cainjector and crds/
                               (skips the build)
    TETHER_CERT_MANAGER_CACHE  cache root of the build script
"""

from __future__ import annotations

import base64
import os
import pathlib
import subprocess
import threading
import time
from collections.abc import Iterable, Mapping
from typing import IO, Any

import yaml
from kubernetes import client

from testing import controlplane, deployed, overlays

BUILD_SCRIPT = controlplane.REPO_ROOT / "hack" / "build-cert-manager.sh"
VERSIONS_FILE = controlplane.REPO_ROOT / "hack" / "cert-manager-versions.env"
OVERLAY = controlplane.REPO_ROOT / "manifests" / "overlays" / "cert-manager"
NAMESPACE = "tether-system"
GROUP = "cert-manager.io"


class CertManagerError(RuntimeError):
    """cert-manager could not be built, installed or started, or did not deliver."""


def pinned_version() -> str:
    for line in VERSIONS_FILE.read_text().splitlines():
        if line.startswith("CERT_MANAGER_VERSION="):
            return line.split("=", 1)[1].strip()
    raise CertManagerError(f"{VERSIONS_FILE} names no CERT_MANAGER_VERSION")


_lock = threading.Lock()
_dir: pathlib.Path | None = None


def installation() -> pathlib.Path:
    """The folder holding ``bin/controller``, ``bin/cainjector`` and ``crds/``; builds them
    if not cached."""
    global _dir
    with _lock:
        if _dir is not None:
            return _dir
        explicit = os.environ.get("TETHER_CERT_MANAGER_DIR")
        if explicit:
            path = pathlib.Path(explicit)
        else:
            proc = subprocess.run(
                ["bash", str(BUILD_SCRIPT)], stdout=subprocess.PIPE, text=True, check=False
            )
            if proc.returncode != 0:
                raise CertManagerError(
                    f"building cert-manager failed (exit {proc.returncode}); "
                    f"run {BUILD_SCRIPT} to see why"
                )
            path = pathlib.Path(proc.stdout.strip().splitlines()[-1])
        for b in ("controller", "cainjector"):
            if not os.access(path / "bin" / b, os.X_OK):
                raise CertManagerError(f"{path / 'bin' / b} is missing or not executable")
        if not sorted((path / "crds").glob("*.yaml")):
            raise CertManagerError(f"{path / 'crds'} holds no CRD")
        _dir = path
        return path


def crd_files() -> list[pathlib.Path]:
    return sorted((installation() / "crds").glob("*.yaml"))


class CertManager:
    """The controller and the cainjector of one plane, as processes (logs in ``work``)."""

    def __init__(self, plane: controlplane.ControlPlane, work: pathlib.Path) -> None:
        self.plane, self.work = plane, work
        self.procs: dict[str, tuple[subprocess.Popen[bytes], IO[bytes]]] = {}

    def start(self) -> CertManager:
        folder = installation()
        api = self.plane.api_client()
        try:
            controlplane.install_crds(api, *crd_files())
        finally:
            api.close()
        self.work.mkdir(parents=True, exist_ok=True)
        for name, extra in (
            ("controller", ["--cluster-resource-namespace", NAMESPACE]),
            ("cainjector", []),
        ):
            log = open(self.work / f"cert-manager-{name}.log", "ab")  # noqa: SIM115 (closed in stop)
            popen = subprocess.Popen(
                [
                    str(folder / "bin" / name),
                    "--kubeconfig",
                    str(self.plane.kubeconfig),
                    "-v=2",
                    *extra,
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                preexec_fn=controlplane.die_with_parent(),
            )
            self.procs[name] = (popen, log)
        time.sleep(0.5)  # a bad flag or kubeconfig exits at once: seen here, not at a timeout
        try:
            self.check_alive()
        except CertManagerError:
            self.stop()
            raise
        return self

    def check_alive(self) -> None:
        for name, (popen, _) in list(self.procs.items()):
            if popen.poll() is not None:
                raise CertManagerError(
                    f"cert-manager {name} exited ({popen.returncode}): {self.log(name)[-3000:]}"
                )

    def log(self, name: str) -> str:
        path = self.work / f"cert-manager-{name}.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def stop(self) -> None:
        for popen, log in self.procs.values():
            controlplane.stop_group(popen, timeout=10)
            log.close()
        self.procs.clear()

    def __enter__(self) -> CertManager:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def overlay_objects(overlay: pathlib.Path = OVERLAY) -> list[dict[str, Any]]:
    """Every object of ``kubectl kustomize overlay``."""
    return overlays.kustomize(overlay)


def issuer_objects(objects: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The cert-manager objects (Issuers, Certificates) among ``objects``."""
    return [dict(o) for o in objects if str(o.get("apiVersion", "")).startswith(GROUP + "/")]


def apply(
    plane: controlplane.ControlPlane, objects: Iterable[Mapping[str, Any]], folder: pathlib.Path
) -> str:
    """``kubectl apply --server-side`` of ``objects`` (written to ``folder``)."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "objects.yaml"
    path.write_text(yaml.safe_dump_all(list(objects), sort_keys=False))
    done = plane.kubectl(
        "apply", "--server-side", "--field-manager", "tether-test", "-f", str(path)
    )
    if done.returncode != 0:
        raise CertManagerError(f"kubectl apply on {plane.name}: {done.stderr.strip()}")
    return done.stdout


def wait_ready(
    api: client.ApiClient, namespace: str, plural: str, name: str, timeout: float = 90.0
) -> dict[str, Any]:
    """The cert-manager object once its Ready condition is True."""
    custom: Any = client.CustomObjectsApi(api)
    deadline = time.monotonic() + timeout
    obj: dict[str, Any] = {}
    while time.monotonic() < deadline:
        try:
            obj = custom.get_namespaced_custom_object(GROUP, "v1", namespace, plural, name)
        except client.ApiException as e:
            if e.status != 404:
                raise
        for c in (obj.get("status") or {}).get("conditions") or []:
            if c.get("type") == "Ready" and c.get("status") == "True":
                return obj
        time.sleep(0.3)
    raise CertManagerError(
        f"{plural} {namespace}/{name} not Ready within {timeout:.0f}s: "
        f"{(obj.get('status') or {}).get('conditions')}"
    )


def secret_data(
    api: client.ApiClient, namespace: str, name: str
) -> tuple[str, dict[str, bytes]] | None:
    """The Secret's type and decoded data (None if it does not exist)."""
    try:
        s: Any = client.CoreV1Api(api).read_namespaced_secret(name, namespace)
    except client.ApiException as e:
        if e.status == 404:
            return None
        raise
    return str(s.type), {k: base64.b64decode(v) for k, v in (s.data or {}).items()}


_render_base_kcp = overlays.render_kcp


def render_kcp(folder: pathlib.Path, i: overlays.KcpInputs) -> pathlib.Path:
    """``overlays.render_kcp`` on top of ``manifests/overlays/cert-manager``: the same local
    patches and out-of-band objects, less the listener's serving Secret and its CA
    ConfigMap (cert-manager's now); the listener Certificate's first DNS name (the ingress
    name, which each landscape patches) becomes the local overlay's listener name."""
    out = _render_base_kcp(folder, i)
    k = yaml.safe_load((out / "kustomization.yaml").read_text())
    k["resources"] = [os.path.relpath(OVERLAY, out)]
    k["secretGenerator"] = [g for g in k["secretGenerator"] if g["name"] != "tether-listener-tls"]
    k["configMapGenerator"] = [
        g for g in k["configMapGenerator"] if g["name"] != "tether-listener-ca"
    ]
    k["patches"].append(
        {
            "target": {"group": GROUP, "kind": "Certificate", "name": "tether-listener-serving"},
            "patch": yaml.safe_dump(
                [{"op": "replace", "path": "/spec/dnsNames/0", "value": overlays.LISTENER_HOST}]
            ),
        }
    )
    for name in ("listener.crt", "listener.key", "listener-ca.crt"):
        (out / name).unlink(missing_ok=True)
    (out / "kustomization.yaml").write_text(yaml.safe_dump(k, sort_keys=False))
    return out


def install(
    skr: controlplane.ControlPlane, kcp: controlplane.ControlPlane, work: pathlib.Path, **kw: Any
) -> tuple[deployed.Fleet, CertManager]:
    """cert-manager started on ``kcp``, then ``deployed.install`` with the KCP overlay
    rendered by ``render_kcp`` (``overlays.render_kcp`` is swapped for the call). The caller
    stops both (``fleet.stop()``, ``cm.stop()``)."""
    cm = CertManager(kcp, work / "cert-manager").start()
    try:
        overlays.render_kcp = render_kcp
        try:
            fleet = deployed.install(skr, kcp, work, **kw)
        finally:
            overlays.render_kcp = _render_base_kcp
    except BaseException:
        cm.stop()
        raise
    return fleet, cm
