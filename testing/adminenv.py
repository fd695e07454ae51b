"""The admin pages' test environment: the CRDs the pages read, two namespaces (the KCP's and
Tether's), the manifests' admin RBAC bound to a test user, operators with real bearer tokens
(ServiceAccounts + TokenRequest, checked by the plane's TokenReview), fleet objects made as
the other parts would write them, and ``tether admin`` as a subprocess on free ports.
Also: the session key the replicas share, the sign-out ConfigMap, and an authenticating
proxy's client certificates (``proxy_cert``; ``stranger_cert``, ``foreign_cert`` and
``server_only_cert`` that must not be trusted). Used by tests/admin, the browser tests and
bench/admin_pages.py."""

from __future__ import annotations

import base64
import datetime
import json
import os
import pathlib
import subprocess
import sys
import time
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

import requests
import yaml
from kubernetes import client

from listener.fleet import heartbeat
from testing import controlplane, listenerenv
from tether.base import certs
from tether.kube import apitypes
from tether.wire import delivery

REPO = pathlib.Path(__file__).resolve().parents[1]
ADMIN_RBAC = REPO / "manifests" / "kcp" / "admin" / "rbac.yaml"
ENROLLMENT_CRD = (
    REPO / "manifests" / "kcp" / "crds" / "tether.kyma-project.io_runtimeenrollments.yaml"
)
MAPPING_CRD = REPO / "manifests" / "kcp" / "crds" / "tether.kyma-project.io_compassmappings.yaml"
SIGNOUTS = REPO / "manifests" / "kcp" / "admin" / "signouts.yaml"
PROXY_NAME = "tether-admin-proxy"  # the CN the tests' proxy certificate carries
ADMIN_USER = "tether-admin-test"
AUDIENCE = "tether-admin"  # the admin part's default TETHER_ADMIN_TOKEN_AUDIENCE
HEARTBEAT_LABEL = "tether.kyma-project.io/heartbeat"
RUNTIME_LABEL = "kyma-project.io/runtime-id"


def _client(
    ca: certs.CertificateAuthority, cn: str, stem: pathlib.Path, client: bool = True
) -> tuple[str, str]:
    """A certificate of ``ca`` for ``cn`` (clientAuth unless ``client`` is False, then
    serverAuth only), written beside ``stem``; (certificate file, key file) as requests
    takes them."""
    pair = ca.issue(cn, client=client, server=not client)
    crt, key = stem.with_suffix(".crt"), stem.with_suffix(".key")
    pair.write(crt, key)
    return str(crt), str(key)


def now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


