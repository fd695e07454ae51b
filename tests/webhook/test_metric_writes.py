"""What a review costs in metric writes: counted in the Prometheus multiprocess value files
that gunicorn's workers write (``webhook.metrics``: at most four, one latency histogram).

The values go to files as in a worker (prometheus_client's multiprocess value class, set up
the way its own tests do); a write is a value that changed in the files around one review.
"""

from __future__ import annotations

import json
import pathlib
from typing import Any

import pytest
from prometheus_client import mmap_dict, values

from testing.webhookapp import app_settings, review
from webhook import app, keyqueue, metrics
from webhook import services as services_mod

MAX_WRITES = 4


@pytest.fixture
def multiprocess_app(tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(tmp_path))
    monkeypatch.setattr(values, "ValueClass", values.MultiProcessValue(lambda: 4242))
    s = app_settings()
    svc = services_mod.Services(s, keyqueue.KeyQueue(2), metrics.build(None), None)
    return app.create_app(s, svc).test_client(), tmp_path


def _values(folder: pathlib.Path) -> dict[tuple[str, str], float]:
    out = {}
    for path in folder.glob("*.db"):
        for key, value, _, _ in mmap_dict.MmapedDict.read_all_values_from_file(str(path)):
            out[(path.name, key)] = value
    return out


def _writes(client: Any, folder: pathlib.Path, doc: dict[str, Any]) -> list[str]:
    before = _values(folder)
    r = client.post("/validate", data=json.dumps(doc), content_type="application/json")
    assert r.status_code == 200
    assert r.get_json()["response"]["uid"] == doc["request"]["uid"]
    after = _values(folder)
    return sorted(key for (_, key), v in after.items() if before.get((_, key)) != v)


@pytest.mark.parametrize(
    ("warm", "doc", "outcome"),
    [
        ([review(name="a")], review(name="b"), "enqueued"),
        ([review(name="a"), review(name="a")], review(name="a"), "coalesced"),
        ([review(name=n) for n in "abc"], review(name="d"), "overflowed"),  # 2 keys fit
        ([review(dry_run=True)], review(dry_run=True), "dry-run"),  # not forwarded
    ],
    ids=["enqueued", "coalesced", "overflowed", "dry-run"],
)
def test_a_review_writes_at_most_four_values(
    multiprocess_app: Any, warm: list[dict[str, Any]], doc: dict[str, Any], outcome: str
) -> None:
    client, folder = multiprocess_app
    for w in warm:  # every label child this outcome uses exists (a first write initializes)
        _writes(client, folder, w)
    written = [json.loads(k) for k in _writes(client, folder, doc)]
    assert 0 < len(written) <= MAX_WRITES, written
    histograms = {family for family, sample, *_ in written if sample.endswith("_bucket")}
    assert histograms == {"tether_webhook_http_request_duration_seconds"}, written
    counted = [
        labels for _, sample, labels, *_ in written if sample == metrics.ADMISSIONS + "_total"
    ]
    assert counted == [{"operation": "UPDATE", "outcome": outcome}], written


def test_queue_outcomes_are_derived_at_scrape_time(multiprocess_app: Any) -> None:
    client, _ = multiprocess_app
    for name in ("a", "a", "b", "c", "c"):  # 2 keys fit: a, b; a again coalesces; c overflows
        client.post("/validate", data=json.dumps(review(name=name)), content_type=JSON)
    text = client.get("/metrics").get_data(as_text=True)
    assert "tether_webhook_queue_coalesced_total 1.0" in text
    assert "tether_webhook_queue_overflowed_total 2.0" in text
    assert text.count("# TYPE tether_webhook_queue_coalesced_total counter") == 1


JSON = "application/json"
