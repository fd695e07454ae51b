"""The listener's test environment: PKI, the RuntimeConfigMap and RuntimeDelivery CRDs, a KCP
namespace with Kyma CRs, a least-privilege kubeconfig, the listener under gunicorn as a subprocess,
and runtimes with client certificates. Used by the listener, poller and webhook tests and by the
benchmarks."""

from __future__ import annotations

import dataclasses
import datetime
import os
import pathlib
import subprocess
import sys
import time
import uuid
from typing import Any

import requests
import yaml
from kubernetes import client

from listener.storage import records
from testing import cgroups, controlplane, watchenv
from tether.base import certs
from tether.kube import apitypes
from tether.wire import changes, conversion

REPO = controlplane.REPO_ROOT


CRD_FILE = REPO / "manifests" / "kcp" / "crds" / "tether.kyma-project.io_runtimeconfigmaps.yaml"
DELIVERY_CRD_FILE = (
    REPO / "manifests" / "kcp" / "crds" / "tether.kyma-project.io_runtimedeliveries.yaml"
)
SUMMARY_CRD_FILE = (
    REPO / "manifests" / "kcp" / "crds" / "tether.kyma-project.io_runtimestatesummaries.yaml"
)
CRD_FILES = (
    CRD_FILE,
    DELIVERY_CRD_FILE,
    SUMMARY_CRD_FILE,
)  # what the listener writes (manifests/kcp/crds)


RBAC_FILE = REPO / "manifests" / "kcp" / "listener" / "rbac.yaml"
# the listener's Role in the heartbeat namespace (manifests: tether-heartbeats)
HEARTBEATS_RBAC_FILE = REPO / "manifests" / "kcp" / "listener" / "heartbeats.yaml"
JANITOR_RBAC_FILE = REPO / "manifests" / "kcp" / "janitor" / "rbac.yaml"
# the listener container's limits in its Deployment (memory 768Mi), for abuse tests' listeners
LISTENER_LIMITS = cgroups.manifest_limits(
    REPO / "manifests" / "kcp" / "listener" / "deployment.yaml", "listener"
)


# every env's KCP namespace holds the Watch of every ConfigMap (watchenv.all_configmaps), the
# scope before Watches: the compat Watch that v1 records are stored under
COMPAT_WATCH = "all-configmaps"
LISTENER_USER = "tether-listener-test"
JANITOR_USER = "tether-janitor-test"


@dataclasses.dataclass
class Env:
    dir: pathlib.Path
    namespace: str
    kcp: controlplane.ControlPlane
    api: client.ApiClient
    runtime_ca: certs.CertificateAuthority
    foreign_ca: certs.CertificateAuthority
    client_ca_file: pathlib.Path
    server_ca_file: pathlib.Path
    server_cert: pathlib.Path
    server_key: pathlib.Path
    kubeconfig: pathlib.Path  # least-privilege listener user
    janitor_kubeconfig: pathlib.Path  # the janitor's user, with the janitor's Roles

    def stored(self, runtime_id: str) -> list[dict[str, Any]]:
        resp: Any = client.CustomObjectsApi(self.api).list_namespaced_custom_object(
            apitypes.RUNTIME_CONFIGMAPS.group,
            apitypes.RUNTIME_CONFIGMAPS.version,
            self.namespace,
            apitypes.RUNTIME_CONFIGMAPS.plural,
            label_selector=f"{apitypes.RUNTIME_ID_LABEL}={runtime_id}",
        )
        return list(resp["items"])

    def stored_one(
        self, runtime_id: str, ns: str, name: str, watch: str = COMPAT_WATCH
    ) -> dict[str, Any] | None:
        """The stored record of the key (a v1 record's Watch: the env's compat Watch)."""
        key = records.Key(runtime_id, watch, ns, name)
        try:
            obj: Any = client.CustomObjectsApi(self.api).get_namespaced_custom_object(
                apitypes.RUNTIME_CONFIGMAPS.group,
                apitypes.RUNTIME_CONFIGMAPS.version,
                self.namespace,
                apitypes.RUNTIME_CONFIGMAPS.plural,
                records.object_name(key),
            )
            return dict(obj)
        except client.ApiException as e:
            if e.status == 404:
                return None
            raise


def install_crd(api: client.ApiClient) -> None:
    """The listener's CRDs of manifests/kcp/crds (RuntimeConfigMap, RuntimeDelivery),
    established."""
    controlplane.install_crds(api, *CRD_FILES)


