"""Rate limiting (per-runtime token bucket, in-flight cap): 429 with Retry-After, counted
and audited, nothing persisted; metrics have no per-runtime series."""

from __future__ import annotations

import socket
import ssl
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kubernetes import client

from listener import heartbeat
from tests.listener.conftest import Env, ListenerProcess, Runtime, metric_value


@pytest.fixture(scope="module")
def limited(listener_env: Env) -> Iterator[ListenerProcess]:
    p = ListenerProcess(listener_env, "limited", TETHER_LISTENER_RATE_BURST="3",
                        TETHER_LISTENER_RATE_PER_SECOND="0.05", TETHER_LISTENER_MAX_IN_FLIGHT="1",
                        TETHER_LISTENER_THREADS="4")
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


def test_in_flight_cap(limited: ListenerProcess, runtime: Callable[..., Runtime]) -> None:
    rt, other = runtime(), runtime()
    env = rt.env
    ctx = ssl.create_default_context(cafile=str(env.server_ca_file))
    ctx.load_cert_chain(str(rt.cert_file), str(rt.key_file))
    raw = socket.create_connection(("127.0.0.1", limited.port), timeout=10)
    held = ctx.wrap_socket(raw, server_hostname="127.0.0.1")
    try:
        # a request whose body never completes holds the only in-flight slot
        held.sendall(f"POST /v1/runtimes/{rt.id}/changes HTTP/1.1\r\nHost: x\r\n"
                     "Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
                     "1\r\n{\r\n".encode())
        s = other.session()
        error = None
        for _ in range(100):  # until the server has read the headers and holds the slot
            r = s.get(f"{limited.url}/v1/runtimes/{other.id}/state", timeout=10)
            error = r.json()["error"] if r.status_code == 429 else None
            if error == "too many requests in flight":
                assert r.headers["Retry-After"] == "1"
                break
            time.sleep(0.05)
        assert error == "too many requests in flight"
    finally:
        held.close()
    assert metric_value(limited.metrics(), "tether_listener_rate_limited_total",
                        limit="in_flight") >= 1


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
