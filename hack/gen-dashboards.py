"""Generate the Grafana dashboards in manifests/monitoring/dashboards/ (run after editing).

    .venv/bin/python hack/gen-dashboards.py

Kept as code so that panels stay uniform; tests check the committed JSON matches.

Every dashboard has the variables `cluster` and `runtime` (label values of `cluster` and
`runtime_id`; "All" is the regex .*, which also matches series without the label). A
runtime's series (webhook, poller, its apiserver) are filtered by both (SKR below), the
KCP's by cluster (KCP below).
"""

from __future__ import annotations

import json
import pathlib
from typing import Any

OUT = pathlib.Path(__file__).resolve().parents[1] / "manifests" / "monitoring" / "dashboards"
DS = {"type": "prometheus", "uid": "${datasource}"}
KCP = 'cluster=~"$cluster"'
SKR = 'cluster=~"$cluster", runtime_id=~"$runtime"'
# the webhook's name in manifests/skr/webhook/validatingwebhookconfiguration.yaml: the
# runtime apiserver's admission metrics name it in their `name` label
WEBHOOK = 'name="configmaps.tether.kyma-project.io"'
APISERVER = f"{SKR}, {WEBHOOK}"
REVIEW = "tether_webhook_http_request_duration_seconds"  # a review's one histogram


def panel(
    pid: int,
    title: str,
    exprs: list[tuple[str, str]],
    x: int,
    y: int,
    unit: str = "short",
    kind: str = "timeseries",
    w: int = 12,
) -> dict[str, Any]:
    # a table shows the current value of each series (instant query), one row each
    table = {"instant": True, "format": "table"} if kind == "table" else {}
    return {
        "id": pid,
        "type": kind,
        "title": title,
        "datasource": DS,
        "gridPos": {"h": 8, "w": w, "x": x, "y": y},
        "fieldConfig": {"defaults": {"unit": unit}, "overrides": []},
        "targets": [
            {"refId": chr(65 + i), "expr": e, "legendFormat": legend, "datasource": DS, **table}
            for i, (e, legend) in enumerate(exprs)
        ],
    }


def row(pid: int, title: str, y: int) -> dict[str, Any]:
    return {
        "id": pid,
        "type": "row",
        "title": title,
        "collapsed": False,
        "gridPos": {"h": 1, "w": 24, "x": 0, "y": y},
        "panels": [],
    }


def variable(name: str, label: str, query: str) -> dict[str, Any]:
    return {
        "name": name,
        "label": label,
        "type": "query",
        "datasource": DS,
        "query": {"query": query, "refId": f"{name}-values"},
        "definition": query,
        "refresh": 2,
        "sort": 1,
        "multi": True,
        "includeAll": True,
        "allValue": ".*",
        "current": {"selected": True, "text": ["All"], "value": ["$__all"]},
    }


def dashboard(
    uid: str, title: str, panels: list[dict[str, Any]], runtimes: str = "tether_poller_leader"
) -> dict[str, Any]:
    """``runtimes``: the metric whose runtime_id values the runtime variable offers."""
    return {
        "uid": uid,
        "title": title,
        "tags": ["tether"],
        "timezone": "utc",
        "schemaVersion": 39,
        "version": 1,
        "refresh": "30s",
        "time": {"from": "now-6h", "to": "now"},
        "templating": {
            "list": [
                {
                    "name": "datasource",
                    "type": "datasource",
                    "query": "prometheus",
                    "label": "Data source",
                },
                variable("cluster", "Cluster", 'label_values(up{job=~"tether-.*"}, cluster)'),
                variable("runtime", "Runtime", f"label_values({runtimes}{{{KCP}}}, runtime_id)"),
            ]
        },
        "panels": panels,
    }


