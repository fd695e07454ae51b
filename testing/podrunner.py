"""The pod runner: what a node (kubelet and kube-proxy) and the few controllers Tether's
manifests rely on would do, for the Deployments and Services of one namespace of a local
plane, with local processes instead of containers.

    runner = PodRunner(plane, "tether-system", workdir).start()
    runner.wait_available(timeout=120)
    print(runner.table())
    ...
    runner.stop()

For each Deployment it keeps ``replicas`` pods (a rolling replacement when the template
changes) and for each container of a pod one process:

* the command line from ``command``/``args`` and the image's ENTRYPOINT/CMD (read from the
  Dockerfile; ``tether`` found on the image's PATH, mapped to this checkout's venv);
* the environment from ``env`` (``value`` with ``$(VAR)``, ``valueFrom`` Secret, ConfigMap,
  fieldRef) and ``envFrom``, plus what the kubelet adds (``KUBERNETES_SERVICE_HOST/PORT``,
  ``HOSTNAME``) and the image's ENV;
* volumes from Secrets, ConfigMaps, emptyDir and projected sources, refreshed the way the
  kubelet refreshes them (an atomic ``..data`` switch), and the ServiceAccount's token from
  the plane's TokenRequest API mounted at /var/run/secrets/kubernetes.io/serviceaccount, so
  each process has exactly the RBAC of its manifest's ServiceAccount;
* its own mount and UTS namespaces (``testing.podexec``): the pod name as host name,
  volumes at their ``mountPath``, the root
  read-only when ``readOnlyRootFilesystem``, the pod's user and groups, no_new_privs;
* its own pod IP on loopback (127.128.0.0/9), so two replicas bind the same port;
* startup, liveness and readiness probes (httpGet, tcpSocket) polled on their periods; a
  failed liveness or startup probe restarts the container, an exit restarts it with the
  kubelet's backoff (``backoff_seconds`` doubling, at most 300 s);
* the Deployment's status written back (replicas, ready, available, conditions);
* a Pod object per running pod, as a kubelet keeps one: created from the template with
  ``nodeName`` set, its status written (phase, the loopback pod IP, the Ready and
  ContainersReady conditions from the readiness probes, container states) when it changes,
  deleted when the pod stops. So a Prometheus with ``kubernetes_sd_configs`` role pod
  discovers the pods as in a cluster (the API accepts loopback pod IPs, unlike
  Endpoints). Publishing is best effort: a refusal (PodSecurity, say) is logged and noted
  in ``notes``, the processes run regardless.

Each Service with a selector gets a TCP proxy on its ClusterIP (the local planes allocate
ClusterIPs on loopback) to its ready pods, which is what the kube-apiserver dials for a
webhook's service reference. (Endpoints are not written: the API refuses loopback
addresses in them.) Pods resolve
``<service>.<namespace>.svc`` and any ``hosts`` the caller gives (an ingress's DNS name)
through their /etc/hosts.

Each container runs in its own cgroup (``testing.cgroups``, v1 or v2) with its
``resources.limits``: memory as the cgroup's memory limit, CPU as a CFS quota. A container
the kernel OOM-kills reports ``lastState.terminated.reason: OOMKilled`` (exit code 137) and
is restarted with the backoff. Each container's line in ``notes`` says "resources: enforced
(cgroup v1: memory 768Mi, cpu 500m)", or "not enforced (why)" on a machine without writable
cgroups or with ``TETHER_PODRUNNER_LIMITS=off`` (logged as a warning at start).

A field the runner cannot honour raises ``podspec.Unsupported`` at start; fields that one
machine cannot enforce (resource requests, seccomp, topology spread) are listed in
``notes`` and in ``table()``, never dropped silently.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import dataclasses
import hashlib
import json
import logging
import os
import pathlib
import random
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator, Mapping
from typing import IO, Any

import urllib3
from kubernetes import client

from testing import cgroups, controlplane, podspec, probes, serviceproxy, volumes

log = logging.getLogger(__name__)

REPO = controlplane.REPO_ROOT
DOCKERFILE = REPO / "Dockerfile"
VENV_BIN = pathlib.Path(sys.executable).parent
MAX_BACKOFF = 300.0
TOKEN_SECONDS = 3607  # what the ServiceAccount admission plugin asks for
NODE = "local"

_ips_lock = threading.Lock()
_ips_used: set[str] = set()


def _pod_ip() -> str:
    """A free address in 127.128.0.0/9, unique in this process (random across processes)."""
    with _ips_lock:
        while True:
            ip = f"127.{random.randint(128, 254)}.{random.randint(0, 255)}.{random.randint(1, 254)}"
            if ip not in _ips_used:
                _ips_used.add(ip)
                return ip


def image_config() -> podspec.Image:
    return podspec.Image.from_dockerfile(DOCKERFILE.read_text(), (str(VENV_BIN),))


@dataclasses.dataclass
class Container:
    spec: dict[str, Any]
    log_path: pathlib.Path
    popen: subprocess.Popen[bytes] | None = None
    started_at: float = 0.0
    restarts: int = 0
    restart_at: float = 0.0
    waiting: str = "ContainerCreating"  # reason while not running
    last_exit: int | None = None
    last_reason: str | None = None  # lastState.terminated.reason: OOMKilled, Error, Completed
    crashes: int = 0  # exits since the last 10 minutes of running: the backoff's exponent
    delays: list[float] = dataclasses.field(default_factory=list)  # each restart's backoff
    group: cgroups.Group | None = None
    oom_at_start: int = 0
    probes: dict[str, probes.ProbeState] = dataclasses.field(default_factory=dict)

    @property
    def name(self) -> str:
        return str(self.spec["name"])

    @property
    def running(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    @property
    def started(self) -> bool:
        p = self.probes.get("startup")
        return self.running and (p is None or p.passed)

    @property
    def ready(self) -> bool:
        if not self.started:
            return False
        p = self.probes.get("readiness")
        return p is None or p.passed


@dataclasses.dataclass
class Pod:
    name: str
    deployment: str
    template_hash: str
    ip: str
    dir: pathlib.Path
    facts: podspec.PodFacts
    spec: dict[str, Any]
    containers: list[Container]
    deleting: bool = False
    published: bool = False  # its Pod object exists in the API
    status: dict[str, Any] | None = None  # the Pod status last written
    token_at: float = 0.0
    hosts_file: pathlib.Path | None = None
    automount: bool | None = None  # decided once, as at admission

    @property
    def ready(self) -> bool:
        return all(c.ready for c in self.containers)


class PodRunner:
    def __init__(
        self,
        plane: controlplane.ControlPlane,
        namespace: str,
        workdir: pathlib.Path,
        *,
        hosts: Mapping[str, str] | None = None,
        backoff_seconds: float = 10.0,
        sync_seconds: float = 0.5,
        refresh_seconds: float = 2.0,
        grace_cap_seconds: float = 30.0,
    ) -> None:
        self.plane, self.namespace = plane, namespace
        self.dir = workdir / f"pods-{plane.name}-{namespace}"
        self.hosts = dict(hosts or {})
        self.backoff, self.sync_seconds, self.refresh_seconds = (
            backoff_seconds,
            sync_seconds,
            refresh_seconds,
        )
        self.grace_cap = grace_cap_seconds
        self.image = image_config()
        self.api = plane.api_client()
        self.core, self.apps = client.CoreV1Api(self.api), client.AppsV1Api(self.api)
        self.pods: dict[str, Pod] = {}
        self.notes: dict[str, list[str]] = {}
        self.errors: dict[str, str] = {}
        self.proxies: dict[tuple[str, int], serviceproxy.Proxy] = {}
        self.endpoints: dict[str, list[tuple[str, Any, int, Any]]] = {}
        self._status: dict[str, dict[str, Any]] = {}
        self._services: list[Any] = []
        self._probes = concurrent.futures.ThreadPoolExecutor(8, thread_name_prefix="probe")
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.RLock()
        self._last_refresh = 0.0
        self.ca_pem = plane.ca_file.read_bytes()
        self.limits = cgroups.detect()
        if not self.limits.enforced:
            log.warning(
                "pod runner %s/%s: resources NOT enforced: %s",
                plane.name,
                namespace,
                self.limits.reason,
            )

    # -- lifecycle ---------------------------------------------------------------------

    def start(self) -> PodRunner:
        """Check every Deployment of the namespace (``Unsupported`` for a field the runner
        cannot honour) and start the sync loop."""
        self.dir.mkdir(parents=True, exist_ok=True)
        for p in (self.dir, *self.dir.parents):
            if p == pathlib.Path("/tmp") or p == pathlib.Path("/"):
                break
            p.chmod(p.stat().st_mode | 0o711)  # the pods' users traverse to their volumes
        deployments = self.apps.list_namespaced_deployment(self.namespace).items
        if not deployments:
            raise podspec.Invalid(
                f"no Deployment in namespace {self.namespace!r} of {self.plane.name}"
            )
        for d in deployments:
            self._check(self.api.sanitize_for_serialization(d))
        self._sync()
        self._thread = threading.Thread(
            target=self._loop, name=f"podrunner-{self.plane.name}", daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)
        with self._lock:
            pods = list(self.pods.values())
            for pod in pods:
                self._terminate(pod)
            self.pods.clear()
            for proxy in self.proxies.values():
                proxy.close()
            self.proxies.clear()
        self._probes.shutdown(wait=False, cancel_futures=True)
        self.api.close()

    def __enter__(self) -> PodRunner:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _check(self, d: dict[str, Any]) -> None:
        name = d["metadata"]["name"]
        spec = d["spec"]["template"]["spec"]
        notes = podspec.check_pod(spec, f"deployment {name}")
        prefix = f"{name} container "
        notes = [
            n for n in notes if not (n.startswith(f"deployment {prefix}") and ".resources: " in n)
        ]
        for c in spec["containers"]:
            try:
                limits = cgroups.limits_of(c)
            except cgroups.Invalid as e:
                raise podspec.Invalid(f"deployment {name} container {c['name']}: {e}") from None
            notes.append(f"deployment {prefix}{c['name']!r}.{self.limits.describe(limits)}")
            # registry/tether:tag or registry/tether@sha256:... (kustomize images: a digest)
            repo = c["image"].split("@", 1)[0].rsplit("/", 1)[-1].split(":", 1)[0]
            if repo != "tether":
                raise podspec.Unsupported(
                    f"deployment {name} container {c['name']}: image "
                    f"{c['image']!r}: the runner runs only Tether's image"
                )
        self.notes[name] = notes

    # -- what tests and the demo read ---------------------------------------------------

    def wait_available(self, timeout: float = 120.0, names: list[str] | None = None) -> None:
        """Until every (or each named) Deployment has all its replicas ready; the table
        and the last log lines of failing containers in the error otherwise."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self._lock:
                status = dict(self._status)
            want = names or list(status)
            if want and all(
                status.get(n, {}).get("availableReplicas", 0)
                >= status.get(n, {}).get("replicas", 1)
                and status.get(n, {}).get("updatedReplicas", 0)
                >= status.get(n, {}).get("replicas", 1)
                for n in want
            ):
                return
            time.sleep(0.2)
        raise TimeoutError(
            f"deployments not available within {timeout:.0f}s:\n{self.table()}\n{self.tail_logs()}"
        )

    def wait_stopped(self, deployment: str, timeout: float = 60.0) -> None:
        """Until no container of the Deployment's pods runs any more (after a scale to zero:
        a pod being deleted still serves until its process has exited)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self._lock:
                alive = [
                    p.name
                    for p in self.pods.values()
                    if p.deployment == deployment and any(c.running for c in p.containers)
                ]
            if not alive:
                return
            time.sleep(0.2)
        raise TimeoutError(f"pods of {deployment} still running after {timeout:.0f}s: {alive}")

    def status(self, deployment: str) -> dict[str, Any]:
        with self._lock:
            return dict(self._status.get(deployment, {}))

    def table(self) -> str:
        """One line per Deployment and per pod: readiness, restarts, what is not enforced."""
        lines = []
        with self._lock:
            for name in sorted(self._status):
                st = self._status[name]
                lines.append(
                    f"deployment/{name}: {st.get('readyReplicas', 0)}/{st.get('replicas', 0)} "
                    f"ready, {st.get('availableReplicas', 0)} available"
                )
                for pod in sorted(
                    (p for p in self.pods.values() if p.deployment == name), key=lambda p: p.name
                ):
                    cs = ", ".join(
                        f"{c.name} {'ready' if c.ready else 'running' if c.running else c.waiting}"
                        f" (restarts {c.restarts}"
                        + (f", last {c.last_reason}" if c.last_reason else "")
                        + ")"
                        for c in pod.containers
                    )
                    lines.append(f"  pod/{pod.name} {pod.ip}: {cs}")
                if name in self.errors:
                    lines.append(f"  error: {self.errors[name]}")
                lines.extend(f"  note: {n}" for n in self.notes.get(name, []))
        return "\n".join(lines)

    def pods_of(self, deployment: str) -> list[Pod]:
        with self._lock:
            return sorted(
                (p for p in self.pods.values() if p.deployment == deployment and not p.deleting),
                key=lambda p: p.name,
            )

    def logs(self, deployment: str, container: str | None = None) -> str:
        out = []
        for pod in self.pods_of(deployment):
            for c in pod.containers:
                if container in (None, c.name) and c.log_path.exists():
                    out.append(c.log_path.read_text(errors="replace"))
        return "\n".join(out)

    def tail_logs(self, lines: int = 15) -> str:
        out = []
        with self._lock:
            for pod in self.pods.values():
                for c in pod.containers:
                    if not c.ready and c.log_path.exists():
                        tail = c.log_path.read_text(errors="replace").splitlines()[-lines:]
                        out.append(f"--- {pod.name}/{c.name} ---\n" + "\n".join(tail))
        return "\n".join(out)

    def service_address(self, service: str, port: int | str) -> tuple[str, int]:
        """Where a Service's port is served on this machine (its ClusterIP)."""
        svc: Any = self.core.read_namespaced_service(service, self.namespace)
        for p in svc.spec.ports:
            if port in (p.port, p.name):
                return str(svc.spec.cluster_ip), int(p.port)
        raise KeyError(f"service {service} has no port {port!r}")

    def kill(self, deployment: str, container: str, sig: int = signal.SIGKILL) -> None:
        """Kill one container of the first pod (a crash): the runner restarts it."""
        pod = self.pods_of(deployment)[0]
        c = next(c for c in pod.containers if c.name == container)
        if c.popen is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(c.popen.pid, sig)

    # -- the loop ----------------------------------------------------------------------

    def _loop(self) -> None:
        while not self._stop.wait(self.sync_seconds):
            try:
                self._sync()
            except (client.ApiException, OSError, urllib3.exceptions.HTTPError) as e:
                # the loop outlives a plane hiccup, as a kubelet does: one line, no trace
                log.warning(
                    "pod runner %s/%s: sync failed: %s",
                    self.plane.name,
                    self.namespace,
                    str(e).splitlines()[0][:300],
                )
            except Exception:
                log.exception("pod runner %s/%s: sync failed", self.plane.name, self.namespace)

    def _sync(self) -> None:
        with self._lock:
            deployments = [
                self.api.sanitize_for_serialization(d)
                for d in self.apps.list_namespaced_deployment(self.namespace).items
            ]
            self._services = self.core.list_namespaced_service(self.namespace).items
            look = self._lookups()
            now = time.monotonic()
            refresh = now - self._last_refresh >= self.refresh_seconds
            if refresh:
                self._last_refresh = now
            seen = set()
            for d in deployments:
                seen.add(d["metadata"]["name"])
                self._reconcile(d, look)
            for pod in list(self.pods.values()):
                if pod.deployment not in seen:
                    self._terminate(pod)
                    del self.pods[pod.name]
                    continue
                for c in pod.containers:
                    self._container(pod, c, look)
                if refresh:
                    try:
                        self._refresh_volumes(pod, look)
                    except podspec.Invalid as e:  # a kubelet keeps what runs, reports the rest
                        for c in pod.containers:
                            if not c.running:
                                c.waiting = f"CreateContainerConfigError: {e}"
            for d in deployments:
                self._write_status(d)
            for pod in list(self.pods.values()):
                self._publish_status(pod)
            self._write_endpoints()

    def _lookups(self) -> podspec.Lookups:
        secrets: dict[str, dict[str, bytes] | None] = {}
        cms: dict[str, dict[str, bytes] | None] = {}

        def secret(name: str) -> dict[str, bytes] | None:
            if name not in secrets:
                try:
                    s: Any = self.core.read_namespaced_secret(name, self.namespace)
                    secrets[name] = podspec.decode(s.data, binary=True)
                except client.ApiException as e:
                    if e.status != 404:
                        raise
                    secrets[name] = None
            return secrets[name]

        def config_map(name: str) -> dict[str, bytes] | None:
            if name not in cms:
                try:
                    c: Any = self.core.read_namespaced_config_map(name, self.namespace)
                    cms[name] = {
                        **podspec.decode(c.data, binary=False),
                        **podspec.decode(c.binary_data, binary=True),
                    }
                except client.ApiException as e:
                    if e.status != 404:
                        raise
                    cms[name] = None
            return cms[name]

        return podspec.Lookups(secret, config_map)

    # -- pods of a Deployment -----------------------------------------------------------

    def _reconcile(self, d: dict[str, Any], look: podspec.Lookups) -> None:
        name = d["metadata"]["name"]
        if name not in self.notes:
            try:
                self._check(d)
            except (podspec.Unsupported, podspec.Invalid) as e:
                self.errors[name] = str(e)
                return
        replicas = d["spec"].get("replicas", 1)
        template = d["spec"]["template"]
        h = _template_hash(d)
        pods = [p for p in self.pods.values() if p.deployment == name and not p.deleting]
        current = [p for p in pods if p.template_hash == h]
        old = [p for p in pods if p.template_hash != h]
        surge, unavailable = _rolling(d["spec"], replicas)
        if len(current) > replicas:
            for p in sorted(current, key=lambda p: p.ready)[: len(current) - replicas]:
                self._delete(p)
        else:
            while len(current) < replicas and len(pods) < replicas + surge:
                pod = self._create(d, template, h, look)
                current.append(pod)
                pods.append(pod)
        ready = sum(p.ready for p in pods)
        for p in sorted(old, key=lambda p: p.ready):
            if not p.ready or ready - 1 >= replicas - unavailable:
                ready -= p.ready
                self._delete(p)

    def _create(
        self, d: dict[str, Any], template: dict[str, Any], h: str, look: podspec.Lookups
    ) -> Pod:
        name = d["metadata"]["name"]
        pod_name = f"{name}-{h[:8]}-{uuid.uuid4().hex[:5]}"
        spec = template["spec"]
        ip = _pod_ip()
        facts = podspec.PodFacts(
            name=pod_name,
            namespace=self.namespace,
            uid=str(uuid.uuid4()),
            node=NODE,
            pod_ip=ip,
            host_ip="127.0.0.1",
            service_account=spec.get("serviceAccountName")
            or spec.get("serviceAccount")
            or "default",
            labels=template["metadata"].get("labels") or {},
            annotations=template["metadata"].get("annotations") or {},
        )
        pdir = self.dir / pod_name
        (pdir / "logs").mkdir(parents=True)
        pdir.chmod(0o755)
        containers = [Container(c, pdir / "logs" / f"{c['name']}.log") for c in spec["containers"]]
        for c in containers:
            for kind in ("startup", "liveness", "readiness"):
                if c.spec.get(f"{kind}Probe"):
                    c.probes[kind] = probes.ProbeState(c.spec[f"{kind}Probe"], kind)
        pod = Pod(pod_name, name, h, ip, pdir, facts, spec, containers)
        self.pods[pod_name] = pod
        log.info("pod runner: %s/%s created (%s)", self.namespace, pod_name, ip)
        self._publish(pod, d)
        try:
            self._refresh_volumes(pod, look)
        except (podspec.Invalid, client.ApiException) as e:
            for c in containers:
                c.waiting = f"CreateContainerConfigError: {e}"
        return pod

    def _delete(self, pod: Pod) -> None:
        pod.deleting = True
        threading.Thread(target=self._remove, args=(pod,), daemon=True).start()

    def _remove(self, pod: Pod) -> None:
        self._terminate(pod)
        with self._lock:
            self.pods.pop(pod.name, None)

    def _terminate(self, pod: Pod) -> None:
        grace = min(float(pod.spec.get("terminationGracePeriodSeconds", 30)), self.grace_cap)
        running = [c for c in pod.containers if c.running]
        for c in running:
            assert c.popen is not None
            with contextlib.suppress(ProcessLookupError):
                os.killpg(c.popen.pid, signal.SIGTERM)
        deadline = time.monotonic() + grace
        for c in running:
            assert c.popen is not None
            try:
                c.popen.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(c.popen.pid, signal.SIGKILL)
                c.popen.wait(timeout=10)
        for c in pod.containers:
            if c.group is not None:
                try:
                    peak = c.group.peak_memory()
                    line = (
                        f"[pod runner] {pod.name}/{c.name}: peak memory "
                        f"{'unknown' if peak is None else f'{peak / 2**20:.0f} MiB'} "
                        f"({c.group.limits.text})"
                    )
                    log.info("%s", line)
                    with open(c.log_path, "a") as f:
                        f.write(line + "\n")
                    c.group.remove()
                except OSError as e:
                    log.warning("pod runner: %s/%s: cgroup not removed: %s", pod.name, c.name, e)
        self._unpublish(pod)

    # -- the Pod objects ----------------------------------------------------------------

    def _publish(self, pod: Pod, d: Mapping[str, Any]) -> None:
        """Create the pod's Pod object (what the scheduler and kubelet leave in the API)."""
        body: Any = pod_object(pod, d)
        try:
            self.core.create_namespaced_pod(self.namespace, body)
            pod.published = True
        except client.ApiException as e:
            if e.status == 409:  # a leftover of an earlier run under the same (random) name
                pod.published = True
                return
            reason = _api_reason(e)
            self.notes.setdefault(pod.deployment, [])
            note = f"Pod objects not published: {reason}"
            if note not in self.notes[pod.deployment]:
                self.notes[pod.deployment].append(note)
            log.warning(
                "pod runner: %s/%s: Pod object refused: %s", self.namespace, pod.name, reason
            )

    def _publish_status(self, pod: Pod) -> None:
        if not pod.published or pod.deleting:
            return
        status = pod_status(pod)
        if status == pod.status:
            return
        try:
            self.core.patch_namespaced_pod_status(pod.name, self.namespace, {"status": status})
            pod.status = status
        except client.ApiException as e:
            if e.status == 404:  # deleted by someone else: a kubelet would recreate it; so do we
                pod.published = False
                return
            log.warning(
                "pod runner: %s/%s: Pod status refused: %s",
                self.namespace,
                pod.name,
                _api_reason(e),
            )

    def _unpublish(self, pod: Pod) -> None:
        if not pod.published:
            return
        pod.published = False
        try:
            self.core.delete_namespaced_pod(pod.name, self.namespace, grace_period_seconds=0)
        except client.ApiException as e:
            if e.status != 404:
                log.warning(
                    "pod runner: %s/%s: Pod delete failed: %s",
                    self.namespace,
                    pod.name,
                    _api_reason(e),
                )
        except (OSError, urllib3.exceptions.HTTPError) as e:  # the plane is already gone
            log.warning(
                "pod runner: %s/%s: Pod delete failed: %s", self.namespace, pod.name, str(e)[:200]
            )

    # -- one container ------------------------------------------------------------------

    def _container(self, pod: Pod, c: Container, look: podspec.Lookups) -> None:
        if pod.deleting:
            return
        now = time.monotonic()
        if c.popen is not None and c.popen.poll() is not None:
            c.last_exit = c.popen.returncode
            c.popen = None
            c.last_reason = _reason(c)
            if c.group is not None:  # what the container started dies with it, as in a pod
                c.group.kill()
            ran = now - c.started_at
            if ran > 600:  # the kubelet forgets a backoff after 10 minutes of running
                c.crashes = 0
            delay = 0.0 if ran > 600 else backoff_delay(self.backoff, c.crashes)
            c.crashes += 1
            c.delays.append(delay)
            c.restart_at = now + delay
            c.waiting = f"CrashLoopBackOff ({c.last_reason}, exit {c.last_exit})"
            c.restarts += 1
            for p in c.probes.values():
                p.passed, p.successes, p.failures = False, 0, 0
            log.info(
                "pod runner: %s/%s exited %s (%s), restart in %.0fs",
                pod.name,
                c.name,
                c.last_exit,
                c.last_reason,
                delay,
            )
        if c.popen is None:
            if now >= c.restart_at and not c.waiting.startswith("CreateContainerConfigError"):
                self._run(pod, c, look)
            elif c.waiting.startswith("CreateContainerConfigError") and now >= c.restart_at:
                c.restart_at = now + 2.0
                try:
                    self._refresh_volumes(pod, look)
                    c.waiting = "ContainerCreating"
                except (podspec.Invalid, client.ApiException) as e:
                    c.waiting = f"CreateContainerConfigError: {e}"
            return
        self._probe(pod, c, now)

    def _run(self, pod: Pod, c: Container, look: podspec.Lookups) -> None:
        try:
            spec = self._exec_spec(pod, c, look)
        except podspec.Invalid as e:
            c.waiting = f"CreateContainerConfigError: {e}"
            c.restart_at = time.monotonic() + 2.0
            return
        spec_file = pod.dir / f"{c.name}.exec.json"
        spec_file.write_text(json.dumps(spec))
        spec_file.chmod(0o600)
        argv = [
            "unshare",
            "--mount",
            "--uts",
            "--propagation",
            "private",
            "--",
            sys.executable,
            "-m",
            "testing.podexec",
            str(spec_file),
        ]
        if self.limits.enforced:
            try:
                if c.group is None:
                    c.group = cgroups.Group(
                        self.limits, f"{pod.name}_{c.name}", cgroups.limits_of(c.spec)
                    )
                c.oom_at_start = c.group.oom_kills()
            except OSError as e:  # a kubelet reports a container it cannot create
                c.waiting = f"CreateContainerError: cgroup: {e}"
                c.restart_at = time.monotonic() + 2.0
                return
            argv = c.group.wrap(argv)
        logf: IO[bytes]
        with open(c.log_path, "ab") as logf:
            c.popen = subprocess.Popen(
                argv,
                cwd=REPO,
                env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "PYTHONPATH": str(REPO)},
                stdout=logf,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        c.started_at = time.monotonic()
        c.waiting = ""
        for p in c.probes.values():
            p.next_at = c.started_at + float(p.spec.get("initialDelaySeconds", 0))

    def _exec_spec(self, pod: Pod, c: Container, look: podspec.Lookups) -> dict[str, Any]:
        base = dict(self.image.env)
        base.update(
            {
                "PATH": ":".join((*self.image.path, "/usr/local/bin", "/usr/bin", "/bin")),
                "HOSTNAME": pod.name,
                "HOME": "/",
                "KUBERNETES_SERVICE_HOST": "127.0.0.1",
                "KUBERNETES_SERVICE_PORT": str(self.plane.port),
            }
        )
        env = podspec.environment(c.spec, pod.facts, look, base)
        argv = podspec.command_line(c.spec, self.image, env)
        psc = pod.spec.get("securityContext") or {}
        csc = c.spec.get("securityContext") or {}
        uid = csc.get("runAsUser", psc.get("runAsUser", self.image.user))
        gid = csc.get(
            "runAsGroup",
            psc.get("runAsGroup", self.image.group if self.image.group is not None else uid),
        )
        if csc.get("runAsNonRoot", psc.get("runAsNonRoot")) and not uid:
            raise podspec.Invalid(
                f"container {c.name!r} has runAsNonRoot and image will run as root"
            )
        groups = [
            g for g in [psc.get("fsGroup"), *(psc.get("supplementalGroups") or [])] if g is not None
        ]
        mounts = [
            {
                "source": str(pod.dir / "volumes" / m["name"] / m.get("subPath", "")),
                "target": m["mountPath"],
                "readOnly": bool(m.get("readOnly")),
            }
            for m in c.spec.get("volumeMounts") or []
        ]
        if self._automount(pod):
            mounts.append(
                {
                    "source": str(pod.dir / "volumes" / "kube-api-access"),
                    "target": podspec.SERVICE_ACCOUNT_DIR,
                    "readOnly": True,
                }
            )
        return {
            "argv": argv,
            "env": env,
            "mounts": mounts,
            "hostname": pod.name,
            "hosts": str(pod.hosts_file) if pod.hosts_file else None,
            "readOnlyRoot": bool(csc.get("readOnlyRootFilesystem")),
            "uid": uid,
            "gid": gid,
            "groups": groups if uid is not None else None,
            "noNewPrivs": csc.get("allowPrivilegeEscalation") is False,
            "workdir": c.spec.get("workingDir") or self.image.workdir,
            "expose": [sys.base_prefix, sys.prefix, str(REPO)],
        }

    def _automount(self, pod: Pod) -> bool:
        """Whether the pod gets its ServiceAccount's token: read once per pod (the
        ServiceAccount admission plugin decides when a pod is created), not per refresh."""
        if pod.automount is None:
            if "automountServiceAccountToken" in pod.spec:
                pod.automount = bool(pod.spec["automountServiceAccountToken"])
            else:
                try:
                    sa = self.core.read_namespaced_service_account(
                        pod.facts.service_account, self.namespace
                    )
                except client.ApiException as e:
                    if e.status == 404:
                        raise podspec.Invalid(
                            f"serviceaccount {pod.facts.service_account!r} not found"
                        ) from None
                    raise
                pod.automount = sa.automount_service_account_token is not False
        return pod.automount

    # -- volumes ------------------------------------------------------------------------

    def _token(self, pod: Pod, audience: str, seconds: int) -> str:
        spec = client.V1TokenRequestSpec(
            audiences=[audience] if audience else [], expiration_seconds=max(600, seconds)
        )
        body = client.AuthenticationV1TokenRequest(spec=spec)
        tr: Any = self.core.create_namespaced_service_account_token(
            pod.facts.service_account, self.namespace, body
        )
        return str(tr.status.token)

    def _refresh_volumes(self, pod: Pod, look: podspec.Lookups) -> None:
        """Write (or rewrite when changed) every volume of the pod; tokens are asked for
        again at 80% of their lifetime, like the kubelet does."""
        now = time.monotonic()
        fresh_token = now >= pod.token_at
        root = pod.dir / "volumes"
        fs_group = (pod.spec.get("securityContext") or {}).get("fsGroup")
        for vol in pod.spec.get("volumes") or []:
            vdir = root / vol["name"]
            if "emptyDir" in vol:
                if not vdir.exists():
                    vdir.mkdir(parents=True)
                    vdir.chmod(0o777)
                continue
            if "projected" in vol and not fresh_token and vdir.exists():
                continue
            files = podspec.volume_files(
                vol, pod.facts, look, lambda aud, s: self._token(pod, aud, s), self.ca_pem
            )
            assert files is not None
            volumes.atomic_write(vdir, files, fs_group)
        if self._automount(pod) and (fresh_token or not (root / "kube-api-access").exists()):
            volumes.atomic_write(
                root / "kube-api-access",
                podspec.service_account_files(
                    self._token(pod, "", TOKEN_SECONDS), self.ca_pem, self.namespace
                ),
                fs_group,
            )
        if fresh_token:
            pod.token_at = now + 0.8 * 600
        self._write_hosts(pod)

    def _write_hosts(self, pod: Pod) -> None:
        lines = ["127.0.0.1\tlocalhost", f"{pod.ip}\t{pod.name}"]
        for svc in self._services:
            ip = svc.spec.cluster_ip
            if ip and ip != "None":
                n, ns = svc.metadata.name, svc.metadata.namespace
                lines.append(f"{ip}\t{n}.{ns}.svc.cluster.local {n}.{ns}.svc {n}.{ns} {n}")
        lines += [f"{ip}\t{host}" for host, ip in sorted(self.hosts.items())]
        text = "\n".join(lines) + "\n"
        if pod.hosts_file is None:
            pod.hosts_file = pod.dir / "hosts"
            pod.hosts_file.write_text(text)
            pod.hosts_file.chmod(0o644)
        elif pod.hosts_file.read_text() != text:
            with open(pod.hosts_file, "r+") as f:  # in place: the file is bind-mounted
                f.write(text)
                f.truncate()

    # -- probes -------------------------------------------------------------------------

    def _probe(self, pod: Pod, c: Container, now: float) -> None:
        order = (
            ["startup"]
            if "startup" in c.probes and not c.probes["startup"].passed
            else ["liveness", "readiness"]
        )
        for kind in order:
            p = c.probes.get(kind)
            if p is None:
                continue
            if p.inflight is not None and p.inflight.done():
                ok = p.inflight.result()
                p.inflight = None
                self._probe_result(pod, c, p, ok)
                if not c.running:
                    return
            if p.inflight is None and now >= p.next_at:
                p.next_at = now + float(p.spec.get("periodSeconds", 10))
                p.inflight = self._probes.submit(probes.check, p, c.spec, pod.ip)

    def _probe_result(self, pod: Pod, c: Container, p: probes.ProbeState, ok: bool) -> None:
        if ok:
            p.successes += 1
            p.failures = 0
            if p.successes >= int(p.spec.get("successThreshold", 1)):
                if not p.passed:
                    log.info("pod runner: %s/%s %s probe passed", pod.name, c.name, p.kind)
                p.passed = True
                if p.kind == "startup":  # liveness and readiness begin now
                    for other in c.probes.values():
                        if other is not p:
                            other.next_at = time.monotonic()
            return
        p.successes = 0
        p.failures += 1
        if p.failures < int(p.spec.get("failureThreshold", 3)):
            return
        if p.kind == "readiness":
            p.passed = False
            return
        log.info(
            "pod runner: %s/%s %s probe failed %d times (%s): restarting",
            pod.name,
            c.name,
            p.kind,
            p.failures,
            p.last_error,
        )
        with open(c.log_path, "a") as f:
            f.write(
                f"[pod runner] {p.kind} probe failed {p.failures} times "
                f"({p.last_error}): restarting\n"
            )
        if c.popen is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(c.popen.pid, signal.SIGKILL)
            c.popen.wait(timeout=10)

    # -- status and Services ------------------------------------------------------------

    def _write_status(self, d: dict[str, Any]) -> None:
        name = d["metadata"]["name"]
        replicas = d["spec"].get("replicas", 1)
        pods = [p for p in self.pods.values() if p.deployment == name and not p.deleting]
        h = _template_hash(d)
        ready = sum(p.ready for p in pods)
        updated = sum(p.template_hash == h for p in pods)
        _, unavailable = _rolling(d["spec"], replicas)
        available = ready >= replicas - unavailable
        status = {
            "observedGeneration": d["metadata"].get("generation", 1),
            "replicas": len(pods),
            "updatedReplicas": updated,
            "readyReplicas": ready,
            "availableReplicas": ready,
            "unavailableReplicas": max(0, replicas - ready),
            "conditions": [
                {
                    "type": "Available",
                    "status": "True" if available else "False",
                    "reason": "MinimumReplicasAvailable"
                    if available
                    else "MinimumReplicasUnavailable",
                    "message": f"{ready} of {replicas} replicas ready (pod runner)",
                },
                {
                    "type": "Progressing",
                    "status": "True",
                    "reason": "NewReplicaSetAvailable"
                    if updated == replicas and ready == replicas
                    else "ReplicaSetUpdated",
                    "message": f"{updated} of {replicas} replicas updated (pod runner)",
                },
            ],
        }
        if self._status.get(name) == status:
            return
        self._status[name] = status
        try:
            self.apps.patch_namespaced_deployment_status(name, self.namespace, {"status": status})
        except client.ApiException as e:
            if e.status != 404:
                raise

    def _write_endpoints(self) -> None:
        """The ready pods behind each Service, given to its proxies. Not written to the API
        as Endpoints or EndpointSlices: it refuses loopback addresses (422)."""
        for svc in self._services:
            selector = svc.spec.selector
            if not selector:
                continue
            name = svc.metadata.name
            ready = []
            for pod in self.pods.values():
                labels = pod.facts.labels
                if (
                    pod.deleting
                    or not pod.ready
                    or any(labels.get(k) != v for k, v in selector.items())
                ):
                    continue
                for sp in svc.spec.ports:
                    target = sp.target_port if sp.target_port is not None else sp.port
                    for c in pod.containers:
                        try:
                            num = podspec.port_number(c.spec, target)
                        except podspec.Invalid:
                            continue
                        if isinstance(target, int) or any(
                            p.get("name") == target for p in c.spec.get("ports") or []
                        ):
                            ready.append((pod.ip, sp.name, num, sp.port))
                            break
            key = sorted(ready)
            self._ensure_proxies(svc)
            if self.endpoints.get(name) == key:
                continue
            self.endpoints[name] = key
            for proxy in self.proxies.values():
                if proxy.service == name:
                    proxy.backends = [(ip, num) for ip, _, num, port in key if port == proxy.port]

    def _ensure_proxies(self, svc: Any) -> None:
        ip = svc.spec.cluster_ip
        if not ip or ip == "None":
            return
        for sp in svc.spec.ports:
            if (ip, sp.port) not in self.proxies:
                self.proxies[(ip, sp.port)] = serviceproxy.Proxy(
                    svc.metadata.name, ip, int(sp.port)
                )