def _bind(
    api: client.ApiClient, namespace: str, files: tuple[pathlib.Path, ...], user: str
) -> None:
    """Every Role and RoleBinding of ``files``, all in ``namespace`` (whatever namespace the
    manifests give each: a test's one namespace stands for kcp-system, the heartbeat
    namespace and tether-system at once), bound to ``user``."""
    rbac = client.RbacAuthorizationV1Api(api)
    for doc in (d for f in files for d in yaml.safe_load_all(f.read_text()) if d):
        if doc["kind"] in ("ClusterRole", "ClusterRoleBinding"):
            _bind_cluster(rbac, doc, user)
        if doc["kind"] not in ("Role", "RoleBinding"):
            continue
        doc["metadata"]["namespace"] = namespace
        if doc["kind"] == "Role":
            rbac.create_namespaced_role(namespace, doc)
        else:
            doc["subjects"] = [
                {"kind": "User", "name": user, "apiGroup": "rbac.authorization.k8s.io"}
            ]
            rbac.create_namespaced_role_binding(namespace, doc)


def _bind_cluster(rbac: client.RbacAuthorizationV1Api, doc: Any, user: str) -> None:
    """A ClusterRole of the manifests (the records in every namespace), bound to ``user``
    under the manifests' names (once per plane: later envs find them)."""
    try:
        if doc["kind"] == "ClusterRole":
            rbac.create_cluster_role(doc)
        else:
            doc["subjects"] = [
                {"kind": "User", "name": user, "apiGroup": "rbac.authorization.k8s.io"}
            ]
            rbac.create_cluster_role_binding(doc)
    except client.ApiException as e:
        if e.status != 409:
            raise


def bind_listener_role(api: client.ApiClient, namespace: str) -> None:
    """The manifests' listener Roles and RoleBindings (records, heartbeat Leases), in
    ``namespace``, bound to the listener's test user; and the janitor's, bound to the
    janitor's test user (``JANITOR_USER``)."""
    _bind(api, namespace, (RBAC_FILE, HEARTBEATS_RBAC_FILE), LISTENER_USER)
    _bind(api, namespace, (JANITOR_RBAC_FILE,), JANITOR_USER)


def make_env(
    kcp: controlplane.ControlPlane,
    api: client.ApiClient,
    d: pathlib.Path,
    namespace: str,
    *,
    foreign: bool = False,
) -> Env:
    """A KCP namespace with the manifests' listener Role bound to the test user, the PKI
    (runtime client CA, listener serving certificate for localhost/127.0.0.1, a foreign CA
    when ``foreign``, else the runtime CA stands in) and the listener user's kubeconfig,
    files in ``d``. The CRDs are the caller's (``install_crd``)."""
    client.CoreV1Api(api).create_namespace(
        client.V1Namespace(metadata=client.V1ObjectMeta(name=namespace))
    )
    bind_listener_role(api, namespace)
    watchenv.all_configmaps(api, namespace)
    runtime_ca = certs.CertificateAuthority.create("tether-runtime-ca")
    foreign_ca = certs.CertificateAuthority.create("someone-else-ca") if foreign else runtime_ca
    server_ca = certs.CertificateAuthority.create("tether-listener-serving-ca")
    runtime_ca.write(d / "client-ca.crt", d / "client-ca.key")
    server_ca.write(d / "server-ca.crt", d / "server-ca.key")
    serving = server_ca.issue(
        "tether-listener", dns_names=["localhost"], ip_addresses=["127.0.0.1"], server=True
    )
    serving.write(d / "tls.crt", d / "tls.key")
    kubeconfig = kcp.issue_client_cert(LISTENER_USER, dest=d / "kubeconfig-listener")
    janitor = kcp.issue_client_cert(JANITOR_USER, dest=d / "kubeconfig-janitor")
    return Env(
        d,
        namespace,
        kcp,
        api,
        runtime_ca,
        foreign_ca,
        d / "client-ca.crt",
        d / "server-ca.crt",
        d / "tls.crt",
        d / "tls.key",
        kubeconfig,
        janitor,
    )


