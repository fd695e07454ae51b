"""The admin pages on the session's KCP plane: ``admin_env`` (CRDs, namespaces, the
manifests' RBAC for the admin part, fleet objects made by the tests) and ``admin`` (one
``tether admin`` process for the module)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from kubernetes import client

from testing import adminenv, controlplane


@pytest.fixture(scope="module")
def admin_env(
    kcp: controlplane.ControlPlane,
    kcp_api: client.ApiClient,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[adminenv.Env]:
    adminenv.install_crds(kcp_api)
    env = adminenv.Env(kcp, kcp_api, tmp_path_factory.mktemp("admin"))
    yield env
    env.cleanup()


@pytest.fixture(scope="module")
def admin(admin_env: adminenv.Env) -> Iterator[adminenv.AdminProcess]:
    p = adminenv.AdminProcess(admin_env)
    yield p
    p.stop()
