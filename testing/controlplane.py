"""A local Kubernetes control plane: a real etcd and a real kube-apiserver.

Started the way controller-runtime's envtest starts them: binaries built once from Go
modules (``hack/build-controlplane.sh``, cached outside the checkout), free loopback ports,
a temporary folder holding the data, serving certificates, a client CA, an admin client
certificate in ``system:masters`` and a kubeconfig. RBAC authorization is on. There is no
scheduler, and no controller-manager unless a test starts one: objects are stored and
served, nothing reconciles them (a deleted namespace stays Terminating).

Used by the tests (one SKR plane, one KCP plane) and the local demo.

    plane = ControlPlane("skr")
    plane.start()
    api = plane.api_client()        # kubernetes.client.ApiClient
    ...
    plane.stop()                    # kills processes, removes the folder

etcd's history of a running plane can be saved and put back, to test a runtime restored
from a backup (the same PKI, ports and kubeconfig, so clients keep working):

    snap = plane.snapshot(path)     # etcdctl snapshot save
    plane.restore(snap)             # stop, etcdutl snapshot restore, start again

A test that needs what kube-controller-manager does in every real cluster runs only the
controllers it needs against its own plane, stopped with the plane:

    plane.start_controller_manager(["clusterrole-aggregation-controller"])  # view, edit, admin

Environment:
    TETHER_CONTROLPLANE_BIN    folder holding etcd, kube-apiserver, kubectl (skips the build;
                               etcdctl and etcdutl too for snapshot and restore,
                               kube-controller-manager for start_controller_manager)
    TETHER_CONTROLPLANE_CACHE  cache root of the build script
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import dataclasses
import functools
import logging
import os
import pathlib
import random
import shutil
import signal
import ssl
import subprocess
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from typing import IO, Any, TypeVar

from cryptography.hazmat.primitives import serialization

from testing import workers
from tether.base import certs

log = logging.getLogger(__name__)

REPO_ROOT = pathlib.Path(__file__).resolve().parents[1]
BUILD_SCRIPT = REPO_ROOT / "hack" / "build-controlplane.sh"
VERSIONS_FILE = REPO_ROOT / "hack" / "controlplane-versions.env"
# the stand-in Kyma CRD of local planes (lifecycle-manager installs the real one)
KYMA_CRD = REPO_ROOT / "hack" / "crds" / "operator.kyma-project.io_kymas.yaml"
START_TIMEOUT = 90.0


class ControlPlaneError(RuntimeError):
    """The control plane could not be built or started."""


def pinned_versions() -> dict[str, str]:
    """The pins of hack/controlplane-versions.env."""
    out: dict[str, str] = {}
    for line in VERSIONS_FILE.read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#") and "=" in line:
            k, v = line.split("=", 1)
            out[k.strip()] = v.strip()
    return out


_bin_lock = threading.Lock()
_bin_dir: pathlib.Path | None = None


def binaries() -> pathlib.Path:
    """The folder holding etcd, kube-apiserver and kubectl; builds them if not cached."""
    global _bin_dir
    with _bin_lock:
        if _bin_dir is not None:
            return _bin_dir
        explicit = os.environ.get("TETHER_CONTROLPLANE_BIN")
        if explicit:
            path = pathlib.Path(explicit)
        else:
            if not BUILD_SCRIPT.exists():
                raise ControlPlaneError(
                    f"{BUILD_SCRIPT} not found; set TETHER_CONTROLPLANE_BIN to a folder "
                    "holding etcd, kube-apiserver and kubectl"
                )
            proc = subprocess.run(
                ["bash", str(BUILD_SCRIPT)], stdout=subprocess.PIPE, text=True, check=False
            )
            if proc.returncode != 0:
                raise ControlPlaneError(
                    f"building the control plane failed (exit {proc.returncode}); "
                    f"run {BUILD_SCRIPT} to see why"
                )
            path = pathlib.Path(proc.stdout.strip().splitlines()[-1])
        for b in ("etcd", "kube-apiserver", "kubectl"):
            if not os.access(path / b, os.X_OK):
                raise ControlPlaneError(f"{path / b} is missing or not executable")
        _bin_dir = path
        return path


def _tool(name: str) -> pathlib.Path:
    """A binary beside the three every plane runs: etcd's snapshot tools (etcdctl, etcdutl)
    and kube-controller-manager."""
    path = binaries() / name
    if not os.access(path, os.X_OK):
        raise ControlPlaneError(f"{path} is missing: run {BUILD_SCRIPT} (it adds it to the cache)")
    return path


def kube_apiserver_version() -> str:
    """What the built kube-apiserver says of its version (e.g. 'Kubernetes v1.37.2')."""
    out = subprocess.run(
        [str(binaries() / "kube-apiserver"), "--version"],
        stdout=subprocess.PIPE,
        text=True,
        check=True,
    )
    return out.stdout.strip()


def free_port() -> int:
    """A free loopback port of this test worker's own block (``testing.workers``)."""
    return workers.port()


