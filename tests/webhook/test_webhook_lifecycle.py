"""The webhook process itself: two workers with aggregated metrics, a worker
replaced, serving certificate reload, and the drain on shutdown (no apiserver registration:
reviews are POSTed directly, the objects live in the real SKR plane)."""

from __future__ import annotations

import json
import os
import pathlib
import signal
import socket
import ssl
import time

import pytest
from kubernetes import client

from testing import controlplane
from testing import receiver as receiver_mod
from testing import webhookstack as stack
from testing.receiver import Receiver
from tether.base import certs
from webhook import forwardproc

pytestmark = pytest.mark.processes


def _review(ns: str, cm: client.V1ConfigMap, old_rv: str) -> bytes:
    obj = client.ApiClient().sanitize_for_serialization(cm)
    old = json.loads(json.dumps(obj))
    old["metadata"]["resourceVersion"] = old_rv
    old["data"] = {"k": "before"}
    return json.dumps(
        {
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "request": {
                "uid": "u-" + cm.metadata.name,
                "operation": "UPDATE",
                "kind": {"group": "", "version": "v1", "kind": "ConfigMap"},
                "resource": {"group": "", "version": "v1", "resource": "configmaps"},
                "namespace": ns,
                "name": cm.metadata.name,
                "object": obj,
                "oldObject": old,
            },
        }
    ).encode()


def _children(pid: int) -> list[int]:
    """The gunicorn workers of the master ``pid`` (not its forwarder process)."""
    every = _every_child(pid)
    assert [p for p in every if _comm(p) == forwardproc.COMM] != [], every
    return [p for p in every if _comm(p) != forwardproc.COMM]


def _comm(pid: int) -> str:
    try:
        return pathlib.Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


def _nice(pid: int) -> int:
    return int(pathlib.Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[16])


def _every_child(pid: int) -> list[int]:
    out = []
    for entry in pathlib.Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(stat[1]) == pid:
                out.append(int(entry.name))
    return sorted(out)


def _serving_cert_issuer(port: int, ca_file: pathlib.Path) -> str | None:
    """CN of the serving certificate's issuer when it verifies against ``ca_file``."""
    ctx = ssl.create_default_context(cafile=str(ca_file))
    try:
        with (
            socket.create_connection(("127.0.0.1", port), timeout=5) as raw,
            ctx.wrap_socket(raw, server_hostname="127.0.0.1") as tls,
        ):
            cert = tls.getpeercert()
    except ssl.SSLError:
        return None
    return dict(x[0] for x in cert["issuer"])["commonName"]