def own_namespace(env: Env, prefix: str) -> Env:
    """``env`` in a fresh KCP namespace of its own, the manifests' listener Role bound in it
    (a module whose listeners must not see the session's records, e.g. its janitor)."""
    ns = f"{prefix}-{uuid.uuid4().hex[:8]}"
    core = client.CoreV1Api(env.api)
    controlplane.retry_busy(
        lambda: core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=ns)))
    )
    bind_listener_role(env.api, ns)
    watchenv.all_configmaps(env.api, ns)
    return dataclasses.replace(env, namespace=ns)


def remove_namespace(env: Env) -> None:
    """What ``own_namespace`` made, and what the listener wrote in it."""
    objects = client.CustomObjectsApi(env.api)
    for group, version, plural in (
        (
            apitypes.RUNTIME_CONFIGMAPS.group,
            apitypes.RUNTIME_CONFIGMAPS.version,
            apitypes.RUNTIME_CONFIGMAPS.plural,
        ),
        (
            apitypes.RUNTIME_DELIVERIES.group,
            apitypes.RUNTIME_DELIVERIES.version,
            apitypes.RUNTIME_DELIVERIES.plural,
        ),
        (apitypes.KYMAS.group, apitypes.KYMAS.version, apitypes.KYMAS.plural),
    ):
        objects.delete_collection_namespaced_custom_object(group, version, env.namespace, plural)
    client.CoordinationV1Api(env.api).delete_collection_namespaced_lease(env.namespace)
    client.CoreV1Api(env.api).delete_namespace(env.namespace)


def add_runtime(env: Env, runtime_id: str, domain: str | None = None) -> Runtime:
    """A Kyma CR for ``runtime_id`` in ``env`` and a matching client certificate."""
    dom = domain or f"c-{runtime_id}.kyma.example.com"
    create_kyma(env.api, env.namespace, runtime_id, dom)
    c, k = env.dir / f"{runtime_id}.crt", env.dir / f"{runtime_id}.key"
    env.runtime_ca.issue(runtime_id, dns_names=[dom], client=True).write(c, k)
    return Runtime(runtime_id, dom, c, k, env)


class ListenerProcess:
    """``python -m listener.main`` (gunicorn) as a subprocess on a free port."""

    limits: cgroups.Limits | None = None  # in a cgroup with them (ConfinedListenerProcess)
    code: pathlib.Path = REPO  # the source tree it runs (another release's: testing.skewenv)

    def __init__(self, env: Env, name: str, **overrides: str) -> None:
        self.port = controlplane.free_port()
        self.ops_port = controlplane.free_port()
        self.ops_url = f"http://127.0.0.1:{self.ops_port}"  # health, readiness, metrics
        self.audit_file = env.dir / f"audit-{name}-{self.port}.jsonl"
        self.log_file = env.dir / f"listener-{name}-{self.port}.log"
        self.env = env
        vars_ = {
            "TETHER_LISTENER_BIND": f"127.0.0.1:{self.port}",
            "TETHER_LISTENER_OPS_BIND": f"127.0.0.1:{self.ops_port}",
            "TETHER_LISTENER_TLS_CERT_FILE": str(env.server_cert),
            "TETHER_LISTENER_TLS_KEY_FILE": str(env.server_key),
            "TETHER_LISTENER_CLIENT_CA_FILE": str(env.client_ca_file),
            "TETHER_LISTENER_KUBECONFIG": str(env.kubeconfig),
            "TETHER_LISTENER_NAMESPACE": env.namespace,
            "TETHER_LISTENER_AUDIT_LOG": str(self.audit_file),
            "TETHER_LISTENER_THREADS": "8",
            "TETHER_LISTENER_RATE_PER_SECOND": "100000",
            "TETHER_LISTENER_RATE_BURST": "100000",
            "TETHER_LISTENER_KCP_TIMEOUT_SECONDS": "20",  # the test machine is overloaded
            "TETHER_LISTENER_RETRY_AFTER_SECONDS": "2",
            # a stop waits out the graceful timeout (25 s in the manifests); the tests that
            # show what a worker flushes at exit set it back
            "TETHER_LISTENER_GRACEFUL_TIMEOUT_SECONDS": "3",
            # the quota before the KCP storage budget (200 records, 2 MiB): tests that store
            # more than a budgeted runtime does, their subject not the quota (its own tests set it)
            "TETHER_LISTENER_QUOTA_RECORDS": "20000",
            "TETHER_LISTENER_QUOTA_BYTES": str(256 * 1024 * 1024),
        }
        vars_.update(overrides)
        self.scheme = "https" if vars_.get("TETHER_LISTENER_TLS_CERT_FILE") else "http"
        self.url = f"{self.scheme}://127.0.0.1:{self.port}"
        environ = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith("TETHER_LISTENER_") and k != "KUBECONFIG"
        }
        environ.update({k: v for k, v in vars_.items() if v != ""})
        if self.code != REPO:
            environ["PYTHONPATH"] = str(self.code)
        self.cgroup = (
            cgroups.confine(f"listener-{name}-{self.port}", self.limits) if self.limits else None
        )
        self.usage: cgroups.Usage | None = None
        argv = [sys.executable, "-m", "listener.main"]
        self._log = open(self.log_file, "wb")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            self.cgroup.wrap(argv) if self.cgroup else argv,
            cwd=self.code,
            env=environ,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            preexec_fn=controlplane.die_with_parent(),
        )
        try:
            self._wait()
        except BaseException:
            self.stop()  # never leave a half-started gunicorn behind
            raise

    def _wait(self) -> None:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"listener exited: {self.log_file.read_text()[-3000:]}")
            try:
                r = requests.get(f"{self.ops_url}/healthz", timeout=2)
                if r.status_code == 200:
                    return
            except requests.RequestException:
                pass
            time.sleep(0.2)
        raise AssertionError(f"listener not healthy: {self.log_file.read_text()[-3000:]}")

    def audit(self) -> list[dict[str, Any]]:
        """The audit lines so far. The listener writes them from a thread of its own (a
        request never waits on them), so this waits until the file stops growing (0.2 s, at
        most 5 s) before reading."""
        import json

        if not self.audit_file.exists():
            time.sleep(0.2)
            if not self.audit_file.exists():
                return []
        size, deadline = -1, time.monotonic() + 5
        while time.monotonic() < deadline:
            now = self.audit_file.stat().st_size
            if now == size:
                break
            size = now
            time.sleep(0.2)
        return [json.loads(line) for line in self.audit_file.read_text().splitlines() if line]

    def metrics(self) -> str:
        r = requests.get(f"{self.ops_url}/metrics", timeout=10)
        assert r.status_code == 200
        return r.text

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        self._log.close()
        if self.cgroup is not None:
            self.usage = self.usage or self.cgroup.usage()
            self.cgroup.remove()


