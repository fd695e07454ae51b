"""The poller's probe and metrics endpoints, from the app factory."""

from __future__ import annotations

import pathlib

from poller import app, metrics, run, settings
from tether.runtime import leader, sender
from tether.wire import filters


class Status:
    def __init__(self) -> None:
        self.health, self.readiness = (True, ""), (True, "")
        self.metrics = metrics.Metrics()

    def healthy(self) -> tuple[bool, str]:
        return self.health

    def ready(self) -> tuple[bool, str]:
        return self.readiness

    def exposition(self) -> bytes:
        return self.metrics.exposition()


def make(tmp_path: pathlib.Path) -> tuple[Status, app.Flask]:
    s = settings.Settings(
        runtime_id="rt-1",
        listener=sender.ClientSettings("https://x", "rt-1", "ca", "crt", "key"),
        filter=filters.ConfigMapFilter.build(),
        run=run.RunSettings(),
        schedule=settings.ScheduleSettings(),
        lease=leader.LeaseSettings("ns", "l"),
    )
    st = Status()
    return st, app.create_app(s, st)


def test_probes_answer_json_with_the_reason(tmp_path: pathlib.Path) -> None:
    st, a = make(tmp_path)
    c = a.test_client()
    assert c.get("/healthz").json == {"status": "ok"}
    st.readiness = (False, "runtime client certificate cannot be loaded")
    r = c.get("/readyz")
    assert r.status_code == 503
    assert r.json == {
        "error": "not ready",
        "details": [
            {
                "check": "client-certificate",
                "message": "runtime client certificate cannot be loaded",
            }
        ],
    }
    r = c.get("/nope")
    assert r.status_code == 404 and r.json["error"] == "not found"
    assert c.post("/healthz").status_code == 405


def test_metrics_expose_every_series_without_object_labels(tmp_path: pathlib.Path) -> None:
    st, a = make(tmp_path)
    st.metrics.differences.labels("missing").inc(3)
    text = a.test_client().get("/metrics").get_data(as_text=True)
    assert 'tether_poller_differences_total{type="missing"} 3.0' in text
    for name in (
        "tether_poller_runs_total",
        "tether_poller_run_duration_seconds_bucket",
        "tether_poller_objects_scanned_total",
        "tether_poller_records_sent_total",
        "tether_poller_last_success_timestamp_seconds",
        "tether_poller_leader",
        "tether_poller_apiserver_requests_total",
        "tether_poller_listener_requests_total",
        "tether_poller_digest_uninterpretable_total",
        "tether_poller_watches_skipped_total",
    ):
        assert name in text, name
    labels = {
        part.split("=")[0]
        for line in text.splitlines()
        if "{" in line and not line.startswith("#")
        for part in line[line.index("{") + 1 : line.index("}")].split(",")
    }
    assert labels <= {"kind", "outcome", "type", "call", "le", "field", "reason", "way"}
