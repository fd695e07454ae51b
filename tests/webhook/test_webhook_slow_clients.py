"""The webhook's /validate server against stalled clients (every pod of the runtime can
reach it): stalled TLS handshakes and half-sent heads and bodies hold no thread past their
deadlines, and an admission review is answered meanwhile (a real webhook process, reviews
POSTed directly, the objects in the real SKR plane). The webhook runs under its Deployment's
memory limit (a cgroup, as a kubelet runs it) and is never OOM-killed."""

from __future__ import annotations

import json
import pathlib
import socket
import time

import pytest
from kubernetes import client

from testing import cgroups, controlplane
from testing import receiver as receiver_mod
from testing import webhookstack as stack
from testing.receiver import Receiver
from testing.sockets import closed_by_server

pytestmark = pytest.mark.processes
WEBHOOK_LIMITS = cgroups.manifest_limits(
    controlplane.REPO_ROOT / "manifests" / "skr" / "webhook" / "deployment.yaml", "webhook"
)


def _review(ns: str, cm: client.V1ConfigMap) -> bytes:
    obj = client.ApiClient().sanitize_for_serialization(cm)
    return json.dumps(
        {
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "request": {
                "uid": "u-" + cm.metadata.name,
                "operation": "CREATE",
                "kind": {"group": "", "version": "v1", "kind": "ConfigMap"},
                "resource": {"group": "", "version": "v1", "resource": "configmaps"},
                "namespace": ns,
                "name": cm.metadata.name,
                "object": obj,
            },
        }
    ).encode()


def test_stalled_clients_leave_admission_served(
    skr: controlplane.ControlPlane,
    skr_api: client.ApiClient,
    namespace: str,
    receiver: Receiver,
    runtime_cert: receiver_mod.RuntimeCert,
    tmp_path: pathlib.Path,
) -> None:
    proc = stack.WebhookProcess(
        tmp_path,
        {
            "TETHER_RUNTIME_ID": receiver_mod.RUNTIME_ID,
            "TETHER_LISTENER_URL": receiver.url,
            "TETHER_LISTENER_CA_FILE": str(receiver.ca_file),
            "TETHER_CLIENT_CERT_FILE": str(runtime_cert.cert_file),
            "TETHER_CLIENT_KEY_FILE": str(runtime_cert.key_file),
            "TETHER_KUBECONFIG": str(skr.kubeconfig),
            "TETHER_WEBHOOK_THREADS": "2",
            "TETHER_WEBHOOK_HANDSHAKE_TIMEOUT_SECONDS": "2",
            "TETHER_WEBHOOK_HEAD_TIMEOUT_SECONDS": "2",
            "TETHER_WEBHOOK_BODY_TIMEOUT_SECONDS": "2",
        },
    )
    group = cgroups.confine(f"webhook-slow-clients-{proc.port}", WEBHOOK_LIMITS)
    if group is not None:
        proc.command = group.wrap(proc.command)
    held: list[socket.socket] = []
    try:
        proc.start()
        for _ in range(200):  # stalled handshakes
            s = socket.create_connection(("127.0.0.1", proc.port), timeout=10)
            s.sendall(b"\x16\x03\x01\x02\x00\x01")
            held.append(s)
        ctx = proc.context()
        for _ in range(8):  # 4x the threads: half heads and half bodies over TLS
            for partial in (
                b"POST /validate HTTP/1.1\r\nHost: x\r\n",
                b"POST /validate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json"
                b'\r\nContent-Length: 5000\r\n\r\n{"apiVersion"',
            ):
                t = ctx.wrap_socket(
                    socket.create_connection(("127.0.0.1", proc.port), timeout=10),
                    server_hostname="127.0.0.1",
                )
                t.sendall(partial)
                held.append(t)
        cm = client.CoreV1Api(skr_api).create_namespaced_config_map(
            namespace,
            client.V1ConfigMap(
                metadata=client.V1ObjectMeta(name="beside-stalled"), data={"k": "v"}
            ),
        )
        t0 = time.monotonic()
        status, body = proc.post("/validate", _review(namespace, cm))
        assert status == 200 and json.loads(body)["response"]["allowed"] is True
        assert time.monotonic() - t0 < 5, "an admission review waited behind stalled clients"
        # every stalled connection is closed by its deadline (2 s), none held forever
        assert all(closed_by_server(s, 15) for s in held)
        assert (
            proc.metric("tether_webhook_connection_refusals_total", reason="handshake_timeout")
            >= 200
        )
        assert proc.metric("tether_webhook_connection_refusals_total", reason="head_timeout") >= 16
    finally:
        for s in held:
            s.close()
        rc = proc.stop() if proc.proc is not None else None
        usage = group.usage() if group is not None else None
        if group is not None:
            group.remove()
    assert rc == 0, proc.log()
    cgroups.held(usage, "webhook")
