"""One trace per change: the W3C trace context (``traceparent``), and OpenTelemetry spans
exported over OTLP when an endpoint is configured (off by default).

A change's trace starts where Tether first sees it: with spans recorded, at the webhook's
admission (a trace per admitted key; admissions that coalesce into a pending entry keep the
first one's trace and are linked from the forward span); else, and for the poller, at the
POST. It travels in the
``traceparent`` header of the POST to the listener.

The KCP does not continue it: the header is written by the runtime, so by a tenant who
controls the runtime (a pod there can reach the webhook and the poller's address too). A
continued trace would let a tenant choose the KCP's trace IDs (collide with another runtime's
trace, or follow the KCP's spans into the trace it named) and the KCP's sampled flag (turn
sampling of the KCP's spans on for every request, or off). So the listener starts its own
trace with its own sampling decision (the SDK's sampler, ``OTEL_TRACES_SAMPLER``) and keeps
the runtime's context only as a link and an attribute (``linked``, ``remote_attributes``:
``parse`` validated it, at most ``MAX_HEADER`` characters read, a 55-character header kept).
It logs the KCP's trace ID on the audit line of each record (and the runtime's as
``runtime_trace_id``), and stores the listener span's ``traceparent`` on the record
(annotation ``tether.kyma-project.io/traceparent``) and in the runtime's recent deliveries.

The pure part (``TraceParent``, ``parse``, ``new``) needs nothing but ``random``: with
tracing off a span is a ``TraceParent`` and a no-op ``end`` (no SDK object is created or
imported; the webhook's admission path makes none at all). With an
endpoint (the standard ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` or
``OTEL_EXPORTER_OTLP_ENDPOINT``; ``OTEL_SDK_DISABLED=true`` keeps it off) ``from_environment``
builds the SDK's ``TracerProvider`` with a batching OTLP/HTTP exporter, which reads the
other ``OTEL_EXPORTER_OTLP_*`` variables (headers, certificates, timeout) itself; tests pass
their own provider (``Tracer(provider)``, e.g. with the SDK's ``InMemorySpanExporter``).
No provider is registered globally. Spans carry object keys and counts, never record data.
"""

from __future__ import annotations

import logging
import os
import random
import re
import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal, NamedTuple, Protocol

if TYPE_CHECKING:  # the SDK is imported only when tracing is on
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.trace import Span as OTelSpan

HEADER = "traceparent"
MAX_HEADER = 512  # a longer value is ignored unread (a future version may append fields)
MAX_LINKS = 32  # links kept per entry and per span: coalesced admissions, a batch's others
_FORMAT = re.compile(r"([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})(-.*)?", re.S)
Kind = Literal["internal", "server", "client", "producer"]
Attributes = Mapping[str, str | int | float | bool]
log = logging.getLogger(__name__)


class TraceParent(NamedTuple):
    """A W3C trace context: 128-bit trace ID, 64-bit parent (span) ID, sampled flag."""

    trace_id: int
    span_id: int
    sampled: bool = True

    @property
    def trace_hex(self) -> str:
        return format(self.trace_id, "032x")

    @property
    def span_hex(self) -> str:
        return format(self.span_id, "016x")

    def header(self) -> str:
        """The ``traceparent`` value (version 00)."""
        return f"00-{self.trace_id:032x}-{self.span_id:016x}-{'01' if self.sampled else '00'}"


def parse(value: object) -> TraceParent | None:
    """The trace context of a ``traceparent`` value, or None when absent or malformed
    (W3C Trace Context: lowercase hex, version ``ff`` invalid, version 00 exactly 55
    characters, a later version may append ``-...``; an all-zero trace or parent ID is
    invalid). Never raises."""
    if not isinstance(value, str) or len(value) > MAX_HEADER:
        return None
    m = _FORMAT.fullmatch(value.strip(" \t"))
    if m is None:
        return None
    version, trace, span, flags, rest = m.groups()
    if version == "ff" or (version == "00" and rest is not None):
        return None
    trace_id, span_id = int(trace, 16), int(span, 16)
    if not trace_id or not span_id:
        return None
    return TraceParent(trace_id, span_id, bool(int(flags, 16) & 1))


def _nonzero(bits: int) -> int:
    return random.getrandbits(bits) or 1


def new(parent: TraceParent | None = None) -> TraceParent:
    """A new span's context: a child of ``parent`` (same trace, new span ID), else the
    first span of a new trace. ``random`` is re-seeded in each forked worker."""
    if parent is None:
        return TraceParent(_nonzero(128), _nonzero(64))
    return TraceParent(parent.trace_id, _nonzero(64), parent.sampled)


REMOTE_ATTRIBUTE = "tether.runtime.traceparent"  # the linked context, on the KCP's span