class ConfinedListenerProcess(ListenerProcess):
    """In a cgroup with the Deployment's limits, as a kubelet runs the container: ``usage``
    (peak memory, OOM kills) is read when it stops (``cgroups.held(p.usage, ...)``)."""

    limits = LISTENER_LIMITS


def metric_value(text: str, name: str, **labels: str) -> float:
    """The value of one sample in a Prometheus text exposition (0 when absent)."""
    want = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    for line in text.splitlines():
        if line.startswith("#") or " " not in line:
            continue
        series, value = line.rsplit(" ", 1)
        sname, _, lbl = series.partition("{")
        if sname != name:
            continue
        got = ",".join(sorted(p for p in lbl.rstrip("}").split(",") if p))
        if got == want:
            return float(value)
    return 0.0


def records_relisted(*ps: ListenerProcess) -> float:
    """Relists of the records by the listeners' pod views so far (a broken watch, a 410): a
    LIST of records that a test of "no KCP read" must allow when this count grew."""
    return sum(
        metric_value(
            p.metrics(), "tether_listener_view_watch_restarts_total", resource="records", reason=r
        )
        for p in ps
        for r in ("gone", "error")
    )


def kcp_requests(api: client.ApiClient) -> dict[tuple[str, str], int]:
    """Requests the KCP apiserver served on Tether's resources so far, by (resource, verb):
    its own ``apiserver_request_total`` (admin client)."""
    r = api.rest_client.pool_manager.request("GET", f"{api.configuration.host}/metrics", timeout=30)
    assert r.status == 200, r.data[:200]
    out: dict[tuple[str, str], int] = {}
    for line in r.data.decode().splitlines():
        if not line.startswith("apiserver_request_total{"):
            continue
        series, value = line.rsplit(" ", 1)
        lbl = dict(
            p.split("=", 1) for p in series[series.index("{") + 1 : -1].split(",") if "=" in p
        )
        if lbl.get("group", "").strip('"') != apitypes.RUNTIME_CONFIGMAPS.group:
            continue
        key = (lbl.get("resource", "").strip('"'), lbl.get("verb", "").strip('"'))
        out[key] = out.get(key, 0) + int(float(value))
    return out


