"""The compass scheduler's test environment: the Director stand-in as a process, Kyma CRs and their
kubeconfig Secrets, mappings, settings and services wired to a plane; the Provisioner's runtimes to
adopt (``Landscape``)."""

from __future__ import annotations

import base64
import logging
import pathlib
import time
import uuid
from typing import Any

from kubernetes import client

from compass import metrics, service
from compass import settings as settings_mod
from standins.director import server as server_mod
from standins.director import store as store_mod
from testing import controlplane, localnet
from tether.kube import apitypes, gateway

CRD_FILE = (
    controlplane.REPO_ROOT
    / "manifests"
    / "kcp"
    / "crds"
    / "tether.kyma-project.io_compassmappings.yaml"
)


EXTRA_PLANES = 19  # with the session's skr plane: one runtime plane per Kyma CR of the 20-CR test


class Director:
    """The running stand-in: ``store`` (state, faults, request log) and URLs."""

    def __init__(self, srv: server_mod.DirectorServer, ca_file: pathlib.Path) -> None:
        self.server = srv
        self.store = srv.store
        self.ca_file = ca_file

    @property
    def graphql_url(self) -> str:
        return f"{self.server.url}/graphql"

    @property
    def token_url(self) -> str:
        return f"{self.server.url}/oauth2/token"


def kyma_labels(tenant: str, shoot: str, **extra: str) -> dict[str, str]:
    labels = {
        apitypes.GLOBAL_ACCOUNT_LABEL: tenant,
        apitypes.SUBACCOUNT_LABEL: f"sa-{shoot}",
        apitypes.SHOOT_NAME_LABEL: shoot,
        apitypes.INSTANCE_ID_LABEL: f"inst-{shoot}",
        apitypes.PLAN_ID_LABEL: "plan-azure",
        apitypes.PLAN_NAME_LABEL: "azure",
        "kyma-project.io/runtime-id": f"rt-{shoot}",
    }
    labels.update(extra)
    return labels


def create_kyma(
    api: client.ApiClient,
    namespace: str,
    name: str,
    labels: dict[str, str],
    modules: tuple[str, ...] = (),
) -> None:
    body = {
        "apiVersion": "operator.kyma-project.io/v1beta2",
        "kind": "Kyma",
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "spec": {"channel": "regular", "modules": [{"name": m} for m in modules]},
    }
    client.CustomObjectsApi(api).create_namespaced_custom_object(
        apitypes.KYMAS.group, apitypes.KYMAS.version, namespace, apitypes.KYMAS.plural, body
    )


def delete_kyma(api: client.ApiClient, namespace: str, name: str) -> None:
    client.CustomObjectsApi(api).delete_namespaced_custom_object(
        apitypes.KYMAS.group, apitypes.KYMAS.version, namespace, apitypes.KYMAS.plural, name
    )


def create_kubeconfig_secret(
    api: client.ApiClient, namespace: str, kyma: str, plane: controlplane.ControlPlane | bytes
) -> None:
    """The runtime's admin kubeconfig as lifecycle-manager keeps it in the KCP: ``plane``'s,
    or the given content (a hostile runtime's, tests of the kubeconfig allow-list)."""
    content = plane if isinstance(plane, bytes) else plane.kubeconfig.read_bytes()
    body = client.V1Secret(
        metadata=client.V1ObjectMeta(
            name=f"kubeconfig-{kyma}",
            namespace=namespace,
            labels={"operator.kyma-project.io/kyma-name": kyma},
        ),
        data={"config": base64.b64encode(content).decode()},
    )
    client.CoreV1Api(api).create_namespaced_secret(namespace, body)


def agent_secret(plane: controlplane.ControlPlane) -> dict[str, str] | None:
    api = plane.api_client()
    try:
        sec: Any = client.CoreV1Api(api).read_namespaced_secret(
            "compass-agent-configuration", "kyma-system"
        )
    except client.ApiException as e:
        if e.status == 404:
            return None
        raise
    finally:
        api.close()
    return {k: base64.b64decode(v).decode() for k, v in (sec.data or {}).items()}


def get_mapping(api: client.ApiClient, namespace: str, name: str) -> dict[str, Any] | None:
    try:
        obj: Any = client.CustomObjectsApi(api).get_namespaced_custom_object(
            apitypes.COMPASS_MAPPINGS.group,
            apitypes.COMPASS_MAPPINGS.version,
            namespace,
            apitypes.COMPASS_MAPPINGS.plural,
            name,
        )
        return dict(obj)
    except client.ApiException as e:
        if e.status == 404:
            return None
        raise


def make_settings(director: Director, namespace: str, **over: Any) -> settings_mod.Settings:
    base: dict[str, Any] = dict(
        director_url=director.graphql_url,
        token_url=director.token_url,
        client_id=director.store.client_id,
        client_secret=director.store.client_secret,
        director_ca_file=str(director.ca_file),
        namespace=namespace,
        concurrency=4,
        director_timeout=2.0,
        skr_timeout=5.0,
        backoff_base=0.2,
        backoff_cap=1.0,
        breaker_threshold=3,
        breaker_open_seconds=0.5,
        breaker_max_open_seconds=1.0,
        interval=0.5,
        lease_namespace=namespace,
        lease_name=f"compass-{uuid.uuid4().hex[:6]}",
        runtimes=localnet.policy(),
    )
    base.update(over)
    return settings_mod.Settings(**base)


