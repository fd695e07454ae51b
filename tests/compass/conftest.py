"""Fixtures for compass tests: the mapping CRD in the KCP, the stand-in Director over
HTTPS, extra runtime planes, and helpers that build Kyma CRs, kubeconfig Secrets and the
compass service exactly as the entry point does."""

from __future__ import annotations

import concurrent.futures
from collections.abc import Iterator

import pytest
from kubernetes import client

from standins.director import server as server_mod
from standins.director import store as store_mod
from testing import controlplane
from testing.compassenv import (
    CRD_FILE,
    EXTRA_PLANES,
    Director,
)


@pytest.fixture(scope="session")
def mapping_crd(kcp_api: client.ApiClient, kyma_crd: str) -> str:
    return controlplane.install_crds(kcp_api, CRD_FILE)[0]


@pytest.fixture(scope="session")
def director(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Director]:
    ca, cert, key = server_mod.self_signed(tmp_path_factory.mktemp("director-tls"))
    store = store_mod.Store(client_secret="s3cr3t-for-tests")
    srv = server_mod.DirectorServer(store, cert, key).start()
    store.connector_url = f"{srv.url}/connector/graphql"
    yield Director(srv, ca)
    srv.stop()


@pytest.fixture
def clean_director(director: Director) -> Director:
    """The stand-in with no faults injected (state of earlier tests stays; tests use
    their own tenants)."""
    director.store.set_faults(store_mod.Faults())
    director.store.one_time_token_ttl = 600
    return director


@pytest.fixture(scope="module")
def runtime_planes(skr: controlplane.ControlPlane) -> Iterator[list[controlplane.ControlPlane]]:
    """20 runtime planes: the session's SKR plane and 19 more, started 4 at a time
    (about 330 MB and a few CPU-seconds each), stopped after the module."""
    started: list[controlplane.ControlPlane] = []

    def start(i: int) -> controlplane.ControlPlane:
        return controlplane.ControlPlane(f"rt{i}").start()  # retries a taken port itself

    try:
        with concurrent.futures.ThreadPoolExecutor(4) as ex:
            futs = [ex.submit(start, i) for i in range(EXTRA_PLANES)]
            for f in futs:
                started.append(f.result())
        yield [skr, *started]
    finally:
        for p in started:
            p.stop()