def kcp_requests_since(
    api: client.ApiClient,
    before: dict[tuple[str, str], int],
) -> dict[tuple[str, str], int]:
    """Requests on Tether's resources since ``before`` (``kcp_requests``). The apiserver
    counts a request just after answering it: read until two reads 0.3 s apart agree."""
    last = kcp_requests(api)
    for _ in range(20):
        time.sleep(0.3)
        now = kcp_requests(api)
        if now == last:
            break
        last = now
    return {k: v - before.get(k, 0) for k, v in last.items() if v - before.get(k, 0)}


@dataclasses.dataclass
class Runtime:
    id: str
    domain: str
    cert_file: pathlib.Path
    key_file: pathlib.Path
    env: Env

    def session(
        self, cert: tuple[pathlib.Path, pathlib.Path] | None | bool = True
    ) -> requests.Session:
        s = requests.Session()
        s.trust_env = False  # else REQUESTS_CA_BUNDLE in the environment overrides s.verify
        s.verify = str(self.env.server_ca_file)
        if cert is True:
            s.cert = (str(self.cert_file), str(self.key_file))
        elif isinstance(cert, tuple):
            s.cert = (str(cert[0]), str(cert[1]))
        return s

    def record(
        self,
        name: str,
        rv: int | str,
        *,
        ns: str = "team-a",
        deleted: bool = False,
        data: dict[str, str] | None = None,
        observed_at: str | None = None,
        source: changes.Source = "webhook",
    ) -> dict[str, Any]:
        if deleted:
            rec = conversion.tombstone(
                runtime_id=self.id,
                namespace=ns,
                name=name,
                uid="u-" + name,
                resource_version=str(rv),
                source=source,
                observed_at=observed_at,
            )
        else:
            rec = conversion.from_configmap(
                {
                    "metadata": {
                        "namespace": ns,
                        "name": name,
                        "uid": "u-" + name,
                        "resourceVersion": str(rv),
                    },
                    "data": data if data is not None else {"v": str(rv)},
                },
                runtime_id=self.id,
                source=source,
                observed_at=observed_at,
            )
        return dict(rec)

    def issue(
        self,
        ca: certs.CertificateAuthority | None = None,
        *,
        cn: str | None = None,
        dns: list[str] | None = None,
        **kw: Any,
    ) -> tuple[pathlib.Path, pathlib.Path]:
        """Another client certificate (files) for refusal tests."""
        pair = (ca or self.env.runtime_ca).issue(
            cn or self.id, dns_names=dns or [self.domain], client=True, **kw
        )
        tag = uuid.uuid4().hex[:8]
        c, k = self.env.dir / f"x-{tag}.crt", self.env.dir / f"x-{tag}.key"
        pair.write(c, k)
        return c, k


def as_stored(rec: dict[str, Any], watch: str = COMPAT_WATCH) -> dict[str, Any]:
    """A v1 record as the listener stores it (under the env's compat Watch, a ConfigMap),
    for tests that write records directly (``records.body``)."""
    return {**rec, "watch": watch, "resource": {"group": "", "version": "v1", "kind": "ConfigMap"}}


def create_kyma(
    api: client.ApiClient,
    namespace: str,
    runtime_id: str,
    domain: str | None,
    *,
    finalizers: list[str] | None = None,
) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "name": f"kyma-{runtime_id.lower()}"[:60],
        "namespace": namespace,
        "labels": {apitypes.RUNTIME_ID_LABEL: runtime_id},
    }
    if domain is not None:
        meta["annotations"] = {apitypes.SKR_DOMAIN_ANNOTATION: domain}
    if finalizers:
        meta["finalizers"] = finalizers
    body = {
        "apiVersion": f"{apitypes.KYMAS.group}/{apitypes.KYMAS.version}",
        "kind": apitypes.KYMA_KIND,
        "metadata": meta,
        "spec": {"channel": "regular"},
    }
    obj: Any = client.CustomObjectsApi(api).create_namespaced_custom_object(
        apitypes.KYMAS.group, apitypes.KYMAS.version, namespace, apitypes.KYMAS.plural, body
    )
    return dict(obj)


def expired(days: int = 2) -> dict[str, Any]:
    start = datetime.datetime.now(datetime.UTC) - datetime.timedelta(days=days)
    return {"not_before": start, "validity": datetime.timedelta(days=1)}