def pod_object(pod: Pod, d: Mapping[str, Any]) -> dict[str, Any]:
    """The Pod object of a running pod: the Deployment's template, bound to the node."""
    template = d["spec"]["template"]
    meta = d["metadata"]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": pod.name,
            "namespace": pod.facts.namespace,
            "labels": {
                **(template["metadata"].get("labels") or {}),
                "pod-template-hash": pod.template_hash[:10],
            },
            "annotations": dict(template["metadata"].get("annotations") or {}),
            "ownerReferences": [
                {
                    "apiVersion": "apps/v1",
                    "kind": "Deployment",
                    "name": meta["name"],
                    "uid": meta["uid"],
                    "controller": True,
                }
            ]
            if meta.get("uid")
            else [],
        },
        "spec": {**pod.spec, "nodeName": NODE},
    }


def pod_status(pod: Pod) -> dict[str, Any]:
    """What a kubelet reports: phase, IPs, conditions, one status per container (no times:
    a status is written only when it changes)."""
    running = [c for c in pod.containers if c.running]
    ready = pod.ready
    containers = []
    for c in pod.containers:
        state: dict[str, Any] = (
            {"running": {}}
            if c.running
            else {"waiting": {"reason": c.waiting.split(":")[0].split(" ")[0]}}
        )
        cs = {
            "name": c.name,
            "image": c.spec.get("image", ""),
            "imageID": "",
            "ready": c.ready,
            "started": c.started,
            "restartCount": c.restarts,
            "state": state,
        }
        if c.last_reason is not None and c.last_exit is not None:
            code = 128 - c.last_exit if c.last_exit < 0 else c.last_exit  # killed by a signal
            cs["lastState"] = {"terminated": {"exitCode": code, "reason": c.last_reason}}
        containers.append(cs)

    def cond(kind: str, ok: bool) -> dict[str, str]:
        return {"type": kind, "status": "True" if ok else "False"}

    return {
        "phase": "Running" if running else "Pending",
        "hostIP": pod.facts.host_ip,
        "hostIPs": [{"ip": pod.facts.host_ip}],
        "podIP": pod.ip,
        "podIPs": [{"ip": pod.ip}],
        "conditions": [
            cond("PodScheduled", True),
            cond("Initialized", True),
            cond("ContainersReady", ready),
            cond("Ready", ready),
        ],
        "containerStatuses": containers,
    }


