"""One trace per change (``tether.base.tracing``), with plain data: the W3C ``traceparent`` read and
written, the queue keeping the first admission's trace, the forwarder naming a batch's trace,
a stored record's annotation; tracing off costs no SDK, an endpoint exports over OTLP."""

from __future__ import annotations

import http.server
import subprocess
import sys
import threading

import pytest

from listener.storage import records
from tether.base import tracing
from tether.kube import apitypes
from tether.wire import changes, conversion
from webhook import forwarder, keyqueue

TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
SPAN = "00f067aa0ba902b7"
HEADER = f"00-{TRACE}-{SPAN}-01"


def test_a_valid_traceparent_reads_and_writes_back() -> None:
    tp = tracing.parse(HEADER)
    assert tp == tracing.TraceParent(int(TRACE, 16), int(SPAN, 16), True)
    assert tp.header() == HEADER and tp.trace_hex == TRACE and tp.span_hex == SPAN
    assert tracing.parse(HEADER[:-2] + "00") == tp._replace(sampled=False)
    assert tracing.parse(f" {HEADER}\t") == tp  # optional whitespace around a header value
    # a later version may append fields after a dash; its known fields are read
    assert tracing.parse(f"01-{TRACE}-{SPAN}-03-what-comes-next") == tp
    small = tracing.parse(f"00-{'0' * 31}1-{'0' * 15}1-01")
    assert small is not None and small.header() == f"00-{'0' * 31}1-{'0' * 15}1-01"


@pytest.mark.parametrize(
    "value",
    [
        None,
        7,
        b"00-" + TRACE.encode() + b"-" + SPAN.encode() + b"-01",
        "",
        "garbage",
        HEADER.upper(),  # hex is lowercase
        f"ff-{TRACE}-{SPAN}-01",  # version ff is invalid
        f"00-{TRACE}-{SPAN}-01-extra",  # version 00 is exactly 55 characters
        f"01-{TRACE}-{SPAN}-01extra",  # a later version's extra fields follow a dash
        f"00-{'0' * 32}-{SPAN}-01",
        f"00-{TRACE}-{'0' * 16}-01",  # all-zero IDs
        f"00-{TRACE[:-1]}-{SPAN}-01",
        f"00-{TRACE}-{SPAN}0-01",
        f"00-{TRACE}-{SPAN}-1",
        f"00_{TRACE}_{SPAN}_01",
        f"00-{TRACE}-{SPAN}-0g",
        f"00-{TRACE[:-1]}٣-{SPAN}-01",  # a non-ASCII digit
        f"01-{TRACE}-{SPAN}-01-" + "x" * tracing.MAX_HEADER,  # too long to read
    ],
)
def test_a_malformed_traceparent_is_ignored(value: object) -> None:
    assert tracing.parse(value) is None


def test_new_contexts_start_a_trace_or_continue_one() -> None:
    a, b = tracing.new(), tracing.new()
    assert a.trace_id != b.trace_id and a.trace_id and a.span_id and a.sampled
    assert tracing.parse(a.header()) == a
    child = tracing.new(a)
    assert child.trace_id == a.trace_id and child.span_id != a.span_id
    assert tracing.new(a._replace(sampled=False)).sampled is False