class AuditCapture(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.events: list[dict[str, Any]] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.events.append(
            {
                k: v
                for k, v in vars(record).items()
                if k
                in ("event", "kyma", "runtimeId", "tenant", "reason", "directorKnewIt", "expiresAt")
            }
            | {"message": record.getMessage()}
        )


def make_service(
    kcp_api: client.ApiClient | gateway.Kube, s: settings_mod.Settings
) -> tuple[service.Service, AuditCapture]:
    audit = logging.getLogger(f"tether.audit.test.{uuid.uuid4().hex[:6]}")
    audit.propagate = False
    cap = AuditCapture()
    audit.addHandler(cap)
    audit.setLevel(logging.INFO)
    kcp = kcp_api if isinstance(kcp_api, gateway.Kube) else gateway.Kube(kcp_api)
    return service.build(s, kcp, metrics.Metrics(), audit), cap


def run_until(
    svc: service.Service, predicate: Any, *, runs: int = 30, pause: float = 0.3, full: bool = False
) -> int:
    """Run the job until ``predicate()`` holds; returns the number of runs. Bounded."""
    for i in range(1, runs + 1):
        svc.job.run(full=full)
        if predicate():
            return i
        time.sleep(pause)
    raise AssertionError(f"not converged within {runs} runs")


def write_agent_secret(
    plane: controlplane.ControlPlane, namespace: str, name: str, plain: dict[str, str]
) -> str:
    """A Secret in the runtime as the Provisioner (or the agent) left it, its namespace
    created if needed; returns its resourceVersion."""
    api = plane.api_client()
    try:
        core = client.CoreV1Api(api)
        try:
            core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=namespace)))
        except client.ApiException as e:
            if e.status != 409:
                raise
        body = client.V1Secret(
            metadata=client.V1ObjectMeta(name=name, namespace=namespace),
            data={k: base64.b64encode(v.encode()).decode() for k, v in plain.items()},
        )
        created: Any = core.create_namespaced_secret(namespace, body)
        return str(created.metadata.resource_version)
    finally:
        api.close()


def read_secret(
    plane: controlplane.ControlPlane, namespace: str, name: str
) -> tuple[str, dict[str, str]] | None:
    """(resourceVersion, decoded data) of a Secret in the runtime, None when absent."""
    api = plane.api_client()
    try:
        sec: Any = client.CoreV1Api(api).read_namespaced_secret(name, namespace)
    except client.ApiException as e:
        if e.status == 404:
            return None
        raise
    finally:
        api.close()
    data = {k: base64.b64decode(v).decode() for k, v in (sec.data or {}).items()}
    return str(sec.metadata.resource_version), data


def mappings_in(api: client.ApiClient, namespace: str) -> list[dict[str, Any]]:
    res = apitypes.COMPASS_MAPPINGS
    out: Any = client.CustomObjectsApi(api).list_namespaced_custom_object(
        res.group, res.version, namespace, res.plural
    )
    return list(out.get("items") or [])


# -- the Provisioner's runtimes, for the adoption tests ---------------------------------------

WRITES = (
    "registerRuntime",
    "setRuntimeLabel",
    "requestOneTimeTokenForRuntime",
    "unregisterRuntime",
)


def writes_since(store: store_mod.Store, mark: int) -> list[str]:
    return [r.operation for r in store.requests[mark:] if r.operation in WRITES]


class Landscape:
    """Kyma CRs in ``ns`` whose runtimes the Provisioner registered, sharing ``plane``."""

    def __init__(
        self, d: Director, kcp_api: client.ApiClient, ns: str, plane: controlplane.ControlPlane
    ) -> None:
        self.d, self.kcp_api, self.ns, self.plane = d, kcp_api, ns, plane
        self.tenant = f"ga-adopt-{uuid.uuid4().hex[:6]}"
        self.secret_ns = f"agents-{uuid.uuid4().hex[:6]}"
        self.ids: dict[str, str] = {}
        self.versions: dict[str, str] = {}

    def kyma(self, name: str) -> None:
        create_kubeconfig_secret(self.kcp_api, self.ns, name, self.plane)
        create_kyma(self.kcp_api, self.ns, name, kyma_labels(self.tenant, f"{name}-shoot"))

    def provisioned(
        self,
        name: str,
        *,
        condition: str = "CONNECTED",
        secret: bool = True,
        used: bool = False,
        managed_by: str = "",
    ) -> str:
        rt = self.d.store.seed_provisioned(
            self.tenant,
            f"{name}-shoot",
            subaccount=f"sa-{name}-shoot",
            managed_by=managed_by,
            condition=condition,
        )
        self.ids[name] = rt.id
        if secret:
            tok = self.d.store.token_for_seed(self.tenant, rt.id, used=used)
            self.versions[name] = write_agent_secret(
                self.plane,
                self.secret_ns,
                f"agent-{name}",
                {
                    "CONNECTOR_URL": self.d.store.connector_url,
                    "RUNTIME_ID": rt.id,
                    "TENANT": self.tenant,
                    "TOKEN": tok.token,
                },
            )
        self.kyma(name)
        return rt.id

    def secret(self, name: str) -> tuple[str, dict[str, str]] | None:
        return read_secret(self.plane, self.secret_ns, f"agent-{name}")

    def status(self, name: str) -> dict[str, Any]:
        return dict((get_mapping(self.kcp_api, self.ns, name) or {}).get("status") or {})

    def settings(self, **over: Any) -> Any:
        return make_settings(
            self.d, self.ns, secret_namespace=self.secret_ns, secret_name="agent-{kyma}", **over
        )


def reasons(st: dict[str, Any]) -> set[str]:
    return {c.get("reason") for c in st.get("conditions") or []}
