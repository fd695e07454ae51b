"""Metrics and the OpenAPI document served by a running listener."""

from __future__ import annotations

import json
import pathlib
from collections.abc import Callable
from typing import Any

import pytest
import requests

from listener.edge import openapi
from testing.listenerenv import ListenerProcess, Runtime, metric_value

pytestmark = pytest.mark.processes  # starts processes of its own (testing/tiers.py)


def test_metrics_after_traffic(listener: ListenerProcess, runtime: Callable[..., Runtime]) -> None:
    rt = runtime()
    s = rt.session()
    route = "/v1/runtimes/<runtime_id>/changes"
    before = listener.metrics()
    r = s.post(f"{listener.url}/v1/runtimes/{rt.id}/changes", json=rt.record("m", 3), timeout=10)
    assert r.status_code == 200
    assert s.get(f"{listener.url}/v1/runtimes/{rt.id}/state", timeout=10).status_code == 200
    after = listener.metrics()
    name = "tether_listener_requests_total"
    assert (
        metric_value(after, name, route=route, method="POST", code="200")
        == metric_value(before, name, route=route, method="POST", code="200") + 1
    )
    assert metric_value(after, "tether_listener_records_total", outcome="persisted") >= 1
    assert metric_value(after, "tether_listener_persist_seconds_count", outcome="persisted") >= 1
    # liveness from the heartbeat Leases, bounded: one series per threshold
    assert metric_value(after, "tether_listener_runtimes_seen") >= 1
    for th in ("60", "300", "900", "3600"):
        assert f'tether_listener_runtimes_silent{{threshold_seconds="{th}"}}' in after
    assert rt.id not in after


def test_request_metrics_of_the_exporter_by_route(
    listener: ListenerProcess, runtime: Callable[..., Runtime]
) -> None:
    """prometheus-flask-exporter's request metrics (issue 28, item 8) appear in the
    listener's own /metrics on the operations port, labelled by URL rule: neither the runtime
    ID of the path nor an unknown path becomes a label value."""
    rt = runtime()
    s = rt.session()
    route = "/v1/runtimes/<runtime_id>/changes"
    name = "tether_listener_http_request_duration_seconds_count"
    before = listener.metrics()
    assert (
        s.post(
            f"{listener.url}/v1/runtimes/{rt.id}/changes", json=rt.record("x", 1), timeout=10
        ).status_code
        == 200
    )
    for path in ("/no-such-path-1", f"/v1/runtimes/{rt.id}/nothing-here"):
        assert s.get(f"{listener.url}{path}", timeout=10).status_code == 404
    after = listener.metrics()
    assert (
        metric_value(after, name, method="POST", route=route, status="200")
        == metric_value(before, name, method="POST", route=route, status="200") + 1
    )
    assert (
        metric_value(after, name, method="GET", route="unmatched", status="404")
        >= metric_value(before, name, method="GET", route="unmatched", status="404") + 2
    )
    assert "no-such-path" not in after and "nothing-here" not in after and rt.id not in after
    assert after.count("# TYPE tether_listener_http_request_duration_seconds histogram") == 1
    # the exporter serves no /metrics of its own on the data port
    r = requests.get(f"{listener.url}/metrics", verify=str(listener.env.server_ca_file), timeout=10)
    assert r.status_code == 404


def test_health_readiness_and_openapi(listener: ListenerProcess) -> None:
    ca = str(listener.env.server_ca_file)
    assert requests.get(f"{listener.url}/healthz", verify=ca, timeout=10).json() == {"status": "ok"}
    r = requests.get(f"{listener.ops_url}/readyz", timeout=10)
    assert r.status_code == 200 and r.json() == {"status": "ready"}
    # readiness and metrics are not served to the internet on the data port
    for path in ("/readyz", "/metrics"):
        r = requests.get(f"{listener.url}{path}", verify=ca, timeout=10)
        assert r.status_code == 404 and "operations port" in r.json()["details"]
    assert requests.get(f"{listener.ops_url}/healthz", timeout=10).status_code == 200
    doc = requests.get(f"{listener.url}/openapi.json", verify=ca, timeout=10).json()
    assert doc == json.loads(openapi.render())


def test_two_workers_share_metrics_in_multiprocess_mode(
    listener_env: Any, runtime: Callable[..., Runtime], tmp_path: pathlib.Path
) -> None:
    p = ListenerProcess(
        listener_env, "multi", TETHER_LISTENER_WORKERS="2", PROMETHEUS_MULTIPROC_DIR=str(tmp_path)
    )
    try:
        rt = runtime()
        s = rt.session()
        for i in range(6):  # new connections: the kernel spreads them over both workers
            s.close()
            r = s.post(
                f"{p.url}/v1/runtimes/{rt.id}/changes", json=rt.record(f"o{i}", 1), timeout=60
            )
            assert r.status_code == 200, r.text
        text = p.metrics()
        assert metric_value(text, "tether_listener_records_total", outcome="persisted") == 6
        # values live in per-worker files; whichever worker answers the scrape sums them all
        assert list(tmp_path.glob("counter_*.db"))
        assert (
            metric_value(
                text,
                "tether_listener_requests_total",
                route="/v1/runtimes/<runtime_id>/changes",
                method="POST",
                code="200",
            )
            == 6
        )
        assert (
            metric_value(
                text,
                "tether_listener_http_request_duration_seconds_count",
                route="/v1/runtimes/<runtime_id>/changes",
                method="POST",
                status="200",
            )
            == 6
        )
    finally:
        p.stop()
