"""OpenTelemetry spans of one change, recorded by the SDK's in-memory exporter: the webhook's
admission (its Flask app), the forwarder's POST (``ListenerClient.send`` through the real
forwarder) and the listener's handling of it (its ``post_changes`` route, with the KCP, the
authentication and the limits stood in). The runtime's spans share one trace ID; the
listener starts the KCP's own trace and links the runtime's (which a tenant controls: it
chooses neither the KCP's trace ID nor its sampling); the stored record's annotation and
the audit line name the KCP's trace, the audit line the runtime's beside it; a missing or
malformed header links nothing, never a refusal."""

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

from listener.edge import api, steps
from listener.edge import services as listener_services
from listener.storage import batch
from testing import watchenv
from testing.webhookapp import app_settings, review
from tether.base import times, tracing
from tether.kube import apitypes
from tether.runtime import sender
from tether.wire import watches
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
        svc.watches.current.return_value = (
            watches.parse(yaml.safe_load(watchenv.ALL_CONFIGMAPS.read_text())),
        )
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

    def call(
        self,
        method: str,
        path: str,
        body: bytes | None = None,
        timeout: Any = None,
        extra: Mapping[str, str] | None = None,
    ) -> tuple[sender.Outcome, bytes]:
        """``ListenerClient._call`` over the test client (no TLS)."""
        r = self.client.open(
            path,
            method=method,
            data=body,
            headers={"Content-Type": "application/json", **(extra or {})},
        )
        return sender.classify(r.status_code, r.headers, r.data), r.data


def _webhook(tracer: tracing.Tracer, listener: Listener) -> tuple[Any, services_mod.Services]:
    s = app_settings()
    registry = CollectorRegistry()
    m = metrics.build(registry)
    queue = keyqueue.KeyQueue(10)
    client = sender.ListenerClient(s.listener, tracer)
    client._call = listener.call  # type: ignore[method-assign]
    reader = mock.MagicMock()
    reader.get.side_effect = lambda ns, name, target=None: {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": ns, "uid": "u-1", "resourceVersion": "42"},
        "data": {"k": "2"},
    }
    fwd = forwarder.Forwarder(s.forwarder, "rt", queue, reader, client, m)
    svc = services_mod.Services(s, queue, m, registry, fwd, tracer=tracer)
    return webhook_app.create_app(s, svc).test_client(), svc


def _admit(c: Any, name: str) -> None:
    r = c.post(
        "/validate", data=json.dumps(review("UPDATE", name=name)), content_type="application/json"
    )
    assert r.status_code == 200


def test_the_runtime_shares_one_trace_and_the_listener_links_it_from_its_own(
    spans: tuple[tracing.Tracer, InMemorySpanExporter],
) -> None:
    tracer, exporter = spans
    listener = Listener(tracer)
    c, svc = _webhook(tracer, listener)
    _admit(c, "a")
    _admit(c, "a")  # coalesces: linked, not a trace of its own POST
    _admit(c, "b")
    assert svc.forwarder is not None
    with mock.patch.object(steps, "authenticate", return_value=None):
        assert svc.forwarder._step([], set())
    by_name: dict[str, list[Any]] = {}
    for s in exporter.get_finished_spans():
        by_name.setdefault(s.name, []).append(s)
    first, coalesced, other = by_name[services_mod.ADMISSION_SPAN]
    (post,) = by_name[sender.FORWARD_SPAN]
    (handled,) = by_name[api.CHANGES_SPAN]
    trace_id = first.context.trace_id
    assert post.context.trace_id == trace_id and post.parent.span_id == first.context.span_id
    # the KCP's own trace, the runtime's POST a link of it
    kcp_trace = handled.context.trace_id
    assert kcp_trace != trace_id and handled.parent is None
    assert [(lk.context.trace_id, lk.context.span_id) for lk in handled.links] == [
        (trace_id, post.context.span_id)
    ]
    assert (
        handled.attributes[tracing.REMOTE_ATTRIBUTE]
        == tracing.TraceParent(trace_id, post.context.span_id).header()
    )
    assert {lk.context.trace_id for lk in post.links} == {
        coalesced.context.trace_id,
        other.context.trace_id,
    }
    assert first.attributes["tether.queue"] == "enqueued"
    assert coalesced.attributes["tether.queue"] == "coalesced"
    assert (
        post.attributes["tether.records"] == 2
        and handled.attributes["http.response.status_code"] == 200
    )
    # the batch's records are stored with the listener span's traceparent, audited with its
    # ID and the runtime's (the operator joins the runtime's report to the KCP's trace)
    want = tracing.TraceParent(kcp_trace, handled.context.span_id).header()
    assert listener.writes == [("a", want), ("b", want)]
    changes = [a for a in listener.audits if a["event"] == "change"]
    assert [a["trace_id"] for a in changes] == [format(kcp_trace, "032x")] * 2
    assert [a["runtime_trace_id"] for a in changes] == [format(trace_id, "032x")] * 2
    assert all("data" not in a for a in changes)


RECORD = {
    "apiVersion": "tether.kyma-project.io/v1",
    "kind": "ConfigMapChange",
    "runtimeId": "rt",
    "namespace": "ns",
    "name": "a",
    "uid": "u",
    "resourceVersion": "5",
    "observedAt": times.now(),
    "deleted": False,
    "source": "poller",
    "data": {"k": "v"},
}
CHOSEN = 0x4BF92F3577B34DA6A3CE929D0E0E4736  # a trace ID the tenant picked (another's, say)


