"""OpenTelemetry spans of one change, recorded by the SDK's in-memory exporter: the webhook's
admission (its Flask app), the forwarder's POST (``ListenerClient.send`` through the real
forwarder) and the listener's handling of it (its ``post_changes`` route, with the KCP, the
authentication and the limits stood in) share one trace ID; the stored record's annotation
and the audit line name it; a missing or malformed header starts a new trace, never a
refusal."""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from typing import Any
from unittest import mock

import flask
import pytest
import yaml
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from prometheus_client import CollectorRegistry

from listener.edge import api
from listener.edge import services as listener_services
from listener.storage import batch
from testing import watchenv
from tests.webhook.test_admission import review
from tests.webhook.test_app import _settings
from tether import apitypes, sender, tracing, watches
from webhook import app as webhook_app
from webhook import forwarder, keyqueue, metrics
from webhook import services as services_mod


@pytest.fixture
def spans() -> Iterator[tuple[tracing.Tracer, InMemorySpanExporter]]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    yield tracing.Tracer(provider), exporter
    provider.shutdown()


class Listener:
    """The listener's route with stand-ins around it: every write is persisted and kept
    with the ``traceparent`` it was given; audit lines are kept."""

    def __init__(self, tracer: tracing.Tracer) -> None:
        self.writes: list[tuple[str, str]] = []
        self.audits: list[dict[str, Any]] = []
        svc = mock.MagicMock()
        svc.tracer = tracer
        svc.summaries = None
        svc.persists = batch.Pool(1)  # the real pool (a MagicMock's would never run a record)
        svc.settings.max_body_bytes = 1 << 20
        svc.in_flight.acquire.return_value = True
        svc.buckets.empty.return_value = 0
        svc.buckets.take.return_value = 0
        svc.epochs.current.return_value = 0
        # the Watch of every ConfigMap in force for the runtime (its v1 records' compat Watch)
        svc.kymas.lookup.return_value = [mock.Mock(labels={}, modules=frozenset())]
        svc.watches.current.return_value = (watches.parse(yaml.safe_load(
            watchenv.ALL_CONFIGMAPS.read_text())),)
        svc.store.persist.side_effect = self._persist
        svc.audit_event.side_effect = lambda event, **f: self.audits.append({"event": event, **f})
        self.svc = svc
        app = flask.Flask("listener-test")
        app.register_blueprint(api.bp)
        app.extensions[listener_services.KEY] = svc
        self.client = app.test_client()

    def _persist(self, rec: Mapping[str, Any], trace: str = "") -> str:
        self.writes.append((str(rec["name"]), trace))
        return "persisted"

    def call(self, method: str, path: str, body: bytes | None = None,
             timeout: Any = None, extra: Mapping[str, str] | None = None
             ) -> tuple[sender.Outcome, bytes]:
        """``ListenerClient._call`` over the test client (no TLS)."""
        r = self.client.open(path, method=method, data=body, headers={
            "Content-Type": "application/json", **(extra or {})})
        return sender.classify(r.status_code, r.headers, r.data), r.data


def _webhook(tracer: tracing.Tracer, listener: Listener) -> tuple[Any, services_mod.Services]:
    s = _settings()
    registry = CollectorRegistry()
    m = metrics.build(registry)
    queue = keyqueue.KeyQueue(10)
    client = sender.ListenerClient(s.listener, tracer)
    client._call = listener.call  # type: ignore[method-assign]
    reader = mock.MagicMock()
    reader.get.side_effect = lambda ns, name, target=None: {"metadata": {
        "name": name, "namespace": ns, "uid": "u-1", "resourceVersion": "42"}, "data": {"k": "2"}}
    fwd = forwarder.Forwarder(s.forwarder, "rt", queue, reader, client, m)
    svc = services_mod.Services(s, queue, m, registry, fwd, tracer=tracer)
    return webhook_app.create_app(s, svc).test_client(), svc


def _admit(c: Any, name: str) -> None:
    r = c.post("/validate", data=json.dumps(review("UPDATE", name=name)),
               content_type="application/json")
    assert r.status_code == 200


