"""Rate limiting (per-runtime token bucket): 429 with Retry-After, counted and audited,
nothing persisted; metrics have no per-runtime series. The per-runtime in-flight cap and
the connection limits are tested in test_slow_clients.py."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kubernetes import client

from listener.fleet import heartbeat
from testing import cgroups
from testing.listenerenv import ConfinedListenerProcess, Env, ListenerProcess, Runtime, metric_value

pytestmark = pytest.mark.processes  # starts processes of its own (testing/tiers.py)


@pytest.fixture(scope="module")
def limited(listener_env: Env) -> Iterator[ListenerProcess]:
    """Under the Deployment's memory limit: never OOM-killed (checked when it stops)."""
    p = ConfinedListenerProcess(
        listener_env,
        "limited",
        TETHER_LISTENER_RATE_BURST="3",
        TETHER_LISTENER_RATE_PER_SECOND="0.05",
        TETHER_LISTENER_THREADS="4",
    )
    yield p
    p.stop()
    cgroups.held(p.usage, "limited listener")


def test_per_runtime_rate_limit(limited: ListenerProcess, runtime: Callable[..., Runtime]) -> None:
    rt, other = runtime(), runtime()
    s = rt.session()
    url = f"{limited.url}/v1/runtimes/{rt.id}/changes"
    ok = s.post(
        url,
        json={
            "apiVersion": "tether.kyma-project.io/v1",
            "kind": "ConfigMapChangeList",
            "items": [rt.record(n, 1) for n in ("a", "b", "c")],
        },
        timeout=10,
    )
    assert ok.status_code == 200, ok.text
    refused = s.post(url, json=rt.record("d", 1), timeout=10)
    assert refused.status_code == 429
    assert int(refused.headers["Retry-After"]) >= 1
    assert refused.json()["error"] == "rate limited"
    assert rt.env.stored_one(rt.id, "team-a", "d") is None
    # another runtime has its own bucket
    r = other.session().post(
        f"{limited.url}/v1/runtimes/{other.id}/changes", json=other.record("a", 1), timeout=10
    )
    assert r.status_code == 200
    text = limited.metrics()
    assert metric_value(text, "tether_listener_rate_limited_total", limit="runtime") >= 1
    assert rt.id not in text and other.id not in text
    assert any(e.get("event") == "rate_limited" and e["runtime"] == rt.id for e in limited.audit())


def test_heartbeat_writes_are_throttled(
    limited: ListenerProcess, runtime: Callable[..., Runtime]
) -> None:
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


def test_a_runtime_over_its_rate_is_refused_in_the_main_loop_on_a_kept_connection(
    limited: ListenerProcess, runtime: Callable[..., Runtime]
) -> None:
    """Once its bucket is empty, a runtime's requests are answered 429 by the worker before
    any thread or parse (tether.http.httpworker early answer): the connection stays usable, the
    429s are counted, audited in aggregate, and another runtime's path is still refused 403
    by the application."""
    rt = runtime()
    s = rt.session()
    url = f"{limited.url}/v1/runtimes/{rt.id}/changes"
    batch = {
        "apiVersion": "tether.kyma-project.io/v1",
        "kind": "ConfigMapChangeList",
        "items": [rt.record(n, 1) for n in ("a", "b", "c")],
    }
    assert s.post(url, json=batch, timeout=10).status_code == 200  # the whole burst (3)
    before = metric_value(limited.metrics(), "tether_listener_rate_limited_total", limit="runtime")
    for i in range(20):  # one kept-alive connection (requests' pool), each answered 429
        r = s.post(url, json=rt.record(f"x{i}", 1), timeout=10)
        assert r.status_code == 429 and r.json()["error"] == "rate limited", r.text
        assert int(r.headers["Retry-After"]) >= 1
    assert s.get(f"{limited.url}/v1/runtimes/{rt.id}/state", timeout=10).status_code == 429
    other = runtime()
    r = s.get(f"{limited.url}/v1/runtimes/{other.id}/state", timeout=10)
    assert r.status_code == 403  # the early path answers only a runtime's own path
    after = metric_value(limited.metrics(), "tether_listener_rate_limited_total", limit="runtime")
    assert after - before >= 21
    lines = [
        e for e in limited.audit() if e.get("event") == "rate_limited" and e.get("runtime") == rt.id
    ]
    assert 1 <= len(lines) <= 2  # aggregated: not a line per refusal
    assert all(rt.env.stored_one(rt.id, "team-a", f"x{i}") is None for i in range(20))
