"""Generate the Grafana dashboards in manifests/monitoring/dashboards/ (run after editing).

    .venv/bin/python hack/gen-dashboards.py

Kept as code so that panels stay uniform; tests check the committed JSON matches.
"""

from __future__ import annotations

import json
import pathlib
from typing import Any

OUT = pathlib.Path(__file__).resolve().parents[1] / "manifests" / "monitoring" / "dashboards"
DS = {"type": "prometheus", "uid": "${datasource}"}


def panel(pid: int, title: str, exprs: list[tuple[str, str]], x: int, y: int,
          unit: str = "short", kind: str = "timeseries", w: int = 12) -> dict[str, Any]:
    return {
        "id": pid, "type": kind, "title": title, "datasource": DS,
        "gridPos": {"h": 8, "w": w, "x": x, "y": y},
        "fieldConfig": {"defaults": {"unit": unit}, "overrides": []},
        "targets": [{"refId": chr(65 + i), "expr": e, "legendFormat": legend, "datasource": DS}
                    for i, (e, legend) in enumerate(exprs)],
    }


def row(pid: int, title: str, y: int) -> dict[str, Any]:
    return {"id": pid, "type": "row", "title": title, "collapsed": False,
            "gridPos": {"h": 1, "w": 24, "x": 0, "y": y}, "panels": []}


def dashboard(uid: str, title: str, panels: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "uid": uid, "title": title, "tags": ["tether"], "timezone": "utc",
        "schemaVersion": 39, "version": 1, "refresh": "30s",
        "time": {"from": "now-6h", "to": "now"},
        "templating": {"list": [{"name": "datasource", "type": "datasource",
                                 "query": "prometheus", "label": "Data source"}]},
        "panels": panels,
    }


def change_detection() -> dict[str, Any]:
    p: list[dict[str, Any]] = [row(1, "Webhook (runtime): admission and forwarding failures", 0)]
    p += [
        panel(2, "Admissions by outcome", [("sum by (outcome) (rate(tether_webhook_admission_requests_total[5m]))", "{{outcome}}")], 0, 1, "reqps"),
        panel(3, "Admission handler latency p50/p99", [
            ("histogram_quantile(0.5, sum by (le) (rate(tether_webhook_admission_handler_seconds_bucket[5m])))", "p50"),
            ("histogram_quantile(0.99, sum by (le) (rate(tether_webhook_admission_handler_seconds_bucket[5m])))", "p99")], 12, 1, "s"),
        panel(4, "Forwards by result and reason", [("sum by (result, reason) (rate(tether_webhook_forwards_total[5m]))", "{{result}} {{reason}}")], 0, 9, "reqps"),
        panel(5, "Forward failure ratio", [("sum(rate(tether_webhook_forwards_total{result!=\"ok\"}[5m])) / sum(rate(tether_webhook_forwards_total[5m]))", "failing")], 12, 9, "percentunit"),
        panel(6, "Queue depth, coalesced, overflowed", [
            ("sum(tether_webhook_queue_depth)", "depth"),
            ("sum(rate(tether_webhook_queue_coalesced_total[5m]))", "coalesced/s"),
            ("sum(rate(tether_webhook_queue_overflowed_total[5m]))", "overflowed/s")], 0, 17),
        panel(7, "Seconds since last successful forward", [("time() - max(tether_webhook_last_forward_success_timestamp_seconds)", "seconds")], 12, 17, "s", "stat"),
        panel(8, "Forward latency p99", [("histogram_quantile(0.99, sum by (le) (rate(tether_webhook_forward_seconds_bucket[5m])))", "p99")], 0, 25, "s"),
        panel(9, "Read-backs by result", [("sum by (result) (rate(tether_webhook_readbacks_total[5m]))", "{{result}}")], 12, 25, "reqps"),
        row(10, "Listener (KCP)", 33),
        panel(11, "Requests by route and code", [("sum by (route, code) (rate(tether_listener_requests_total[5m]))", "{{route}} {{code}}")], 0, 34, "reqps"),
        panel(12, "Auth refusals by reason", [("sum by (reason) (rate(tether_listener_auth_refusals_total[5m]))", "{{reason}}")], 12, 34, "reqps"),
        panel(13, "Records by outcome", [("sum by (outcome) (rate(tether_listener_records_total[5m]))", "{{outcome}}")], 0, 42, "ops"),
        panel(14, "Persist latency p99", [("histogram_quantile(0.99, sum by (le) (rate(tether_listener_persist_seconds_bucket[5m])))", "p99")], 12, 42, "s"),
        panel(15, "Validation failures, rate limited, KCP unavailable", [
            ("sum by (reason) (rate(tether_listener_validation_failures_total[5m]))", "invalid {{reason}}"),
            ("sum by (limit) (rate(tether_listener_rate_limited_total[5m]))", "429 {{limit}}"),
            ("sum(rate(tether_listener_kcp_unavailable_total[5m]))", "503 KCP")], 0, 50, "reqps"),
        panel(16, "Runtimes silent longer than threshold", [("max by (threshold_seconds) (tether_listener_runtimes_silent)", ">{{threshold_seconds}}s")], 12, 50),
        row(17, "Poller (runtime)", 58),
        panel(18, "Runs by outcome", [("sum by (outcome) (increase(tether_poller_runs_total[15m]))", "{{outcome}}")], 0, 59),
        panel(19, "Differences found (changes the webhook path missed)", [("sum by (type) (increase(tether_poller_differences_total[15m]))", "{{type}}")], 12, 59),
        panel(20, "Run duration p99", [("histogram_quantile(0.99, sum by (le) (rate(tether_poller_run_duration_seconds_bucket[1h])))", "p99")], 0, 67, "s"),
        panel(21, "Seconds since last successful run", [("time() - max(tether_poller_last_success_timestamp_seconds)", "seconds")], 12, 67, "s", "stat"),
    ]
    return dashboard("tether-change-detection", "Tether: change detection", p)


def compass() -> dict[str, Any]:
    p = [
        panel(1, "Kyma CRs by mapping state", [("max by (state) (tether_compass_runtimes)", "{{state}}")], 0, 0),
        panel(2, "Actions by type and result", [("sum by (action, result) (rate(tether_compass_actions_total[5m]))", "{{action}} {{result}}")], 12, 0, "ops"),
        panel(3, "Director latency p99 by operation", [("histogram_quantile(0.99, sum by (le, operation) (rate(tether_compass_director_request_seconds_bucket[5m])))", "{{operation}}")], 0, 8, "s"),
        panel(4, "Director errors by kind", [("sum by (kind) (rate(tether_compass_director_errors_total[5m]))", "{{kind}}")], 12, 8, "reqps"),
        panel(5, "Circuit breaker (0 closed, 1 half-open, 2 open)", [("max(tether_compass_director_circuit_state)", "state")], 0, 16, "short", "stat"),
        panel(6, "Seconds since last run", [("time() - max(tether_compass_last_run_timestamp_seconds)", "seconds")], 12, 16, "s", "stat"),
    ]
    return dashboard("tether-compass", "Tether: Compass connectivity", p)


def render() -> dict[str, str]:
    return {
        "tether-change-detection.json": json.dumps(change_detection(), indent=1) + "\n",
        "tether-compass.json": json.dumps(compass(), indent=1) + "\n",
    }


if __name__ == "__main__":
    OUT.mkdir(parents=True, exist_ok=True)
    for name, text in render().items():
        (OUT / name).write_text(text)
        print(f"wrote {OUT / name}")