def change_detection() -> dict[str, Any]:
    p: list[dict[str, Any]] = [row(1, "Webhook (runtime): admission and forwarding failures", 0)]
    p += [
        panel(
            2,
            "Admissions by outcome",
            [
                (
                    "sum by (outcome) "
                    f"(rate(tether_webhook_admission_requests_total{{{SKR}}}[5m]))",
                    "{{outcome}}",
                )
            ],
            0,
            1,
            "reqps",
        ),
        panel(
            3,
            "Admission review latency p50/p99",
            [
                (
                    "histogram_quantile(0.5, sum by (le) (rate("
                    f'{REVIEW}_bucket{{{SKR}, route="/validate"}}[5m])))',
                    "p50",
                ),
                (
                    "histogram_quantile(0.99, sum by (le) (rate("
                    f'{REVIEW}_bucket{{{SKR}, route="/validate"}}[5m])))',
                    "p99",
                ),
            ],
            12,
            1,
            "s",
        ),
        panel(
            4,
            "Forwards by result and reason",
            [
                (
                    f"sum by (result, reason) (rate(tether_webhook_forwards_total{{{SKR}}}[5m]))",
                    "{{result}} {{reason}}",
                )
            ],
            0,
            9,
            "reqps",
        ),
        panel(
            5,
            "Forward failure ratio",
            [
                (
                    f'sum(rate(tether_webhook_forwards_total{{{SKR}, result!="ok"}}[5m])) / '
                    f"sum(rate(tether_webhook_forwards_total{{{SKR}}}[5m]))",
                    "failing",
                )
            ],
            12,
            9,
            "percentunit",
        ),
        panel(
            6,
            "Queue depth, coalesced, overflowed",
            [
                (f"sum(tether_webhook_queue_depth{{{SKR}}})", "depth"),
                (f"sum(rate(tether_webhook_queue_coalesced_total{{{SKR}}}[5m]))", "coalesced/s"),
                (f"sum(rate(tether_webhook_queue_overflowed_total{{{SKR}}}[5m]))", "overflowed/s"),
            ],
            0,
            17,
        ),
        panel(
            7,
            "Seconds since last successful forward",
            [
                (
                    f"time() - max(tether_webhook_last_forward_success_timestamp_seconds{{{SKR}}})",
                    "seconds",
                )
            ],
            12,
            17,
            "s",
            "stat",
        ),
        panel(
            8,
            "Forward latency p99",
            [
                (
                    "histogram_quantile(0.99, sum by (le) "
                    f"(rate(tether_webhook_forward_seconds_bucket{{{SKR}}}[5m])))",
                    "p99",
                )
            ],
            0,
            25,
            "s",
        ),
        panel(
            9,
            "Read-backs by result",
            [
                (
                    f"sum by (result) (rate(tether_webhook_readbacks_total{{{SKR}}}[5m]))",
                    "{{result}}",
                )
            ],
            12,
            25,
            "reqps",
        ),
        row(10, "Listener (KCP)", 33),
        panel(
            11,
            "Requests by route and code",
            [
                (
                    f"sum by (route, code) (rate(tether_listener_requests_total{{{KCP}}}[5m]))",
                    "{{route}} {{code}}",
                )
            ],
            0,
            34,
            "reqps",
        ),
        panel(
            12,
            "Auth refusals by reason",
            [
                (
                    f"sum by (reason) (rate(tether_listener_auth_refusals_total{{{KCP}}}[5m]))",
                    "{{reason}}",
                )
            ],
            12,
            34,
            "reqps",
        ),
        panel(
            13,
            "Records by outcome",
            [
                (
                    f"sum by (outcome) (rate(tether_listener_records_total{{{KCP}}}[5m]))",
                    "{{outcome}}",
                )
            ],
            0,
            42,
            "ops",
        ),
        panel(
            14,
            "Persist latency p99",
            [
                (
                    "histogram_quantile(0.99, sum by (le) "
                    f"(rate(tether_listener_persist_seconds_bucket{{{KCP}}}[5m])))",
                    "p99",
                )
            ],
            12,
            42,
            "s",
        ),
        panel(
            15,
            "Validation failures, rate limited, KCP unavailable",
            [
                (
                    "sum by (reason) "
                    f"(rate(tether_listener_validation_failures_total{{{KCP}}}[5m]))",
                    "invalid {{reason}}",
                ),
                (
                    f"sum by (limit) (rate(tether_listener_rate_limited_total{{{KCP}}}[5m]))",
                    "429 {{limit}}",
                ),
                (f"sum(rate(tether_listener_kcp_unavailable_total{{{KCP}}}[5m]))", "503 KCP"),
            ],
            0,
            50,
            "reqps",
        ),
        panel(
            16,
            "Runtimes silent longer than threshold",
            [
                (
                    f"max by (threshold_seconds) (tether_listener_runtimes_silent{{{KCP}}})",
                    ">{{threshold_seconds}}s",
                )
            ],
            12,
            50,
        ),
        row(17, "Poller (runtime)", 58),
        panel(
            18,
            "Runs by outcome",
            [
                (
                    f"sum by (outcome) (increase(tether_poller_runs_total{{{SKR}}}[15m]))",
                    "{{outcome}}",
                )
            ],
            0,
            59,
        ),
        panel(
            19,
            "Differences found (changes the webhook path missed)",
            [
                (
                    f"sum by (type) (increase(tether_poller_differences_total{{{SKR}}}[15m]))",
                    "{{type}}",
                )
            ],
            12,
            59,
        ),
        panel(
            20,
            "Run duration p99",
            [
                (
                    "histogram_quantile(0.99, sum by (le) "
                    f"(rate(tether_poller_run_duration_seconds_bucket{{{SKR}}}[1h])))",
                    "p99",
                )
            ],
            0,
            67,
            "s",
        ),
        panel(
            21,
            "Seconds since last successful run",
            [(f"time() - max(tether_poller_last_success_timestamp_seconds{{{SKR}}})", "seconds")],
            12,
            67,
            "s",
            "stat",
        ),
        # The runtime apiserver's own view of its calls of Tether's webhook, beside the
        # webhook's metrics above: calls that failed open never reached the handler.
        row(22, "Runtime apiserver: its calls of Tether's webhook", 75),
        panel(
            23,
            "Webhook calls by code (apiserver_admission_webhook_request_total)",
            [
                (
                    "sum by (code, operation) "
                    f"(rate(apiserver_admission_webhook_request_total{{{APISERVER}}}[5m]))",
                    "{{code}} {{operation}}",
                )
            ],
            0,
            76,
            "reqps",
        ),
        panel(
            24,
            "Call latency p50/p99 (apiserver_admission_webhook_admission_duration_seconds)",
            [
                (
                    "histogram_quantile(0.5, sum by (le) "
                    "(rate(apiserver_admission_webhook_admission_duration_seconds_bucket"
                    f"{{{APISERVER}}}[5m])))",
                    "p50",
                ),
                (
                    "histogram_quantile(0.99, sum by (le) "
                    "(rate(apiserver_admission_webhook_admission_duration_seconds_bucket"
                    f"{{{APISERVER}}}[5m])))",
                    "p99",
                ),
            ],
            12,
            76,
            "s",
        ),
        panel(
            25,
            "Failed open (apiserver_admission_webhook_fail_open_count): changes left to the poller",
            [
                (
                    "sum by (type) "
                    f"(rate(apiserver_admission_webhook_fail_open_count{{{APISERVER}}}[5m]))",
                    "{{type}}",
                )
            ],
            0,
            84,
            "reqps",
        ),
        panel(
            26,
            "Rejections by error type (apiserver_admission_webhook_rejection_count)",
            [
                (
                    "sum by (error_type, rejection_code) "
                    f"(rate(apiserver_admission_webhook_rejection_count{{{APISERVER}}}[5m]))",
                    "{{error_type}} {{rejection_code}}",
                )
            ],
            12,
            84,
            "reqps",
        ),
    ]
    return dashboard("tether-change-detection", "Tether: change detection", p)