_PR_SET_PDEATHSIG = 1
_cidrs_lock = threading.Lock()
_cidrs_used: set[str] = set()


def _service_cidr() -> str:
    """A loopback /16 (127.64.0.0 to 127.127.0.0) for a plane's ClusterIPs, unique in this
    process and random across processes, from this test worker's share first
    (``testing.workers``): pods of different planes reach each other's Services on one machine
    (``testing.podrunner`` binds its proxies there)."""
    with _cidrs_lock:
        free = [n for n in workers.slot(64, 128) if f"127.{n}.0.0/16" not in _cidrs_used]
        free = free or [n for n in range(64, 128) if f"127.{n}.0.0/16" not in _cidrs_used]
        if not free:
            raise ControlPlaneError("no free loopback range for ClusterIPs (64 planes running)")
        cidr = f"127.{random.choice(free)}.0.0/16"
        _cidrs_used.add(cidr)
        return cidr


def die_with_parent(sig: signal.Signals = signal.SIGTERM) -> Callable[[], None] | None:
    """A ``preexec_fn`` for ``subprocess.Popen`` that sends the child ``sig`` when this
    process dies (even by SIGKILL), so no server outlives a killed test or demo. The signal
    follows the spawning *thread*, so it is only used from the main thread (None else)."""
    if threading.current_thread() is not threading.main_thread():
        return None

    def preexec() -> None:  # runs in the child before exec
        try:
            ctypes.CDLL("libc.so.6", use_errno=True).prctl(_PR_SET_PDEATHSIG, int(sig))
        except OSError:
            pass

    return preexec


def stop_group(popen: subprocess.Popen[Any], timeout: float = 30.0) -> int | None:
    """Stop a child started with ``start_new_session=True`` and everything in its process
    group: SIGTERM, then SIGKILL after ``timeout`` seconds. Returns its exit code."""
    if popen.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(popen.pid, signal.SIGTERM)
        try:
            popen.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(popen.pid, signal.SIGKILL)
            popen.wait(timeout=10)
    return popen.returncode


@dataclasses.dataclass
class _Proc:
    name: str
    popen: subprocess.Popen[bytes]
    logfile: IO[bytes]
    logpath: pathlib.Path


_live: set[ControlPlane] = set()


@atexit.register
def _stop_all() -> None:
    for plane in list(_live):
        plane.stop()