def backoff_delay(base: float, crashes: int) -> float:
    """The kubelet's restart backoff: ``base`` (10 s) doubling per crash, at most 5 min."""
    return float(min(MAX_BACKOFF, base * 2 ** min(crashes, 10)))


def _reason(c: Container) -> str:
    """Why a container ended, as a kubelet says it: OOMKilled when the kernel's OOM killer
    killed in its cgroup since it started."""
    if c.group is not None:
        try:
            if c.group.oom_kills() > c.oom_at_start:
                return "OOMKilled"
        except OSError:
            pass
    return "Completed" if c.last_exit == 0 else "Error"


def _api_reason(e: client.ApiException) -> str:
    try:
        return str(json.loads(e.body or "{}").get("message") or e.reason)[:300]
    except ValueError:
        return f"{e.status} {e.reason}"


def _template_hash(d: Mapping[str, Any]) -> str:
    """Names a Deployment's pod template (pod-template-hash): pods of another are replaced."""
    return hashlib.sha256(json.dumps(d["spec"]["template"], sort_keys=True).encode()).hexdigest()[
        :10
    ]


def _rolling(spec: Mapping[str, Any], replicas: int) -> tuple[int, int]:
    """maxSurge and maxUnavailable as pod counts (RollingUpdate, defaults 25%: surge rounds
    up, unavailable down); Recreate is no surge and all unavailable."""
    strategy = spec.get("strategy") or {}
    if strategy.get("type") == "Recreate":
        return 0, replicas
    ru = strategy.get("rollingUpdate") or {}

    def count(v: Any, up: bool) -> int:
        if isinstance(v, str) and v.endswith("%"):
            f = replicas * int(v[:-1]) / 100
            return int(-(-f // 1)) if up else int(f)
        return int(v)

    return count(ru.get("maxSurge", "25%"), True), count(ru.get("maxUnavailable", "25%"), False)


@contextlib.contextmanager
def running(
    plane: controlplane.ControlPlane, namespace: str, workdir: pathlib.Path, **kw: Any
) -> Iterator[PodRunner]:
    runner = PodRunner(plane, namespace, workdir, **kw).start()
    try:
        yield runner
    finally:
        runner.stop()