def linked(remote: TraceParent | None) -> tuple[TraceParent, ...]:
    """The links of a span that starts its own trace beside ``remote`` (a caller's context,
    already validated by ``parse``): itself, or none."""
    return () if remote is None else (remote,)


def remote_attributes(
    remote: TraceParent | None, attributes: Attributes
) -> dict[str, str | int | float | bool]:
    """``attributes`` with the caller's context re-rendered (version 00, 55 characters:
    nothing of what it sent beyond the parsed IDs and flag) under ``REMOTE_ATTRIBUTE``."""
    found = dict(attributes)
    if remote is not None:
        found[REMOTE_ATTRIBUTE] = remote.header()
    return found


class Span(Protocol):
    """A started span: its context (to hand on) and ``end``."""

    @property
    def context(self) -> TraceParent: ...

    def end(self, attributes: Attributes | None = None, error: bool = False) -> None: ...


class _Plain:
    """The span of tracing off: ids only."""

    __slots__ = ("context",)

    def __init__(self, context: TraceParent) -> None:
        self.context = context

    def end(self, attributes: Attributes | None = None, error: bool = False) -> None:
        pass


class _Recorded:
    """An SDK span."""

    __slots__ = ("_span", "context")

    def __init__(self, span: OTelSpan) -> None:
        self._span = span
        sc = span.get_span_context()
        self.context = TraceParent(sc.trace_id, sc.span_id, sc.trace_flags.sampled)

    def end(self, attributes: Attributes | None = None, error: bool = False) -> None:
        from opentelemetry.trace import Status, StatusCode

        if attributes:
            self._span.set_attributes(attributes)
        if error:
            self._span.set_status(Status(StatusCode.ERROR))
        self._span.end()


def _span_context(tp: TraceParent) -> Any:
    from opentelemetry.trace import SpanContext, TraceFlags

    return SpanContext(
        tp.trace_id,
        tp.span_id,
        is_remote=True,
        trace_flags=TraceFlags(TraceFlags.SAMPLED if tp.sampled else 0),
    )


class Tracer:
    """Starts spans: ``TraceParent``-only ones without a provider (tracing off), SDK spans
    with one."""

    def __init__(self, provider: TracerProvider | None = None) -> None:
        self.provider = provider
        self._tracer = None if provider is None else provider.get_tracer("tether")

    @property
    def enabled(self) -> bool:
        return self._tracer is not None

    def start(
        self,
        name: str,
        *,
        parent: TraceParent | None = None,
        links: Sequence[TraceParent] = (),
        kind: Kind = "internal",
        attributes: Attributes | None = None,
        start_ns: int | None = None,
    ) -> Span:
        """A span named ``name``, child of ``parent`` (None: a new trace), linked to
        ``links`` (at most ``MAX_LINKS``)."""
        if self._tracer is None:
            return _Plain(new(parent))
        from opentelemetry import trace

        ctx = (
            None
            if parent is None
            else trace.set_span_in_context(trace.NonRecordingSpan(_span_context(parent)))
        )
        span = self._tracer.start_span(
            name,
            context=ctx,
            kind=getattr(trace.SpanKind, kind.upper()),
            attributes=attributes,
            links=[trace.Link(_span_context(t)) for t in links[:MAX_LINKS]],
            start_time=start_ns,
        )
        return _Recorded(span)

    def shutdown(self) -> None:
        """Export what is buffered (process exit; the SDK also does it at exit)."""
        if self.provider is not None:
            self.provider.shutdown()


OFF = Tracer()


def endpoint_of(env: Mapping[str, str]) -> str | None:
    """The OTLP endpoint that turns export on (None: off)."""
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return None
    for name in ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT"):
        value = env.get(name, "").strip()
        if value:
            return value
    return None


def from_environment(service: str, env: Mapping[str, str] | None = None) -> Tracer:
    """``OFF`` unless an OTLP endpoint is configured; else a tracer whose spans a batch
    processor exports over OTLP/HTTP. Call after the fork (in each worker). ``service``:
    the resource's ``service.name`` unless ``OTEL_SERVICE_NAME`` sets it."""
    e = os.environ if env is None else env
    endpoint = endpoint_of(e)
    if endpoint is None:
        return OFF
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    attributes = {} if e.get("OTEL_SERVICE_NAME") else {"service.name": service}
    provider = TracerProvider(resource=Resource.create(attributes))
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    log.info("tracing: spans exported over OTLP/HTTP (OTEL_EXPORTER_OTLP_*)")
    return Tracer(provider)


def now_ns(wall: float | None = None) -> int:
    """A span start time (ns since the epoch) from ``time.time()``-style seconds."""
    return int((time.time() if wall is None else wall) * 1e9)