def compass() -> dict[str, Any]:
    p = [
        panel(
            1,
            "Kyma CRs by mapping state",
            [(f"max by (state) (tether_compass_runtimes{{{KCP}}})", "{{state}}")],
            0,
            0,
        ),
        panel(
            2,
            "Actions by type and result",
            [
                (
                    f"sum by (action, result) (rate(tether_compass_actions_total{{{KCP}}}[5m]))",
                    "{{action}} {{result}}",
                )
            ],
            12,
            0,
            "ops",
        ),
        panel(
            3,
            "Director latency p99 by operation",
            [
                (
                    "histogram_quantile(0.99, sum by (le, operation) "
                    f"(rate(tether_compass_director_request_seconds_bucket{{{KCP}}}[5m])))",
                    "{{operation}}",
                )
            ],
            0,
            8,
            "s",
        ),
        panel(
            4,
            "Director errors by kind",
            [
                (
                    f"sum by (kind) (rate(tether_compass_director_errors_total{{{KCP}}}[5m]))",
                    "{{kind}}",
                )
            ],
            12,
            8,
            "reqps",
        ),
        panel(
            5,
            "Circuit breaker (0 closed, 1 half-open, 2 open)",
            [(f"max(tether_compass_director_circuit_state{{{KCP}}})", "state")],
            0,
            16,
            "short",
            "stat",
        ),
        panel(
            6,
            "Seconds since last run",
            [(f"time() - max(tether_compass_last_run_timestamp_seconds{{{KCP}}})", "seconds")],
            12,
            16,
            "s",
            "stat",
        ),
    ]
    return dashboard("tether-compass", "Tether: Compass connectivity", p)


