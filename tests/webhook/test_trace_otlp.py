"""OTLP export from the real processes: a webhook (gunicorn) and a listener (gunicorn) with
``OTEL_EXPORTER_OTLP_ENDPOINT`` set export their spans of one change to a collector over
OTLP/HTTP: the admission and the forward span from ``tether-webhook`` in the runtime's trace,
the listener's from ``tether-listener`` in the KCP's own trace (the one the stored record's
annotation names), linked to the runtime's: the KCP never continues a trace the runtime
chose."""

from __future__ import annotations

import http.server
import pathlib
import threading
import time
from collections.abc import Callable, Iterator

import pytest
from kubernetes import client
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from testing import controlplane
from testing import webhookstack as stack
from testing.listenerenv import Env, ListenerProcess, Runtime
from tether.base import tracing
from tether.kube import apitypes
from tether.runtime import sender
from webhook import services as webhook_services

pytestmark = pytest.mark.processes
Span = tuple[str, str, str]  # (service.name, span name, trace ID)


class Collector:
    """An OTLP/HTTP trace receiver on a free local port, keeping (service, span, trace)."""

    def __init__(self) -> None:
        self.spans: list[Span] = []
        self.links: list[tuple[str, str]] = []  # (a span's trace ID, a trace it links)
        lock, spans, links = threading.Lock(), self.spans, self.links

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - the handler's API
                req = ExportTraceServiceRequest()
                req.ParseFromString(self.rfile.read(int(self.headers.get("Content-Length", 0))))
                with lock:
                    for rs in req.resource_spans:
                        service = next(
                            (
                                a.value.string_value
                                for a in rs.resource.attributes
                                if a.key == "service.name"
                            ),
                            "",
                        )
                        for s in (s for ss in rs.scope_spans for s in ss.spans):
                            spans.append((service, s.name, s.trace_id.hex()))
                            links.extend((s.trace_id.hex(), lk.trace_id.hex()) for lk in s.links)
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def collector() -> Iterator[Collector]:
    c = Collector()
    yield c
    c.close()


def test_both_processes_export_their_spans_of_one_change_over_otlp(
    skr: controlplane.ControlPlane,
    skr_api: client.ApiClient,
    namespace: str,
    listener_env: Env,
    runtime: Callable[..., Runtime],
    tmp_path: pathlib.Path,
    collector: Collector,
) -> None:
    otel = {"OTEL_EXPORTER_OTLP_ENDPOINT": collector.url, "OTEL_BSP_SCHEDULE_DELAY": "100"}
    listener = ListenerProcess(
        listener_env, "otlp", TETHER_LISTENER_HEARTBEAT_INTERVAL_SECONDS="0", **otel
    )
    rt = runtime()
    proc = stack.WebhookProcess(
        tmp_path,
        {
            "TETHER_RUNTIME_ID": rt.id,
            "TETHER_LISTENER_URL": listener.url,
            "TETHER_LISTENER_CA_FILE": str(listener_env.server_ca_file),
            "TETHER_CLIENT_CERT_FILE": str(rt.cert_file),
            "TETHER_CLIENT_KEY_FILE": str(rt.key_file),
            "TETHER_KUBECONFIG": str(skr.kubeconfig),
            **otel,
        },
    ).start()
    vwc = stack.vwc_body(
        f"tether-otlp-{namespace}", proc.url + "/validate", proc.ca.cert_pem, namespace
    )
    stack.register(skr_api, vwc)
    core = client.CoreV1Api(skr_api)
    try:
        core.create_namespaced_config_map(
            namespace,
            client.V1ConfigMap(metadata=client.V1ObjectMeta(name="exported"), data={"k": "v1"}),
        )
        deadline = time.monotonic() + 30
        while (obj := listener_env.stored_one(rt.id, namespace, "exported")) is None:
            assert time.monotonic() < deadline, proc.log()  # until the apiserver calls us
            core.patch_namespaced_config_map(
                "exported", namespace, {"metadata": {"labels": {"n": str(time.monotonic_ns())}}}
            )
            time.sleep(0.3)
        stored = tracing.parse(obj["metadata"]["annotations"][apitypes.TRACEPARENT_ANNOTATION])
        assert stored is not None
        kcp = ("tether-listener", "tether.listener.changes", stored.trace_hex)
        deadline = time.monotonic() + 20
        while not (
            kcp in collector.spans and any(t == stored.trace_hex for t, _ in collector.links)
        ):
            assert time.monotonic() < deadline, (collector.spans, proc.log())
            time.sleep(0.2)
        runtime_traces = {linked for t, linked in collector.links if t == stored.trace_hex}
        assert len(runtime_traces) == 1 and stored.trace_hex not in runtime_traces
        (runtime_trace,) = runtime_traces
        want = {
            ("tether-webhook", webhook_services.ADMISSION_SPAN, runtime_trace),
            ("tether-webhook", sender.FORWARD_SPAN, runtime_trace),
        }
        while not want <= set(collector.spans):
            assert time.monotonic() < deadline, (collector.spans, proc.log())
            time.sleep(0.2)
        assert all(
            t != stored.trace_hex for svc_, _, t in collector.spans if svc_ == "tether-webhook"
        )
    finally:
        stack.unregister(skr_api, vwc["metadata"]["name"])
        rc = proc.stop()
        listener.stop()
    assert rc == 0, proc.log()