def test_tracing_off_makes_plain_spans_and_no_provider() -> None:
    assert tracing.from_environment("t", {}) is tracing.OFF
    assert (
        tracing.from_environment(
            "t", {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://x:4318", "OTEL_SDK_DISABLED": "true"}
        )
        is tracing.OFF
    )
    assert (
        tracing.endpoint_of({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": " http://t:4318/v1/traces "})
        == "http://t:4318/v1/traces"
    )
    assert tracing.endpoint_of({"OTEL_EXPORTER_OTLP_ENDPOINT": ""}) is None
    parent = tracing.new()
    span = tracing.OFF.start("x", parent=parent, links=[tracing.new()], kind="client")
    assert span.context.trace_id == parent.trace_id
    span.end({"a": 1}, error=True)  # nothing to do


@pytest.mark.processes
def test_the_webhook_and_the_listener_import_no_sdk_while_tracing_is_off() -> None:
    """Tracing off costs the admission path no SDK object: the SDK is not even imported."""
    code = (
        "import sys; import webhook.services, webhook.validate, listener.edge.api; "
        "from tether.base import tracing; s = tracing.from_environment('x', {}); "
        "s.start('a').end(); "
        "print(sorted(m for m in sys.modules if m.startswith('opentelemetry')))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        env={"PATH": "/usr/bin:/bin"},
    )
    assert out.stdout.strip() == "[]", out.stdout


def _item(name: str, trace: tracing.TraceParent | None) -> keyqueue.Item:
    return keyqueue.Item("ns", name, "u", "UPDATE", "1", 0.0, trace=trace)


def test_a_coalesced_entry_keeps_the_first_admissions_trace_and_links_the_others() -> None:
    q = keyqueue.KeyQueue(10)
    first, second, third = tracing.new(), tracing.new(), tracing.new()
    assert q.put(_item("a", first)) == "enqueued"
    assert q.put(_item("a", second)) == "coalesced"
    assert q.put(_item("a", third)) == "coalesced"
    (item,) = q.take(10, 0)
    assert item.trace == first and item.links == (second, third) and item.merged == 3
    many = _item("b", first)
    for _ in range(100):
        many = keyqueue.merge(many, _item("b", tracing.new()))
    assert many.merged == 101 and len(many.links) == tracing.MAX_LINKS  # bounded, counted


def _rec(name: str) -> changes.ChangeRecord:
    return changes.watch_tombstone(
        watch=conversion.BUILTIN,
        runtime_id="rt",
        namespace="ns",
        name=name,
        uid="u",
        resource_version="2",
        source="webhook",
        observed_at="2026-12-02T10:00:00.000000Z",
    )


def test_a_batch_continues_its_first_records_trace_and_links_the_others() -> None:
    t = [tracing.new() for _ in range(4)]
    a = keyqueue.merge(_item("a", t[0]), _item("a", t[1]))
    k = keyqueue.key_of
    entries = {k("ns", "a"): a, k("ns", "b"): _item("b", t[2]), k("ns", "c"): _item("c", None)}
    assert forwarder.trace_of([_rec("a"), _rec("b"), _rec("c")], entries) == (t[0], [t[1], t[2]])
    assert forwarder.trace_of([_rec("b"), _rec("a")], entries) == (t[2], [t[0], t[1]])
    assert forwarder.trace_of([_rec("c")], entries) == (None, [])  # the POST starts a trace
    big = {k("ns", str(i)): _item(str(i), tracing.new()) for i in range(50)}
    parent, links = forwarder.trace_of([_rec(str(i)) for i in range(50)], big)
    assert parent == big[k("ns", "0")].trace and len(links) == tracing.MAX_LINKS


def test_the_stored_record_carries_the_writes_traceparent_and_an_update_replaces_it() -> None:
    rec = {**_rec("a"), "epoch": 0}
    new = records.body(rec, "kcp", HEADER)
    assert new["metadata"]["annotations"][apitypes.TRACEPARENT_ANNOTATION] == HEADER
    assert "traceparent" not in new["spec"]  # the record itself is unchanged
    other = f"00-{'a' * 32}-{SPAN}-01"
    assert (
        records.updated(new, rec, other)["metadata"]["annotations"][apitypes.TRACEPARENT_ANNOTATION]
        == other
    )
    # a write without a trace (an older caller) leaves no trace of an earlier write
    assert (
        apitypes.TRACEPARENT_ANNOTATION not in records.updated(new, rec)["metadata"]["annotations"]
    )
    assert (
        apitypes.TRACEPARENT_ANNOTATION not in records.body(rec, "kcp")["metadata"]["annotations"]
    )


def test_with_an_endpoint_spans_are_exported_over_otlp_http(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    got: list[tuple[str, str, bytes]] = []

    class Collector(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 - the handler's API
            body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
            got.append((self.path, self.headers.get("Content-Type", ""), body))
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Collector)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", f"http://127.0.0.1:{server.server_port}")
        monkeypatch.delenv("OTEL_SERVICE_NAME", raising=False)
        tracer = tracing.from_environment("tether-test")
        assert tracer.enabled and tracer is not tracing.OFF
        span = tracer.start("tether.forward", parent=tracing.parse(HEADER), kind="client")
        assert span.context.trace_hex == TRACE
        span.end({"tether.records": 1})
        tracer.shutdown()  # exports what the batch processor holds
    finally:
        server.shutdown()
        server.server_close()
    ((path, ctype, body),) = got
    assert path == "/v1/traces" and ctype == "application/x-protobuf"
    assert bytes.fromhex(TRACE) in body and b"tether-test" in body and b"tether.forward" in body