def fleet() -> dict[str, Any]:
    """The admin part's fleet metrics (job tether-admin) and the delivery lag."""
    problem = f'tether_fleet_runtime_problem{{{KCP}, runtime_id=~"$runtime"}}'
    p = [
        row(1, "Fleet (admin part)", 0),
        panel(
            2,
            "Runtimes known",
            [(f"max(tether_fleet_runtimes{{{KCP}}})", "runtimes")],
            0,
            1,
            "short",
            "stat",
            6,
        ),
        panel(
            3,
            "Problem series not exported (cap)",
            [(f"max(tether_fleet_runtime_problems_omitted{{{KCP}}})", "omitted")],
            6,
            1,
            "short",
            "stat",
            6,
        ),
        panel(
            4,
            "Fleet snapshot age",
            [(f"min(tether_fleet_snapshot_age_seconds{{{KCP}}})", "age")],
            12,
            1,
            "s",
            "stat",
            6,
        ),
        panel(
            5,
            "Enrollments by state",
            [(f"max by (state) (tether_enroller_runtimes{{{KCP}}})", "{{state}}")],
            18,
            1,
            "short",
            "stat",
            6,
        ),
        panel(
            6,
            "Runtimes by problem",
            [(f"max by (problem) (tether_fleet_runtime_problems{{{KCP}}})", "{{problem}}")],
            0,
            9,
        ),
        panel(
            7,
            "Runtimes silent longer than threshold (listener)",
            [
                (
                    f"max by (threshold_seconds) (tether_listener_runtimes_silent{{{KCP}}})",
                    ">{{threshold_seconds}}s",
                )
            ],
            12,
            9,
        ),
        panel(
            8,
            "Runtimes with a problem (worst first, at most TETHER_ADMIN_PROBLEM_SERIES)",
            [(f"max by (runtime_id, problem) ({problem})", "{{runtime_id}} {{problem}}")],
            0,
            17,
            "short",
            "table",
            24,
        ),
        row(9, "Delivery", 25),
        panel(
            10,
            "Delivery lag p50/p99 by source (listener: observedAt to persisted)",
            [
                (
                    "histogram_quantile(0.5, sum by (le, source) "
                    f"(rate(tether_listener_delivery_lag_seconds_bucket{{{KCP}}}[5m])))",
                    "p50 {{source}}",
                ),
                (
                    "histogram_quantile(0.99, sum by (le, source) "
                    f"(rate(tether_listener_delivery_lag_seconds_bucket{{{KCP}}}[5m])))",
                    "p99 {{source}}",
                ),
            ],
            0,
            26,
            "s",
        ),
        panel(
            11,
            "Records persisted by source",
            [
                (
                    "sum by (source) "
                    f"(rate(tether_listener_delivery_lag_seconds_count{{{KCP}}}[5m]))",
                    "{{source}}",
                )
            ],
            12,
            26,
            "ops",
        ),
        panel(
            12,
            "Webhook delivery p50/p99 (runtime: admission to acknowledged)",
            [
                (
                    "histogram_quantile(0.5, sum by (le, runtime_id) "
                    f"(rate(tether_webhook_delivery_seconds_bucket{{{SKR}}}[5m])))",
                    "p50 {{runtime_id}}",
                ),
                (
                    "histogram_quantile(0.99, sum by (le, runtime_id) "
                    f"(rate(tether_webhook_delivery_seconds_bucket{{{SKR}}}[5m])))",
                    "p99 {{runtime_id}}",
                ),
            ],
            0,
            34,
            "s",
        ),
        panel(
            13,
            "Webhook calls failed open by runtime (apiserver)",
            [
                (
                    "sum by (runtime_id) "
                    f"(rate(apiserver_admission_webhook_fail_open_count{{{APISERVER}}}[5m]))",
                    "{{runtime_id}}",
                )
            ],
            12,
            34,
            "reqps",
        ),
        # the delivery SLO (docs/operations.md, "Service level"): the recording rules of the
        # group tether-slo, over every KCP the Prometheus scrapes
        row(14, "Delivery SLO: 99 % of stored changes within 30 s, over 28 days", 42),
        panel(
            15,
            "Late share of stored changes (over 30 s), by window; the budget is 1 %",
            [
                (f"tether:delivery_slo_errors:ratio_rate{w}{{{KCP}}}", f"{w} {{{{cluster}}}}")
                for w in ("5m", "1h", "6h", "1d", "3d")
            ],
            0,
            43,
            "percentunit",
        ),
        panel(
            16,
            "Error budget burn rate (1: spent in exactly 28 days; alerts at 14.4, 6, 3, 1)",
            [
                (
                    f"tether:delivery_slo_errors:ratio_rate{w}{{{KCP}}} / 0.01",
                    f"{w} {{{{cluster}}}}",
                )
                for w in ("1h", "6h", "3d")
            ],
            12,
            43,
        ),
        # the delivery canary (docs/canary.md, optional): one probe runtime, measured end to end
        row(17, "Delivery canary: a probe ConfigMap timed to the KCP (optional part)", 51),
        panel(
            18,
            "Canary: write to seen p50/p99 by stage (stored: record; injected: component CR)",
            [
                (
                    f"histogram_quantile({q}, sum by (le, stage) "
                    f"(rate(tether_canary_seconds_bucket{{{KCP}}}[15m])))",
                    f"p{label} {{{{stage}}}}",
                )
                for q, label in (("0.5", "50"), ("0.99", "99"))
            ],
            0,
            52,
            "s",
        ),
        panel(
            19,
            "Canary: probes by stage and outcome; seconds since the last success",
            [
                (
                    f"sum by (stage, outcome) (increase(tether_canary_probes_total{{{KCP}}}[15m]))",
                    "{{stage}} {{outcome}}",
                ),
                (
                    "time() - max by (stage) "
                    f"(tether_canary_last_success_timestamp_seconds{{{KCP}}})",
                    "since success {{stage}}",
                ),
            ],
            12,
            52,
        ),
    ]
    return dashboard("tether-fleet", "Tether: fleet", p, runtimes="tether_fleet_runtime_problem")


def render() -> dict[str, str]:
    return {
        "tether-change-detection.json": json.dumps(change_detection(), indent=1) + "\n",
        "tether-compass.json": json.dumps(compass(), indent=1) + "\n",
        "tether-fleet.json": json.dumps(fleet(), indent=1) + "\n",
    }


if __name__ == "__main__":
    OUT.mkdir(parents=True, exist_ok=True)
    for name, text in render().items():
        (OUT / name).write_text(text)
        print(f"wrote {OUT / name}")
