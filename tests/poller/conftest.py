"""Fixtures of the poller tests: the listener's fixtures (real listener under gunicorn
with mTLS against the KCP plane, Kyma CRs, runtime certificates) in
``tests/conftest.py``, the webhook's process helpers from ``testing.webhookstack``, and the
poller itself either in-process (one ``Runner``, for tests about one run) or as
``tether poller`` subprocesses (for tests about scheduling and leadership).
"""

from __future__ import annotations

import pathlib
from collections.abc import Callable, Iterator

import pytest
import yaml
from kubernetes import client

from testing import controlplane
from testing.pollerenv import (
    SA_USER,
    SKR_RBAC,
    PollerProcess,
)


@pytest.fixture(scope="session")
def least_privilege(
    skr: controlplane.ControlPlane,
    skr_api: client.ApiClient,
    tmp_path_factory: pytest.TempPathFactory,
) -> pathlib.Path:
    """A kubeconfig of the ``tether-poller`` ServiceAccount's identity (a client certificate with
    its user name) holding only what ``manifests/skr/poller/rbac.yaml`` grants; Leases must then
    live in ``tether-system``."""
    core, rbac = client.CoreV1Api(skr_api), client.RbacAuthorizationV1Api(skr_api)
    try:
        core.create_namespace(
            client.V1Namespace(metadata=client.V1ObjectMeta(name="tether-system"))
        )
    except client.ApiException as e:
        if e.status != 409:
            raise
    creators = {
        "ServiceAccount": lambda b: core.create_namespaced_service_account(
            b["metadata"]["namespace"], b
        ),
        "ClusterRole": lambda b: rbac.create_cluster_role(b),
        "ClusterRoleBinding": lambda b: rbac.create_cluster_role_binding(b),
        "Role": lambda b: rbac.create_namespaced_role(b["metadata"]["namespace"], b),
        "RoleBinding": lambda b: rbac.create_namespaced_role_binding(b["metadata"]["namespace"], b),
    }
    for doc in yaml.safe_load_all(SKR_RBAC.read_text()):
        try:
            creators[doc["kind"]](doc)
        except client.ApiException as e:
            if e.status != 409:
                raise
    dest = tmp_path_factory.mktemp("poller-rbac") / "kubeconfig"
    return skr.issue_client_cert(
        SA_USER, ("system:serviceaccounts", "system:serviceaccounts:tether-system"), dest=dest
    )


@pytest.fixture
def pollers(tmp_path: pathlib.Path) -> Iterator[Callable[[str, dict[str, str]], PollerProcess]]:
    started: list[PollerProcess] = []

    def make(name: str, env: dict[str, str]) -> PollerProcess:
        p = PollerProcess(tmp_path, name, env).start()
        started.append(p)
        return p

    yield make
    for p in started:
        p.stop()