@pytest.mark.parametrize("flags", ["00", "01"])
def test_a_tenant_chooses_neither_the_kcps_trace_nor_its_sampling(
    spans: tuple[tracing.Tracer, InMemorySpanExporter], flags: str
) -> None:
    """The attack: a pod in the runtime (or the tenant's own poller) POSTs with a
    ``traceparent`` naming a trace ID it picked (another runtime's trace, to mix its records
    into it, or one it will look for) and a sampled flag (00, to hide the KCP's handling of
    its requests from sampling; 01, to force it). The KCP's span is in a trace of its own,
    recorded by its own sampler whatever the flag, each request in a new one; the tenant's
    context is only a link, re-rendered from its parsed IDs."""
    tracer, exporter = spans
    listener = Listener(tracer)
    header = f"00-{CHOSEN:032x}-00f067aa0ba902b7-{flags}"
    with mock.patch.object(steps, "authenticate", return_value=None):
        for i in range(2):
            outcome, _ = listener.call(
                "POST",
                "/v1/runtimes/rt/changes",
                json.dumps({**RECORD, "resourceVersion": str(5 + i)}).encode(),
                extra={"traceparent": header},
            )
            assert outcome.verdict == "ok", outcome
    handled = exporter.get_finished_spans()
    assert len(handled) == 2 and all(s.context.trace_flags.sampled for s in handled)
    kcp_traces = {s.context.trace_id for s in handled}
    assert CHOSEN not in kcp_traces and len(kcp_traces) == 2  # never the chosen, never shared
    assert all(
        s.parent is None and [lk.context.trace_id for lk in s.links] == [CHOSEN] for s in handled
    )
    stored = [tracing.parse(trace) for _, trace in listener.writes]
    assert {t.trace_id for t in stored if t} == kcp_traces and all(t and t.sampled for t in stored)
    changes = [a for a in listener.audits if a["event"] == "change"]
    assert {a["trace_id"] for a in changes} == {format(t, "032x") for t in kcp_traces}
    assert {a["runtime_trace_id"] for a in changes} == {format(CHOSEN, "032x")}


def test_a_later_version_header_is_linked_by_its_ids_only(
    spans: tuple[tracing.Tracer, InMemorySpanExporter],
) -> None:
    """A header of a later W3C version may append fields: the KCP keeps none of them (the
    attribute is the 55-character version-00 rendering of the parsed IDs), and a header over
    ``MAX_HEADER`` is not read at all."""
    tracer, exporter = spans
    listener = Listener(tracer)
    appended = f"01-{CHOSEN:032x}-00f067aa0ba902b7-01-" + "<script>" * 50
    too_long = appended + "x" * tracing.MAX_HEADER
    with mock.patch.object(steps, "authenticate", return_value=None):
        for header in (appended, too_long):
            outcome, _ = listener.call(
                "POST",
                "/v1/runtimes/rt/changes",
                json.dumps(RECORD).encode(),
                extra={"traceparent": header},
            )
            assert outcome.verdict == "ok", outcome
    kept, ignored = exporter.get_finished_spans()
    assert (kept.attributes or {})[
        tracing.REMOTE_ATTRIBUTE
    ] == f"00-{CHOSEN:032x}-00f067aa0ba902b7-01"
    assert len(kept.links) == 1 and kept.context.trace_id != CHOSEN
    assert ignored.links == () and tracing.REMOTE_ATTRIBUTE not in (ignored.attributes or {})
    changes = [a for a in listener.audits if a["event"] == "change"]
    assert "runtime_trace_id" in changes[0] and "runtime_trace_id" not in changes[1]


@pytest.mark.parametrize(
    "header", [None, "", "00-zz-bad-01", "ff-" + "1" * 32 + "-" + "2" * 16 + "-01", "x" * 10_000]
)
def test_no_or_a_malformed_traceparent_starts_a_new_trace_and_is_never_refused(
    spans: tuple[tracing.Tracer, InMemorySpanExporter], header: str | None
) -> None:
    tracer, exporter = spans
    listener = Listener(tracer)
    with mock.patch.object(steps, "authenticate", return_value=None):
        outcome, _ = listener.call(
            "POST",
            "/v1/runtimes/rt/changes",
            json.dumps(RECORD).encode(),
            extra=None if header is None else {"traceparent": header},
        )
    assert outcome.verdict == "ok", outcome
    (handled,) = exporter.get_finished_spans()
    assert handled.parent is None and handled.links == ()  # a new trace, nothing linked
    assert all("runtime_trace_id" not in a for a in listener.audits)
    ((_, stored),) = listener.writes
    assert tracing.parse(stored) == tracing.TraceParent(
        handled.context.trace_id, handled.context.span_id
    )
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

    def recording(
        method: str,
        path: str,
        body: bytes | None = None,
        timeout: Any = None,
        extra: Mapping[str, str] | None = None,
    ) -> tuple[sender.Outcome, bytes]:
        headers.append((extra or {})["traceparent"])
        return call(method, path, body, timeout, extra)

    assert svc.forwarder is not None
    svc.forwarder.client._call = recording  # type: ignore[method-assign]
    with mock.patch.object(steps, "authenticate", return_value=None):
        svc.forwarder._step([], set())
    ((_, stored),) = listener.writes
    sent, kept = tracing.parse(headers[0]), tracing.parse(stored)
    assert sent is not None and kept is not None and kept.trace_id != sent.trace_id
    # the listener's trace is its own; the runtime's is on the audit line beside it
    (change,) = [a for a in listener.audits if a["event"] == "change"]
    assert change["trace_id"] == kept.trace_hex and change["runtime_trace_id"] == sent.trace_hex