def test_two_workers_reload_and_drain(
    skr: controlplane.ControlPlane,
    skr_api: client.ApiClient,
    namespace: str,
    receiver: Receiver,
    runtime_cert: receiver_mod.RuntimeCert,
    tmp_path: pathlib.Path,
) -> None:
    core = client.CoreV1Api(skr_api)
    proc = stack.WebhookProcess(
        tmp_path,
        {
            "TETHER_RUNTIME_ID": receiver_mod.RUNTIME_ID,
            "TETHER_LISTENER_URL": receiver.url,
            "TETHER_LISTENER_CA_FILE": str(receiver.ca_file),
            "TETHER_CLIENT_CERT_FILE": str(runtime_cert.cert_file),
            "TETHER_CLIENT_KEY_FILE": str(runtime_cert.key_file),
            "TETHER_KUBECONFIG": str(skr.kubeconfig),
            "TETHER_WEBHOOK_WORKERS": "2",
            "TETHER_CERT_RELOAD_SECONDS": "0.2",
            # keys wait in the queue until the drain takes them
            "TETHER_WEBHOOK_COALESCE_SECONDS": "10",
            "TETHER_WEBHOOK_READBACK_SECONDS": "15",
            "TETHER_LOG_FORMAT": "json",  # as deployed: every line, gunicorn's included, is JSON
        },
    ).start()
    try:
        cms = [
            core.create_namespaced_config_map(
                namespace,
                client.V1ConfigMap(
                    metadata=client.V1ObjectMeta(name=f"drain-{i}"), data={"k": f"v{i}"}
                ),
            )
            for i in range(6)
        ]
        for cm in cms:
            status, body = proc.post("/validate", _review(namespace, cm, "1"))
            assert status == 200 and json.loads(body)["response"]["allowed"] is True
        # both workers' counters are aggregated on /metrics, whichever worker answers
        assert (
            proc.metric(
                "tether_webhook_admission_requests_total", operation="UPDATE", outcome="enqueued"
            )
            == 6
        )
        # a worker that exits (here: TERM, as at max-requests or a crash) is replaced; the
        # metric files survive it (counted values of exited workers stay in the totals)
        assert proc.proc is not None
        workers = _children(proc.proc.pid)
        assert len(workers) == 2
        # one forwarder process beside them, below their priority (answers come first)
        forwarders = [p for p in _every_child(proc.proc.pid) if _comm(p) == forwardproc.COMM]
        assert len(forwarders) == 1 and _nice(forwarders[0]) == forwardproc.NICE
        os.kill(workers[0], signal.SIGTERM)
        deadline = time.monotonic() + 30
        while True:
            now_workers = _children(proc.proc.pid)
            if (
                len(now_workers) == 2
                and workers[0] not in now_workers
                and proc.get("/readyz")[0] == 200
            ):
                break
            assert time.monotonic() < deadline, proc.log()
            time.sleep(0.1)
        status, _ = proc.post("/validate", _review(namespace, cms[0], "1"))
        assert status == 200
        assert proc.metric("tether_webhook_admission_requests_total", operation="UPDATE") == 7

        # a rotated serving certificate is served on new connections
        new_ca = certs.CertificateAuthority.create("rotated-serving-ca")
        new_ca_file = tmp_path / "rotated-ca.crt"
        new_ca_file.write_bytes(new_ca.cert_pem)
        assert _serving_cert_issuer(proc.port, proc.ca_file) == "webhook-serving-ca"
        pair = new_ca.issue("tether-webhook", ip_addresses=["127.0.0.1"], server=True)
        pair.write(proc.cert_file, proc.key_file)
        st = os.stat(proc.cert_file)
        os.utime(proc.cert_file, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000))
        deadline = time.monotonic() + 20
        issuers: set[str | None] = set()
        while len(issuers) < 1 or None in issuers or issuers != {"rotated-serving-ca"}:
            assert time.monotonic() < deadline, issuers
            issuers = {
                _serving_cert_issuer(proc.port, new_ca_file) for _ in range(6)
            }  # both workers
            time.sleep(0.1)
    finally:
        rc = proc.stop()
    assert rc == 0, proc.log()
    # SIGTERM drained every queued key within the grace period (the forwarder process's
    # one queue holds them all, the replaced worker's too)
    recs = receiver.records()
    assert sorted({r["name"] for r in recs}) == [f"drain-{i}" for i in range(6)], (
        [
            (r["answered"], r["body"].get("name"), len(r["body"].get("items", [])))
            for r in receiver.requests
        ],
        proc.log(),
    )
    by_name = {r["name"]: r for r in recs}
    for i, cm in enumerate(cms):
        assert by_name[f"drain-{i}"]["resourceVersion"] == cm.metadata.resource_version
        assert by_name[f"drain-{i}"]["data"] == {"k": f"v{i}"}
    # gunicorn's own lines (booting, listening, the replaced worker) are JSON lines with the
    # keys of every other line, the address with its real scheme
    lines = [json.loads(ln) for ln in proc.log_path.read_text().splitlines() if ln.strip()]
    assert all({"time", "level", "logger", "message"} <= set(d) for d in lines)
    gunicorn = [d["message"] for d in lines if d["logger"].startswith("gunicorn")]
    assert f"Listening at: https://127.0.0.1:{proc.port}" in " ".join(gunicorn)
    assert sum("Booting worker" in m for m in gunicorn) == 3  # two, and the replacement