def test_admission_forward_and_listener_spans_share_one_trace(
        spans: tuple[tracing.Tracer, InMemorySpanExporter]) -> None:
    tracer, exporter = spans
    listener = Listener(tracer)
    c, svc = _webhook(tracer, listener)
    _admit(c, "a")
    _admit(c, "a")  # coalesces: linked, not a trace of its own POST
    _admit(c, "b")
    assert svc.forwarder is not None
    with mock.patch.object(api, "_authenticate", return_value=None):
        assert svc.forwarder._step([], set())
    by_name: dict[str, list[Any]] = {}
    for s in exporter.get_finished_spans():
        by_name.setdefault(s.name, []).append(s)
    first, coalesced, other = by_name[services_mod.ADMISSION_SPAN]
    (post,) = by_name[sender.FORWARD_SPAN]
    (handled,) = by_name[api.CHANGES_SPAN]
    trace_id = first.context.trace_id
    assert post.context.trace_id == trace_id and post.parent.span_id == first.context.span_id
    assert handled.context.trace_id == trace_id and handled.parent.span_id == post.context.span_id
    assert {lk.context.trace_id for lk in post.links} == {coalesced.context.trace_id,
                                                        other.context.trace_id}
    assert first.attributes["tether.queue"] == "enqueued"
    assert coalesced.attributes["tether.queue"] == "coalesced"
    assert post.attributes["tether.records"] == 2 and handled.attributes[
        "http.response.status_code"] == 200
    # the batch's records are stored with the listener span's traceparent, audited with its ID
    want = tracing.TraceParent(trace_id, handled.context.span_id).header()
    assert listener.writes == [("a", want), ("b", want)]
    changes = [a for a in listener.audits if a["event"] == "change"]
    assert [a["trace_id"] for a in changes] == [format(trace_id, "032x")] * 2
    assert all("data" not in a for a in changes)


@pytest.mark.parametrize("header", [None, "", "00-zz-bad-01", "ff-" + "1" * 32 + "-" + "2" * 16 + "-01",
                                    "x" * 10_000])
def test_no_or_a_malformed_traceparent_starts_a_new_trace_and_is_never_refused(
        spans: tuple[tracing.Tracer, InMemorySpanExporter], header: str | None) -> None:
    tracer, exporter = spans
    listener = Listener(tracer)
    rec = {"apiVersion": "tether.kyma-project.io/v1", "kind": "ConfigMapChange",
           "runtimeId": "rt", "namespace": "ns", "name": "a", "uid": "u", "resourceVersion": "5",
           "observedAt": "2026-12-02T10:00:00.000000Z", "deleted": False, "source": "poller",
           "data": {"k": "v"}}
    with mock.patch.object(api, "_authenticate", return_value=None):
        outcome, _ = listener.call("POST", "/v1/runtimes/rt/changes", json.dumps(rec).encode(),
                                   extra=None if header is None else {"traceparent": header})
    assert outcome.verdict == "ok", outcome
    (handled,) = exporter.get_finished_spans()
    assert handled.parent is None  # a new trace
    ((_, stored),) = listener.writes
    assert tracing.parse(stored) == tracing.TraceParent(handled.context.trace_id,
                                                        handled.context.span_id)
    assert apitypes.TRACEPARENT_ANNOTATION.endswith("/traceparent")


def test_tracing_off_costs_the_admission_nothing_and_the_post_starts_the_trace() -> None:
    listener = Listener(tracing.OFF)
    c, svc = _webhook(tracing.OFF, listener)
    _admit(c, "a")
    (item,) = svc.queue.take(1, 0)
    assert item.trace is None and item.links == ()  # no id, no object on the admission path
    svc.queue.done([item.key])
    svc.queue.put(item)
    headers: list[str] = []
    call = listener.call

    def recording(method: str, path: str, body: bytes | None = None, timeout: Any = None,
                  extra: Mapping[str, str] | None = None) -> tuple[sender.Outcome, bytes]:
        headers.append((extra or {})["traceparent"])
        return call(method, path, body, timeout, extra)
    assert svc.forwarder is not None
    svc.forwarder.client._call = recording  # type: ignore[method-assign]
    with mock.patch.object(api, "_authenticate", return_value=None):
        svc.forwarder._step([], set())
    ((_, stored),) = listener.writes
    sent, kept = tracing.parse(headers[0]), tracing.parse(stored)
    assert sent is not None and kept is not None and kept.trace_id == sent.trace_id
    assert kept.span_id != sent.span_id  # the listener's span, a child of the POST's