def stamp(t: datetime.datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def install_crds(api: client.ApiClient) -> None:
    controlplane.install_crds(
        api, controlplane.KYMA_CRD, *listenerenv.CRD_FILES, ENROLLMENT_CRD, MAPPING_CRD
    )


class Env:
    """Namespaces ``kcp_ns`` (fleet objects) and ``tether_ns`` (Deployments, leader Leases)
    in ``plane``; ``kubeconfig``: the admin part's identity with exactly the manifests' RBAC."""

    def __init__(
        self, plane: controlplane.ControlPlane, api: client.ApiClient, d: pathlib.Path
    ) -> None:
        self.plane, self.api, self.dir = plane, api, d
        suffix = uuid.uuid4().hex[:6]
        self.kcp_ns, self.tether_ns = f"ka-{suffix}", f"ta-{suffix}"
        self.suffix = suffix
        core = client.CoreV1Api(api)
        for ns in (self.kcp_ns, self.tether_ns):
            core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=ns)))
        self.user = f"{ADMIN_USER}-{suffix}"
        self._bind_admin_rbac()
        self.kubeconfig = plane.issue_client_cert(self.user, dest=d / f"kubeconfig-{self.user}")
        ca = certs.CertificateAuthority.create("tether-admin-serving-ca")
        ca.write(d / "admin-ca.crt", d / "admin-ca.key")
        ca.issue(
            "tether-admin", dns_names=["localhost"], ip_addresses=["127.0.0.1"], server=True
        ).write(d / "admin-tls.crt", d / "admin-tls.key")
        self.ca_file = d / "admin-ca.crt"
        self.cert_file, self.key_file = d / "admin-tls.crt", d / "admin-tls.key"
        # the key the replicas share (Secret tether-admin-session in the manifests)
        self.session_key_file = d / "session-keys"
        self.session_key_file.write_text(base64.b64encode(os.urandom(32)).decode() + "\n")
        self._signouts_configmap()
        # an authenticating proxy's client certificates: its CA, the allowed name, a name
        # of the same CA that is not allowed, and the allowed name from another CA
        proxy_ca = certs.CertificateAuthority.create("tether-admin-proxy-ca")
        proxy_ca.write(d / "proxy-ca.crt", d / "proxy-ca.key")
        self.proxy_ca_file = d / "proxy-ca.crt"
        self.proxy_cert = _client(proxy_ca, PROXY_NAME, d / "proxy")
        self.stranger_cert = _client(proxy_ca, "someone-else", d / "stranger")
        self.foreign_cert = _client(
            certs.CertificateAuthority.create("not-the-proxy-ca"), PROXY_NAME, d / "foreign"
        )
        self.server_only_cert = _client(proxy_ca, PROXY_NAME, d / "server-only", client=False)

    def _signouts_configmap(self) -> None:
        """The sign-out ConfigMap as the manifests ship it (manifests/kcp/admin)."""
        doc = yaml.safe_load(SIGNOUTS.read_text())
        doc["metadata"]["namespace"] = self.tether_ns
        client.CoreV1Api(self.api).create_namespaced_config_map(self.tether_ns, doc)

    def signouts(self) -> dict[str, str]:
        """The sign-out ConfigMap's entries as the KCP holds them."""
        cm: Any = client.CoreV1Api(self.api).read_namespaced_config_map(
            "tether-admin-signouts", self.tether_ns
        )
        return dict(cm.data or {})

    def proxy_settings(self) -> dict[str, str]:
        """``tether admin`` trusting the proxy's certificate (for ``AdminProcess``)."""
        return {
            "TETHER_ADMIN_PROXY_CA_FILE": str(self.proxy_ca_file),
            "TETHER_ADMIN_PROXY_ALLOWED_NAMES": PROXY_NAME,
        }

    # -- RBAC --------------------------------------------------------------------------------

    def _bind_admin_rbac(self) -> None:
        """The manifests' rules, namespaces and names adapted, bound to the test user."""
        rbac: Any = client.RbacAuthorizationV1Api(self.api)
        for doc in yaml.safe_load_all(ADMIN_RBAC.read_text()):
            meta = doc["metadata"]
            if meta["name"] == "tether-admin-viewer":
                self.viewer_role = f"tether-admin-viewer-{self.suffix}"
                meta["name"] = self.viewer_role
                rbac.create_cluster_role(doc)
                continue
            # the heartbeat Leases (manifests: tether-heartbeats) are in kcp_ns here, where
            # the admin part looks for them by default
            ns = {
                "kcp-system": self.kcp_ns,
                "tether-system": self.tether_ns,
                "tether-heartbeats": self.kcp_ns,
            }.get(meta.get("namespace", ""))
            meta["name"] = f"tether-admin-{self.suffix}" + (
                "-heartbeats" if meta.get("namespace") == "tether-heartbeats" else ""
            )
            if "roleRef" in doc:
                doc["roleRef"]["name"] = meta["name"]
                doc["subjects"] = [
                    {"kind": "User", "name": self.user, "apiGroup": "rbac.authorization.k8s.io"}
                ]
            kind = doc["kind"]
            if kind == "ClusterRole":
                rbac.create_cluster_role(doc)
            elif kind == "ClusterRoleBinding":
                rbac.create_cluster_role_binding(doc)
            elif kind == "Role":
                meta["namespace"] = ns
                rbac.create_namespaced_role(ns, doc)
            elif kind == "RoleBinding":
                meta["namespace"] = ns
                rbac.create_namespaced_role_binding(ns, doc)

    def operator(
        self, name: str, pages: Sequence[str] | None = ("fleet", "runtime", "compass", "parts")
    ) -> str:
        """A ServiceAccount in ``tether_ns`` allowed ``pages`` (``None``: all, through the
        manifests' viewer ClusterRole; ``()``: nothing); returns a bearer token for it made
        for the admin pages' audience (``kubectl create token NAME --audience tether-admin``)."""
        core: Any = client.CoreV1Api(self.api)
        rbac: Any = client.RbacAuthorizationV1Api(self.api)
        core.create_namespaced_service_account(
            self.tether_ns, client.V1ServiceAccount(metadata=client.V1ObjectMeta(name=name))
        )
        subject = [{"kind": "ServiceAccount", "name": name, "namespace": self.tether_ns}]
        binding = f"{name}-{self.suffix}"
        if pages is None:
            rbac.create_cluster_role_binding(
                {
                    "apiVersion": "rbac.authorization.k8s.io/v1",
                    "kind": "ClusterRoleBinding",
                    "metadata": {"name": binding},
                    "subjects": subject,
                    "roleRef": {
                        "apiGroup": "rbac.authorization.k8s.io",
                        "kind": "ClusterRole",
                        "name": self.viewer_role,
                    },
                }
            )
        elif pages:
            rbac.create_cluster_role(
                {
                    "apiVersion": "rbac.authorization.k8s.io/v1",
                    "kind": "ClusterRole",
                    "metadata": {"name": binding},
                    "rules": [
                        {
                            "apiGroups": ["tether.kyma-project.io"],
                            "resources": ["adminpages"],
                            "resourceNames": list(pages),
                            "verbs": ["get"],
                        }
                    ],
                }
            )
            rbac.create_cluster_role_binding(
                {
                    "apiVersion": "rbac.authorization.k8s.io/v1",
                    "kind": "ClusterRoleBinding",
                    "metadata": {"name": binding},
                    "subjects": subject,
                    "roleRef": {
                        "apiGroup": "rbac.authorization.k8s.io",
                        "kind": "ClusterRole",
                        "name": binding,
                    },
                }
            )
        return self.token(name)

    def token(self, name: str, audiences: Sequence[str] = (AUDIENCE,), seconds: int = 3600) -> str:
        """A new token of the ServiceAccount ``name`` (TokenRequest) for ``audiences`` (empty:
        the API server's own, what ``kubectl create token NAME`` makes)."""
        core: Any = client.CoreV1Api(self.api)
        tr: Any = core.create_namespaced_service_account_token(
            name,
            self.tether_ns,
            client.AuthenticationV1TokenRequest(
                spec=client.V1TokenRequestSpec(
                    audiences=list(audiences), expiration_seconds=seconds
                )
            ),
        )
        return str(tr.status.token)

    # -- fleet objects, as the other parts write them -----------------------------------------

    def _objects(self) -> client.CustomObjectsApi:
        return client.CustomObjectsApi(self.api)

    def kyma(self, name: str, runtime_id: str) -> None:
        self._objects().create_namespaced_custom_object(
            "operator.kyma-project.io",
            "v1beta2",
            self.kcp_ns,
            "kymas",
            {
                "apiVersion": "operator.kyma-project.io/v1beta2",
                "kind": "Kyma",
                "metadata": {
                    "name": name,
                    "labels": {RUNTIME_LABEL: runtime_id},
                    "annotations": {"skr-domain": f"{name}.kyma.example.com"},
                },
                "spec": {"channel": "regular"},
            },
        )

    def enrollment(
        self,
        name: str,
        runtime_id: str,
        ready: bool,
        *,
        reason: str = "Ready",
        not_after: datetime.datetime | None = None,
    ) -> None:
        body = {
            "apiVersion": "tether.kyma-project.io/v1alpha1",
            "kind": "RuntimeEnrollment",
            "metadata": {
                "name": name,
                "namespace": self.kcp_ns,
                "labels": {RUNTIME_LABEL: runtime_id},
            },
            "spec": {"kymaName": name, "runtimeId": runtime_id},
        }
        self._objects().create_namespaced_custom_object(
            "tether.kyma-project.io", "v1alpha1", self.kcp_ns, "runtimeenrollments", body
        )
        t = stamp(now())
        cond = {
            "type": "Ready",
            "status": "True" if ready else "False",
            "reason": reason if not ready else "Ready",
            "message": "set by the test",
            "lastTransitionTime": t.split(".")[0] + "Z",
            "observedGeneration": 1,
        }
        status = {
            "observedGeneration": 1,
            "conditions": [cond],
            "certificate": {"notAfter": stamp(not_after or now() + datetime.timedelta(days=6))},
        }
        self._objects().patch_namespaced_custom_object_status(
            "tether.kyma-project.io",
            "v1alpha1",
            self.kcp_ns,
            "runtimeenrollments",
            name,
            {"status": status},
        )

    def heartbeat(self, runtime_id: str, at: datetime.datetime) -> None:
        name = heartbeat.lease_name(runtime_id)  # as the listener names both
        coordination: Any = client.CoordinationV1Api(self.api)
        coordination.create_namespaced_lease(
            self.kcp_ns,
            {
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "metadata": {
                    "name": name,
                    "labels": {HEARTBEAT_LABEL: "true", RUNTIME_LABEL: runtime_id},
                },
                "spec": {"holderIdentity": runtime_id, "renewTime": stamp(at)},
            },
        )

    def delivery(
        self,
        runtime_id: str,
        *,
        webhook: int,
        poller: int,
        lag: float = 0.05,
        refused: Mapping[str, int] | None = None,
        throttled: int = 0,
        names: Sequence[str] = ("app",),
        minutes: int = 10,
        record_limit: int = 10_000,
    ) -> None:
        """A RuntimeDelivery as the listener merges it: records spread over ``minutes``."""
        at = now()
        d = delivery.Delta()
        for i in range(webhook + poller):
            when = at - datetime.timedelta(minutes=(i % minutes))
            d.record(
                when,
                "poller" if i < poller else "webhook",
                when - datetime.timedelta(seconds=lag * (1 + i % 3)),
                "persisted",
                "team-a",
                names[i % len(names)],
            )
        for reason, n in (refused or {}).items():
            for _ in range(n):
                d.refuse(at, reason, 413)
        for _ in range(throttled):
            d.refuse(at, "rate", 429)
        for i in range(minutes):  # a heartbeat and a state request a minute
            for _ in range(2):
                d.seen(at - datetime.timedelta(minutes=i))
        d.stored = {
            "records": webhook + poller,
            "bytes": 2048 * (webhook + poller),
            "recordLimit": record_limit,
            "byteLimit": 50 << 20,
        }
        name = heartbeat.lease_name(runtime_id)  # as the listener names both
        body = delivery.body(name, self.kcp_ns, runtime_id, {RUNTIME_LABEL: runtime_id})
        self._objects().create_namespaced_custom_object(
            apitypes.RUNTIME_DELIVERIES.group,
            apitypes.RUNTIME_DELIVERIES.version,
            self.kcp_ns,
            apitypes.RUNTIME_DELIVERIES.plural,
            body,
        )
        self._objects().patch_namespaced_custom_object_status(
            apitypes.RUNTIME_DELIVERIES.group,
            apitypes.RUNTIME_DELIVERIES.version,
            self.kcp_ns,
            apitypes.RUNTIME_DELIVERIES.plural,
            name,
            {"status": delivery.merge(None, d, runtime_id, at)},
        )

    def mapping(self, name: str, state: str, reason: str = "", message: str = "") -> None:
        body = {
            "apiVersion": "tether.kyma-project.io/v1alpha1",
            "kind": "CompassMapping",
            "metadata": {
                "name": name,
                "namespace": self.kcp_ns,
                "labels": {"operator.kyma-project.io/kyma-name": name},
            },
            "spec": {},
        }
        self._objects().create_namespaced_custom_object(
            "tether.kyma-project.io", "v1alpha1", self.kcp_ns, "compassmappings", body
        )
        t = stamp(now()).split(".")[0] + "Z"
        cond = {
            "type": "Ready",
            "status": "True" if state == "Ready" else "False",
            "reason": reason or state,
            "message": message,
            "lastTransitionTime": t,
        }
        self._objects().patch_namespaced_custom_object_status(
            "tether.kyma-project.io",
            "v1alpha1",
            self.kcp_ns,
            "compassmappings",
            name,
            {
                "status": {
                    "state": state,
                    "registered": state == "Ready",
                    "configured": state == "Ready",
                    "conditions": [cond],
                }
            },
        )

    def runtime(
        self,
        name: str,
        *,
        ready: bool = True,
        beat_age: float = 5.0,
        webhook: int = 20,
        poller: int = 0,
        **kw: Any,
    ) -> str:
        """A whole runtime: Kyma CR, enrollment, heartbeat, delivery; its runtime ID."""
        rid = f"rt-{name}"
        self.kyma(name, rid)
        self.enrollment(name, rid, ready, reason="Ready" if ready else "Unreachable")
        self.heartbeat(rid, now() - datetime.timedelta(seconds=beat_age))
        if webhook or poller or kw:
            self.delivery(rid, webhook=webhook, poller=poller, **kw)
        return rid

    def deployment(
        self, name: str, ready: int, replicas: int = 1, image: str = "tether:0.1.0"
    ) -> None:
        """A Deployment object with a status, as a kubelet-backed cluster would report it."""
        apps: Any = client.AppsV1Api(self.api)
        labels = {"app.kubernetes.io/name": name}
        apps.create_namespaced_deployment(
            self.tether_ns,
            {
                "apiVersion": "apps/v1",
                "kind": "Deployment",
                "metadata": {"name": name, "labels": labels},
                "spec": {
                    "replicas": replicas,
                    "selector": {"matchLabels": labels},
                    "template": {
                        "metadata": {"labels": labels},
                        "spec": {"containers": [{"name": "c", "image": image}]},
                    },
                },
            },
        )
        t = stamp(now()).split(".")[0] + "Z"
        apps.patch_namespaced_deployment_status(
            name,
            self.tether_ns,
            {
                "status": {
                    "replicas": replicas,
                    "readyReplicas": ready,
                    "availableReplicas": ready,
                    "observedGeneration": 1,
                    "conditions": [
                        {
                            "type": "Available",
                            "status": "True" if ready else "False",
                            "reason": "Test",
                            "message": "",
                            "lastUpdateTime": t,
                            "lastTransitionTime": t,
                        }
                    ],
                }
            },
        )

    def leader_lease(self, name: str, holder: str, annotations: Mapping[str, str]) -> None:
        coordination: Any = client.CoordinationV1Api(self.api)
        coordination.create_namespaced_lease(
            self.tether_ns,
            {
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "metadata": {"name": name, "annotations": dict(annotations)},
                "spec": {
                    "holderIdentity": holder,
                    "renewTime": stamp(now()),
                    "leaseDurationSeconds": 15,
                },
            },
        )

    def cleanup(self) -> None:
        core: Any = client.CoreV1Api(self.api)
        for ns in (self.kcp_ns, self.tether_ns):
            try:
                core.delete_namespace(ns)
            except client.ApiException:
                pass