class ControlPlane:
    """One independent etcd + kube-apiserver on loopback (and, for a test that asks,
    kube-controller-manager: ``start_controller_manager``)."""

    def __init__(
        self,
        name: str,
        *,
        workdir: pathlib.Path | None = None,
        quota_backend_bytes: int | None = None,
        apiserver_flags: Sequence[str] = (),
    ) -> None:
        self.name = name
        # etcd's space quota (``--quota-backend-bytes``; None: etcd's default), for NOSPACE tests
        self.quota_backend_bytes = quota_backend_bytes
        # more kube-apiserver flags after the fixed ones (e.g. ``--admission-control-config-file``
        # naming files the caller wrote), for a test's own plane; the session planes pass none
        self.apiserver_flags = tuple(apiserver_flags)
        self._own_dir = workdir is None
        self.dir = workdir or pathlib.Path(tempfile.mkdtemp(prefix=f"tether-{name}-"))
        self.etcd_port = self.etcd_peer_port = self.port = 0
        self.url = ""
        self._pick_ports()
        self.service_cidr = _service_cidr()
        self._etcd: _Proc | None = None
        self._apiserver: _Proc | None = None
        self._controller_manager: _Proc | None = None
        self._pki = self.dir / "pki"
        self.kubeconfig = self.dir / "kubeconfig"
        self.ca_file = self._pki / "serving-ca.crt"
        self.client_ca: certs.CertificateAuthority | None = None
        self.start_seconds: float | None = None

    # -- lifecycle -------------------------------------------------------------------------

    def start(self, attempts: int = 3) -> ControlPlane:
        """Start etcd and kube-apiserver and wait until ready. Ports are picked free but
        another process may take one before the server binds it; such a start is retried
        on fresh ports."""
        t0 = time.monotonic()
        bins = binaries()
        _live.add(self)
        for attempt in range(1, attempts + 1):
            try:
                self._write_pki()
                self._start_etcd(bins)
                self.start_apiserver()
                break
            except ControlPlaneError as e:
                self._stop_processes()
                if "address already in use" not in str(e) or attempt == attempts:
                    self.stop()
                    raise
                log.info("control plane %s: port taken, retrying on fresh ports", self.name)
                shutil.rmtree(self.dir / "etcd", ignore_errors=True)
                for old_log in self.dir.glob("*.log"):
                    old_log.unlink()
                self._pick_ports()
            except BaseException:
                self.stop()
                raise
        self.start_seconds = time.monotonic() - t0
        log.info("control plane %s ready at %s in %.1fs", self.name, self.url, self.start_seconds)
        return self

    def _pick_ports(self) -> None:
        self.etcd_port = free_port()
        self.etcd_peer_port = free_port()
        self.port = free_port()
        self.url = f"https://127.0.0.1:{self.port}"

    def start_apiserver(self) -> None:
        """Start (or restart after ``stop_apiserver``) the kube-apiserver on the same port."""
        if self._apiserver is not None:
            raise ControlPlaneError(f"{self.name}: kube-apiserver already running")
        p = self._pki
        args = [
            str(binaries() / "kube-apiserver"),
            f"--etcd-servers=http://127.0.0.1:{self.etcd_port}",
            f"--etcd-prefix=/{self.name}",
            "--advertise-address=127.0.0.1",
            "--bind-address=127.0.0.1",
            f"--secure-port={self.port}",
            f"--cert-dir={self.dir / 'apiserver-certs'}",
            f"--tls-cert-file={p / 'serving.crt'}",
            f"--tls-private-key-file={p / 'serving.key'}",
            f"--client-ca-file={p / 'client-ca.crt'}",
            "--authorization-mode=RBAC",
            # on loopback, so that the pod runner's proxies can serve ClusterIPs
            f"--service-cluster-ip-range={self.service_cidr}",
            "--allow-privileged=true",
            "--disable-admission-plugins=ServiceAccount",
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
            f"--service-account-key-file={p / 'sa.pub'}",
            f"--service-account-signing-key-file={p / 'sa.key'}",
            "--endpoint-reconciler-type=none",
            "--v=1",
            *self.apiserver_flags,
        ]
        self._apiserver = self._spawn("kube-apiserver", args)
        self._wait_ready()

    def snapshot(self, dest: pathlib.Path) -> pathlib.Path:
        """Save etcd's current state to ``dest`` (``etcdctl snapshot save``, the backup an
        operator takes of a running cluster)."""
        tool = _tool("etcdctl")
        proc = subprocess.run(
            [
                str(tool),
                f"--endpoints=http://127.0.0.1:{self.etcd_port}",
                "snapshot",
                "save",
                str(dest),
            ],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        if proc.returncode != 0:
            raise ControlPlaneError(
                f"{self.name}: etcdctl snapshot save failed: {proc.stderr[-2000:]}"
            )
        return dest

    def restore(self, snapshot: pathlib.Path) -> None:
        """Restart the plane from ``snapshot`` as an operator restores a backup: stop the
        kube-apiserver and etcd, replace etcd's data by ``etcdutl snapshot restore``, start
        both again on the same ports with the same PKI (clients keep working)."""
        tool = _tool("etcdutl")
        self.stop_apiserver()
        if self._etcd is not None:
            self._terminate(self._etcd)
            self._etcd = None
        data = self.dir / "etcd"
        shutil.rmtree(data, ignore_errors=True)
        peer = f"http://127.0.0.1:{self.etcd_peer_port}"
        proc = subprocess.run(
            [
                str(tool),
                "snapshot",
                "restore",
                str(snapshot),
                f"--data-dir={data}",
                "--name=default",
                f"--initial-cluster=default={peer}",
                f"--initial-advertise-peer-urls={peer}",
            ],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        if proc.returncode != 0:
            raise ControlPlaneError(
                f"{self.name}: etcdutl snapshot restore failed: {proc.stderr[-2000:]}"
            )
        self._start_etcd(binaries())
        self.start_apiserver()

    def etcdctl(self, *args: str, timeout: float = 120.0) -> subprocess.CompletedProcess[str]:
        """Run etcdctl (beside the other binaries) against this plane's etcd."""
        return subprocess.run(
            [str(_tool("etcdctl")), f"--endpoints=http://127.0.0.1:{self.etcd_port}", *args],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )

    def start_controller_manager(
        self,
        controllers: Sequence[str] = ("clusterrole-aggregation-controller",),
        attempts: int = 3,
    ) -> None:
        """Run kube-controller-manager against this plane with only ``controllers`` (by
        default the one that fills the aggregated ClusterRoles ``view``, ``edit`` and
        ``admin`` from the roles labelled ``rbac.authorization.k8s.io/aggregate-to-*``, which
        a plane without it leaves empty). It authenticates as the plane's admin, elects no
        leader, has no cloud provider, and serves its health on a free loopback port with the
        plane's serving certificate; it is stopped with the plane (``stop``). Raises
        ``ControlPlaneError`` with its log tail if it exits or is not healthy in time."""
        if self._controller_manager is not None:
            raise ControlPlaneError(f"{self.name}: kube-controller-manager already running")
        binary = _tool("kube-controller-manager")
        for attempt in range(1, attempts + 1):
            port = free_port()
            proc = self._spawn(
                "kube-controller-manager",
                [
                    str(binary),
                    f"--kubeconfig={self.kubeconfig}",
                    f"--controllers={','.join(controllers)}",
                    "--leader-elect=false",
                    "--bind-address=127.0.0.1",
                    f"--secure-port={port}",
                    f"--cert-dir={self.dir / 'controller-manager-certs'}",
                    f"--tls-cert-file={self._pki / 'serving.crt'}",
                    f"--tls-private-key-file={self._pki / 'serving.key'}",
                    "--v=1",
                ],
            )
            self._controller_manager = proc
            try:
                self._wait_healthy(proc, f"https://127.0.0.1:{port}/healthz")
                return
            except ControlPlaneError as e:
                self.stop_controller_manager()
                if "address already in use" not in str(e) or attempt == attempts:
                    raise
                proc.logpath.unlink(missing_ok=True)
                log.info("%s: kube-controller-manager's port taken, retrying", self.name)

    def stop_controller_manager(self) -> None:
        """Stop kube-controller-manager if it runs (``stop`` does it too)."""
        if self._controller_manager is not None:
            self._terminate(self._controller_manager)
            self._controller_manager = None

    def stop_apiserver(self) -> None:
        """Stop only the kube-apiserver (etcd keeps the data); for outage tests."""
        if self._apiserver is not None:
            self._terminate(self._apiserver)
            self._apiserver = None

    def stop(self) -> None:
        """Stop both processes and remove the folder. Safe to call twice."""
        self._stop_processes()
        _live.discard(self)
        if self._own_dir:
            shutil.rmtree(self.dir, ignore_errors=True)

    def _stop_processes(self) -> None:
        self.stop_controller_manager()
        self.stop_apiserver()
        if self._etcd is not None:
            self._terminate(self._etcd)
            self._etcd = None

    def __enter__(self) -> ControlPlane:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- clients -----------------------------------------------------------------------------

    def api_client(self) -> Any:
        """A new ``kubernetes.client.ApiClient`` for the admin user (system:masters)."""
        from tether.kube import gateway

        return gateway.from_kubeconfig(str(self.kubeconfig)).api_client

    def kubectl(self, *args: str, timeout: float = 120.0) -> subprocess.CompletedProcess[str]:
        """Run the built kubectl against this plane as admin; the caller checks returncode."""
        return subprocess.run(
            [str(binaries() / "kubectl"), f"--kubeconfig={self.kubeconfig}", *args],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )

    def issue_client_cert(
        self, user: str, groups: tuple[str, ...] = (), *, dest: pathlib.Path | None = None
    ) -> pathlib.Path:
        """Write a kubeconfig for another user (certificate CN=user, O=groups)."""
        assert self.client_ca is not None
        dest = dest or self.dir / f"kubeconfig-{user.replace(':', '_')}"
        pair = self.client_ca.issue(user, organizations=groups, client=True)
        return self._write_kubeconfig(dest, pair, user)

    # -- internals ---------------------------------------------------------------------------

    def _write_pki(self) -> None:
        self._pki.mkdir(parents=True, exist_ok=True)
        serving_ca = certs.CertificateAuthority.create(f"tether-{self.name}-serving-ca")
        serving_ca.write(self.ca_file, self._pki / "serving-ca.key")
        serving = serving_ca.issue(
            "kube-apiserver",
            dns_names=["localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc"],
            ip_addresses=["127.0.0.1", "10.0.0.1"],
            server=True,
        )
        serving.write(self._pki / "serving.crt", self._pki / "serving.key")
        self.client_ca = certs.CertificateAuthority.create(f"tether-{self.name}-client-ca")
        self.client_ca.write(self._pki / "client-ca.crt", self._pki / "client-ca.key")
        sa = serving_ca.issue("service-accounts")
        (self._pki / "sa.pub").write_bytes(
            sa.cert.public_key().public_bytes(
                serialization.Encoding.PEM,
                serialization.PublicFormat.SubjectPublicKeyInfo,
            )
        )
        sa.write(self._pki / "sa.crt", self._pki / "sa.key")
        admin = self.client_ca.issue("tether-admin", organizations=["system:masters"], client=True)
        self._admin_cert = self._pki / "admin.crt"
        self._admin_key = self._pki / "admin.key"
        admin.write(self._admin_cert, self._admin_key)
        self._write_kubeconfig(self.kubeconfig, admin, "tether-admin")

    def _write_kubeconfig(self, dest: pathlib.Path, pair: certs.KeyPair, user: str) -> pathlib.Path:
        import base64
        import json

        def b64(b: bytes) -> str:
            return base64.b64encode(b).decode()

        cfg = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": self.name,
                    "cluster": {
                        "server": self.url,
                        "certificate-authority-data": b64(self.ca_file.read_bytes()),
                    },
                }
            ],
            "users": [
                {
                    "name": user,
                    "user": {
                        "client-certificate-data": b64(pair.cert_pem),
                        "client-key-data": b64(pair.key_pem),
                    },
                }
            ],
            "contexts": [{"name": self.name, "context": {"cluster": self.name, "user": user}}],
            "current-context": self.name,
        }
        fd = os.open(dest, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            json.dump(cfg, f, indent=1)  # JSON is YAML; kubectl and the client read it
        return dest

    def _start_etcd(self, bins: pathlib.Path) -> None:
        peer = f"http://127.0.0.1:{self.etcd_peer_port}"
        client = f"http://127.0.0.1:{self.etcd_port}"
        args = [
            str(bins / "etcd"),
            "--name=default",
            f"--data-dir={self.dir / 'etcd'}",
            f"--listen-client-urls={client}",
            f"--advertise-client-urls={client}",
            f"--listen-peer-urls={peer}",
            f"--initial-advertise-peer-urls={peer}",
            f"--initial-cluster=default={peer}",
            "--unsafe-no-fsync=true",  # a test/demo plane: speed over power-loss durability
            "--log-level=warn",
        ]
        if self.quota_backend_bytes is not None:
            args.append(f"--quota-backend-bytes={self.quota_backend_bytes}")
        self._etcd = self._spawn("etcd", args)
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            self._check_alive(self._etcd)
            try:
                with urllib.request.urlopen(f"{client}/health", timeout=2) as r:
                    if r.status == 200:
                        return
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(0.1)
        raise ControlPlaneError(f"{self.name}: etcd not healthy in {START_TIMEOUT}s")

    def _spawn(self, name: str, args: list[str]) -> _Proc:
        logpath = self.dir / f"{name}.log"
        logfile = open(logpath, "ab")  # noqa: SIM115 - closed in _terminate
        popen = subprocess.Popen(
            args,
            stdout=logfile,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            # SIGKILL: kube-apiserver may hang in graceful shutdown when etcd dies with it
            preexec_fn=die_with_parent(signal.SIGKILL),
        )
        return _Proc(name, popen, logfile, logpath)

    def _check_alive(self, proc: _Proc) -> None:
        if proc.popen.poll() is not None:
            tail = proc.logpath.read_text(errors="replace")[-3000:]
            raise ControlPlaneError(
                f"{self.name}: {proc.name} exited with {proc.popen.returncode}; log tail:\n{tail}"
            )

    def _wait_ready(self) -> None:
        assert self._apiserver is not None
        ctx = ssl.create_default_context(cafile=str(self.ca_file))
        ctx.load_cert_chain(str(self._admin_cert), str(self._admin_key))
        deadline = time.monotonic() + START_TIMEOUT
        last = ""
        while time.monotonic() < deadline:
            self._check_alive(self._apiserver)
            try:
                with urllib.request.urlopen(f"{self.url}/readyz", context=ctx, timeout=2) as r:
                    if r.status == 200:
                        return
            except urllib.error.HTTPError as e:
                last = f"HTTP {e.code}"
            except (urllib.error.URLError, OSError) as e:
                last = str(e)
            time.sleep(0.2)
        raise ControlPlaneError(
            f"{self.name}: kube-apiserver not ready in {START_TIMEOUT}s ({last})"
        )

    def _wait_healthy(self, proc: _Proc, url: str) -> None:
        """Until ``url`` (a /healthz served with the plane's serving certificate) answers 200;
        ``proc`` must stay alive meanwhile."""
        ctx = ssl.create_default_context(cafile=str(self.ca_file))
        deadline = time.monotonic() + START_TIMEOUT
        last = ""
        while time.monotonic() < deadline:
            self._check_alive(proc)
            try:
                with urllib.request.urlopen(url, context=ctx, timeout=2) as r:
                    if r.status == 200:
                        return
            except urllib.error.HTTPError as e:
                last = f"HTTP {e.code}"
            except (urllib.error.URLError, OSError) as e:
                last = str(e)
            time.sleep(0.2)
        tail = proc.logpath.read_text(errors="replace")[-3000:]
        raise ControlPlaneError(
            f"{self.name}: {proc.name} not healthy in {START_TIMEOUT}s ({last}); log tail:\n{tail}"
        )

    @staticmethod
    def _terminate(proc: _Proc) -> None:
        stop_group(proc.popen, timeout=10)
        proc.logfile.close()


T = TypeVar("T")


def retry_busy(call: Callable[[], T], timeout: float = 60.0) -> T:
    """``call()``, retried while the apiserver answers 5xx: a freshly started plane on a
    busy machine may time out requests (504) for a moment."""
    from kubernetes.client.exceptions import ApiException

    deadline = time.monotonic() + timeout
    while True:
        try:
            return call()
        except ApiException as e:
            if e.status is None or e.status < 500 or time.monotonic() > deadline:
                raise
            time.sleep(0.5)


def install_crds(
    api: Any, *paths: pathlib.Path | dict[str, Any], timeout: float = 60.0
) -> list[str]:
    """Create the CustomResourceDefinitions in ``paths`` (files, or bodies as dicts; an
    existing one is kept) and wait until each is Established. ``api`` is a
    ``kubernetes.client.ApiClient``. Returns the CRD names."""
    import yaml
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    ext = client.ApiextensionsV1Api(api)
    names = []
    for path in paths:
        body: Any = path if isinstance(path, dict) else yaml.safe_load(path.read_text())
        try:
            retry_busy(functools.partial(ext.create_custom_resource_definition, body), timeout)
        except ApiException as e:
            if e.status != 409:
                raise
        names.append(str(body["metadata"]["name"]))
    deadline = time.monotonic() + timeout
    for name in names:
        while True:
            crd = retry_busy(functools.partial(ext.read_custom_resource_definition, name), timeout)
            conds = (crd.status.conditions if crd.status else None) or []
            if any(c.type == "Established" and c.status == "True" for c in conds):
                break
            if time.monotonic() > deadline:
                raise ControlPlaneError(f"CRD {name} not established within {timeout:.0f}s")
            time.sleep(0.2)
    return names


@contextlib.contextmanager
def planes(*names: str) -> Iterator[dict[str, ControlPlane]]:
    """Start several independent planes, stop them all on exit.

    Sequential on purpose: a child's PR_SET_PDEATHSIG fires when the *thread* that
    spawned it ends, so planes are spawned from the caller's thread (~3 s each)."""
    started: dict[str, ControlPlane] = {}
    try:
        for n in names:
            started[n] = ControlPlane(n).start()
        yield started
    finally:
        for p in started.values():
            p.stop()
