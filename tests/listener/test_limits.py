"""Rate limiting (per-runtime token bucket): 429 with Retry-After, counted and audited,
nothing persisted; metrics have no per-runtime series. The per-runtime in-flight cap and
the connection limits are tested in test_slow_clients.py."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kubernetes import client

from listener import heartbeat
from tests.listener.conftest import Env, ListenerProcess, Runtime, metric_value


@pytest.fixture(scope="module")
def limited(listener_env: Env) -> Iterator[ListenerProcess]:
    p = ListenerProcess(listener_env, "limited", TETHER_LISTENER_RATE_BURST="3",
                        TETHER_LISTENER_RATE_PER_SECOND="0.05", TETHER_LISTENER_THREADS="4")
    yield p
    p.stop()


def test_per_runtime_rate_limit(limited: ListenerProcess, runtime: Callable[..., Runtime]) -> None:
    rt, other = runtime(), runtime()
    s = rt.session()
    url = f"{limited.url}/v1/runtimes/{rt.id}/changes"
    ok = s.post(url, json={"apiVersion": "tether.kyma-project.io/v1", "kind": "ConfigMapChangeList",
                           "items": [rt.record(n, 1) for n in ("a", "b", "c")]}, timeout=10)
    assert ok.status_code == 200, ok.text
    refused = s.post(url, json=rt.record("d", 1), timeout=10)
    assert refused.status_code == 429
    assert int(refused.headers["Retry-After"]) >= 1
    assert refused.json()["error"] == "rate limited"
    assert rt.env.stored_one(rt.id, "team-a", "d") is None
    # another runtime has its own bucket
    r = other.session().post(f"{limited.url}/v1/runtimes/{other.id}/changes",
                             json=other.record("a", 1), timeout=10)
    assert r.status_code == 200
    text = limited.metrics()
    assert metric_value(text, "tether_listener_rate_limited_total", limit="runtime") >= 1
    assert rt.id not in text and other.id not in text
    assert any(e.get("event") == "rate_limited" and e["runtime"] == rt.id for e in limited.audit())


def test_heartbeat_writes_are_throttled(limited: ListenerProcess,
                                        runtime: Callable[..., Runtime]) -> None:
    """With the default interval (30 s) a second call soon after does not rewrite the Lease."""
    rt = runtime()
    s = rt.session()
    assert s.get(f"{limited.url}/v1/runtimes/{rt.id}/state", timeout=10).status_code == 200
    leases = client.CoordinationV1Api(rt.env.api)
    first: Any = leases.read_namespaced_lease(heartbeat.lease_name(rt.id), rt.env.namespace)
    assert s.get(f"{limited.url}/v1/runtimes/{rt.id}/state", timeout=10).status_code == 200
    again: Any = leases.read_namespaced_lease(heartbeat.lease_name(rt.id), rt.env.namespace)
    assert again.metadata.resource_version == first.metadata.resource_version
    assert again.spec.holder_identity == rt.id
