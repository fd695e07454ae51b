"""Fixtures of the enroller tests: two runtime planes per module, the RuntimeEnrollment CRD
in the session's KCP, and ``enrollenv.Env`` in the test's own KCP namespace."""

from __future__ import annotations

import pathlib
from collections.abc import Iterator

import pytest
from kubernetes import client

from testing import controlplane, watchenv
from testing.enrollenv import CRD, Env


@pytest.fixture(scope="module")
def runtimes() -> Iterator[list[controlplane.ControlPlane]]:
    with controlplane.planes("enr-a", "enr-b") as p:
        yield [p["enr-a"], p["enr-b"]]


@pytest.fixture(scope="module")
def enrollment_crd(kcp_api: client.ApiClient) -> None:
    controlplane.install_crds(kcp_api, CRD)


@pytest.fixture
def env(
    kcp: controlplane.ControlPlane,
    kcp_namespace: str,
    kyma_crd: str,
    enrollment_crd: None,
    tmp_path: pathlib.Path,
) -> Iterator[Env]:
    e = Env(kcp, kcp_namespace, tmp_path)
    # the shared KCP may hold the Watch CRD (other tests install it): the Watch of every
    # ConfigMap keeps the runtime's webhook what these tests expect, in any order
    watchenv.all_configmaps(e.api, kcp_namespace)
    yield e
    # release finalizers so the namespace's Kyma CRs can go
    custom = client.CustomObjectsApi(e.api)
    for k in custom.list_namespaced_custom_object(
        "operator.kyma-project.io", "v1beta2", e.ns, "kymas"
    )["items"]:
        custom.patch_namespaced_custom_object(
            "operator.kyma-project.io",
            "v1beta2",
            e.ns,
            "kymas",
            k["metadata"]["name"],
            {"metadata": {"finalizers": None}},
        )
    e.gw.close()
    e.api.close()
