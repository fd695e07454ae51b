"""KCP apiserver stopped: the listener answers 503 with a jittered Retry-After and
acknowledges nothing, but answers a known runtime's heartbeat (its state summary) from
what it last read (``listener.fleet.outage``), and only within its bound (a second
listener with a bound of 20 s and no Kyma cache: 200 early in the outage, 503 past the
bound: a revoked runtime is accepted no longer than that); after the restart the same
records are persisted. The plane is always restored."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import requests

from testing import controlplane
from testing.listenerenv import ListenerProcess, Runtime

BOUND = 20  # seconds: the second listener's TETHER_LISTENER_OUTAGE_CACHE_SECONDS


class Outage:
    def __init__(self, kcp: controlplane.ControlPlane) -> None:
        self.kcp = kcp
        self.down = False

    def begin(self) -> None:
        self.kcp.stop_apiserver()
        self.down = True

    def end(self) -> None:
        if self.down:
            self.kcp.start_apiserver()
            self.down = False


@pytest.fixture
def outage(kcp: controlplane.ControlPlane) -> Iterator[Outage]:
    o = Outage(kcp)
    yield o
    o.end()  # restores the shared plane even when the test failed


def test_kcp_down_gives_503_then_writes_succeed(
    listener: ListenerProcess,
    runtime: Callable[..., Runtime],
    outage: Outage,
) -> None:
    seen, fresh = runtime(), runtime()
    url = f"{listener.url}/v1/runtimes/{seen.id}/changes"
    s = seen.session()
    assert (
        s.post(url, json=seen.record("a", 1), timeout=10).json()["results"][0]["outcome"]
        == "persisted"
    )
    # a second listener: no Kyma cache, the outage cache's bound BOUND s (the revocation delay)
    bounded = ListenerProcess(
        seen.env,
        "outage-bounded",
        TETHER_LISTENER_KYMA_CACHE_SECONDS="0",
        TETHER_LISTENER_OUTAGE_CACHE_SECONDS=str(BOUND),
    )
    try:
        pending = _kcp_down(listener, bounded, seen, fresh, outage)
    finally:
        bounded.stop()

    outage.end()
    assert s.post(url, json=pending, timeout=30).json()["results"][0]["outcome"] == "persisted"
    stored = seen.env.stored_one(seen.id, "team-a", "a")
    assert stored is not None and stored["spec"]["resourceVersion"] == "2"
    r = fresh.session().post(
        f"{listener.url}/v1/runtimes/{fresh.id}/changes", json=fresh.record("b", 1), timeout=30
    )
    assert r.status_code == 200 and r.json()["results"][0]["outcome"] == "persisted"
    assert "tether_listener_kcp_unavailable_total" in listener.metrics()


def _kcp_down(
    listener: ListenerProcess,
    bounded: ListenerProcess,
    seen: Runtime,
    fresh: Runtime,
    outage: Outage,
) -> dict[str, Any]:
    """The outage's answers; returns the change refused meanwhile."""
    s = seen.session()
    url = f"{listener.url}/v1/runtimes/{seen.id}/changes"
    summary_url = f"{listener.url}/v1/runtimes/{seen.id}/state/summary"
    bounded_url = f"{bounded.url}/v1/runtimes/{seen.id}/state/summary"
    before = s.get(summary_url, params={"identity": "cluster-1"}, timeout=30)
    assert before.status_code == 200, before.text
    early = s.get(bounded_url, params={"identity": "cluster-1"}, timeout=30)
    read_at = time.monotonic()
    assert early.status_code == 200, early.text

    outage.begin()
    # its Kyma CR not cached (looked up: fails) and its summary: both from the last read
    again = s.get(bounded_url, params={"identity": "cluster-1"}, timeout=30)
    assert again.status_code == 200 and time.monotonic() - read_at < BOUND, again.text
    assert again.json() == early.json()
    assert 'tether_listener_outage_answers_total{what="identity"}' in bounded.metrics()
    pending = seen.record("a", 2)
    for resp in (
        s.post(url, json=pending, timeout=30),  # Kyma CR cached: write fails
        s.get(f"{listener.url}/v1/runtimes/{seen.id}/state", timeout=30),
        s.get(summary_url, params={"identity": "cluster-2"}, timeout=30),  # another identity
        fresh.session().post(
            f"{listener.url}/v1/runtimes/{fresh.id}/changes",  # lookup fails
            json=fresh.record("b", 1),
            timeout=30,
        ),
        requests.get(f"{listener.ops_url}/readyz", timeout=30),
    ):
        assert resp.status_code == 503, resp.text
        assert resp.headers["Retry-After"] in ("2", "3")  # 2 s, jittered up to 2 x 2 s
        assert resp.json()["error"] in ("KCP API unavailable", "not ready")
    # the heartbeat of a runtime it knows: the summary last read (the poller finds it in
    # sync and resends nothing), past the Kyma cache's 10 s (read again: answered stale)
    time.sleep(11)
    during = s.get(summary_url, params={"identity": "cluster-1"}, timeout=30)
    assert during.status_code == 200, during.text
    assert during.json() == before.json()
    assert 'tether_listener_outage_answers_total{what="summary"}' in listener.metrics()
    assert s.get(f"{listener.url}/healthz", timeout=10).status_code == 200
    # past the bound the identity last read is no longer trusted: 503 again
    time.sleep(max(0.0, read_at + BOUND + 1 - time.monotonic()))
    late = s.get(bounded_url, params={"identity": "cluster-1"}, timeout=30)
    assert late.status_code == 503 and late.json()["error"] == "KCP API unavailable", late.text
    return pending