class AdminProcess:
    """``tether admin`` (gunicorn, TLS) as a subprocess on free ports."""

    def __init__(self, env: Env, ready_timeout: float = 60.0, **overrides: str) -> None:
        self.port, self.ops_port = controlplane.free_port(), controlplane.free_port()
        self.url = f"https://127.0.0.1:{self.port}"
        self.ops_url = f"http://127.0.0.1:{self.ops_port}"
        self.log_file = env.dir / f"admin-{self.port}.log"
        self.audit_file = env.dir / f"admin-audit-{self.port}.jsonl"
        self.env = env
        vars_ = {
            "TETHER_ADMIN_BIND": f"127.0.0.1:{self.port}",
            "TETHER_ADMIN_OPS_BIND": f"127.0.0.1:{self.ops_port}",
            "TETHER_ADMIN_TLS_CERT_FILE": str(env.cert_file),
            "TETHER_ADMIN_TLS_KEY_FILE": str(env.key_file),
            "TETHER_ADMIN_SESSION_KEY_FILE": str(env.session_key_file),
            "TETHER_ADMIN_KUBECONFIG": str(env.kubeconfig),
            "TETHER_KCP_NAMESPACE": env.kcp_ns,
            "TETHER_ADMIN_NAMESPACE": env.tether_ns,
            "TETHER_ADMIN_REFRESH_SECONDS": "1",
            "TETHER_AUDIT_LOG": str(self.audit_file),
            "TETHER_LOG_FORMAT": "text",
            # every test request comes from 127.0.0.1: the budget is tested on its own process
            "TETHER_ADMIN_REVIEWS_PER_MINUTE": "6000",
        }
        vars_.update(overrides)
        environ = {
            k: v for k, v in os.environ.items() if not k.startswith("TETHER_") and k != "KUBECONFIG"
        }
        environ.update(vars_)
        self._environ = environ
        self._start(ready_timeout)

    def _start(self, ready_timeout: float) -> None:
        self._log = open(self.log_file, "ab")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "command.cli", "admin"],
            cwd=REPO,
            env=self._environ,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            preexec_fn=controlplane.die_with_parent(),
        )
        try:
            self.wait_ready(ready_timeout)
        except BaseException:
            self.stop()
            raise

    def restart(self, ready_timeout: float = 60.0) -> None:
        """Stops the process and starts it again, same settings, same ports."""
        self.stop()
        self._start(ready_timeout)

    def wait_ready(self, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"admin exited: {self.log()[-3000:]}")
            try:
                if requests.get(f"{self.ops_url}/readyz", timeout=2).status_code == 200:
                    return
            except requests.RequestException:
                pass
            time.sleep(0.2)
        raise AssertionError(f"admin not ready: {self.log()[-3000:]}")

    def get(self, path: str, token: str | None = None, **kw: Any) -> requests.Response:
        headers = dict(kw.pop("headers", {}))
        if token is not None:
            headers["Authorization"] = f"Bearer {token}"
        return requests.get(
            self.url + path,
            headers=headers,
            verify=str(self.env.ca_file),
            allow_redirects=False,
            timeout=kw.pop("timeout", 10),
            **kw,
        )

    def post(
        self, path: str, data: Mapping[str, str] | None = None, **kw: Any
    ) -> requests.Response:
        return requests.post(
            self.url + path,
            data=dict(data or {}),
            headers=dict(kw.pop("headers", {})),
            verify=str(self.env.ca_file),
            allow_redirects=False,
            timeout=kw.pop("timeout", 10),
            **kw,
        )

    def session(self) -> requests.Session:
        """A client of the pages that keeps cookies, as a browser does."""
        s = requests.Session()
        s.trust_env = False  # a REQUESTS_CA_BUNDLE would override the session's CA
        s.verify = str(self.env.ca_file)
        return s

    def log(self) -> str:
        return self.log_file.read_text(errors="replace") if self.log_file.exists() else ""

    def audit_text(self) -> str:
        """The audit output so far. The admin writes it from a thread of its own (a request
        never waits on it, ``tether.base.auditwriter``), so this waits until the file stops
        growing (0.2 s, at most 5 s) before reading."""
        size, deadline = -1, time.monotonic() + 5
        while time.monotonic() < deadline:
            now = self.audit_file.stat().st_size if self.audit_file.exists() else 0
            if now == size:
                break
            size = now
            time.sleep(0.2)
        return self.audit_file.read_text() if self.audit_file.exists() else ""

    def audit(self) -> list[dict[str, Any]]:
        return [json.loads(line) for line in self.audit_text().splitlines() if line]

    def metrics(self) -> str:
        r = requests.get(f"{self.ops_url}/metrics", timeout=10)
        assert r.status_code == 200, r.text
        return r.text

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        self._log.close()
