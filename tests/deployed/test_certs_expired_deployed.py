"""The runtime's certificates expire while the real enroller is stopped longer than their
lifetime, then the enroller is started again (issue 29, item 3), in the deployed form
(``testing.deployed``: every part run by the pod runner from the local overlays).

The enroller issues with its shortest lifetime (``TETHER_ENROLLER_CERT_LIFETIME_SECONDS`` =
60, renewed at two thirds; the webhook's serving certificate has the same lifetime); the
test scales its Deployment to zero on the KCP plane (the pod runner follows it), reads both
certificates' notAfter from their Secrets in the runtime and waits until both expired. Then
customer writes (creates, updates, a delete): every one succeeds (the webhook fails open; the
API server skips it once its serving certificate is refused). A new connection with the
runtime's expired certificate is refused by the listener
(``tether_listener_tls_handshake_refusals_total{reason="certificate_expired"}``, read from
each listener pod); a request on a keep-alive connection opened before the expiry is
answered 421 and its connection closed (``connection_refusals_total{reason=
"certificate_expired"}``): the poller's run in the window (it keeps its connection alive:
every 60 s, the listener's keep-alive is 75 s) delivers nothing, so the KCP does not hold the
window's changes. Before this check the poller delivered the whole window with the expired
certificate. The enroller scaled back up re-issues (the Secret's
notAfter moves forward), the pod runner rewrites the mounted Secrets as the kubelet does, the
webhook and the poller reload them without a restart (``tether.base.tlsreload``; their restart
counts are unchanged), the KCP ends with exactly the runtime's state, and a new write arrives
again; the times from the enroller's restart are printed.

Own planes (module scope), as the operational test's.
"""

from __future__ import annotations

import base64
import datetime
import json
import socket
import ssl
import time
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest
from cryptography import x509
from kubernetes import client

from listener.storage import records
from testing import controlplane, deployed, overlays, watchenv
from tether.kube import apitypes

pytestmark = pytest.mark.processes

CUSTOMER_NS = "shop"
WATCH = "configuration"  # the shipped Watch (manifests/kcp/watches)
STORAGE_NS = "tether-configuration"  # its spec.storage.namespace
LIFETIME = 60  # the enroller's minimum
ENROLLER = "tether-enroller"


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[deployed.Fleet]:
    with controlplane.planes("expired-skr", "expired-kcp") as planes:
        f = deployed.install(
            planes["expired-skr"],
            planes["expired-kcp"],
            tmp_path_factory.mktemp("expired"),
            timeout=180,
            backoff_seconds=1.0,
            enroller_env={
                "TETHER_ENROLLER_CERT_LIFETIME_SECONDS": str(LIFETIME),
                "TETHER_ENROLLER_INTERVAL_SECONDS": "5",
            },
        )
        try:
            deployed.kubectl(f.skr, "create", "namespace", CUSTOMER_NS)
            yield f
        finally:
            f.stop()


def not_after(fleet: deployed.Fleet, name: str = "tether-runtime-client") -> datetime.datetime:
    """A certificate's notAfter, as its Secret in the runtime holds it (default: the client's)."""
    secret = deployed.runtime_secret(fleet, name)
    pem = base64.b64decode(secret["data"]["tls.crt"])
    return x509.load_pem_x509_certificate(pem).not_valid_after_utc


def refusals(fleet: deployed.Fleet, metric: str = "tls_handshake_refusals") -> float:
    """``certificate_expired`` refusals (default: of handshakes; ``connection_refusals``: of
    requests on a connection whose certificate expired after it) over the listener's pods."""
    total = 0.0
    for pod in fleet.kcp_pods.pods_of("tether-listener"):
        with urllib.request.urlopen(f"http://{pod.ip}:9090/metrics", timeout=10) as r:
            text = r.read().decode()
        for line in text.splitlines():
            if (
                line.startswith(f"tether_listener_{metric}_total{{")
                and 'reason="certificate_expired"' in line
            ):
                total += float(line.rsplit(" ", 1)[1])
    return total


class Customer:
    """A customer's ConfigMaps (the shipped Watch's label) written through the runtime's API
    server; what the runtime holds is remembered (``None``: deleted)."""

    def __init__(self, fleet: deployed.Fleet) -> None:
        self.api = fleet.skr.api_client()
        self.core: Any = client.CoreV1Api(self.api)
        self.state: dict[str, dict[str, str] | None] = {}

    def write(self, name: str, **data: str) -> None:
        body = {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "data": data,
            "metadata": {
                "name": name,
                "namespace": CUSTOMER_NS,
                "labels": {watchenv.OPT_IN_LABEL: "true"},
            },
        }
        if name in self.state and self.state[name] is not None:
            self.core.replace_namespaced_config_map(name, CUSTOMER_NS, body)
        else:
            self.core.create_namespaced_config_map(CUSTOMER_NS, body)
        self.state[name] = dict(data)

    def delete(self, name: str) -> None:
        self.core.delete_namespaced_config_map(name, CUSTOMER_NS)
        self.state[name] = None

    def close(self) -> None:
        self.api.close()


def kcp_view(fleet: deployed.Fleet, names: list[str]) -> dict[str, dict[str, str] | None]:
    """Each name as the KCP's records hold it (``None``: a tombstone or no record)."""
    out: dict[str, dict[str, str] | None] = {}
    done = deployed.kubectl(
        fleet.kcp, "get", apitypes.RUNTIME_CONFIGMAPS.plural, "-n", STORAGE_NS, "-o", "json"
    )
    by_name = {i["metadata"]["name"]: i for i in json.loads(done.stdout)["items"]}
    for n in names:
        rec = by_name.get(
            records.object_name(records.Key(deployed.RUNTIME_ID, WATCH, CUSTOMER_NS, n))
        )
        out[n] = (
            None
            if rec is None or rec["spec"].get("deleted")
            else dict(rec["spec"].get("data") or {})
        )
    return out


def record(fleet: deployed.Fleet, name: str) -> dict[str, Any] | None:
    done = deployed.kubectl(
        fleet.kcp,
        "get",
        apitypes.RUNTIME_CONFIGMAPS.plural,
        "-n",
        STORAGE_NS,
        "-o",
        "json",
        records.object_name(records.Key(deployed.RUNTIME_ID, WATCH, CUSTOMER_NS, name)),
        check=False,
    )
    return json.loads(done.stdout) if done.returncode == 0 else None


def poll_runs(fleet: deployed.Fleet) -> int:
    """The poller's interval runs so far, as its log says (ok or failed)."""
    return fleet.skr_pods.logs("tether-poller").count('"interval run ')


def last_run(fleet: deployed.Fleet) -> str:
    lines = [
        ln for ln in fleet.skr_pods.logs("tether-poller").splitlines() if '"interval run ' in ln
    ]
    return json.loads(lines[-1])["message"][:200] if lines else "none"


def restarts(fleet: deployed.Fleet) -> dict[str, int]:
    return {
        f"{p.name}/{c.name}": c.restarts
        for d in ("tether-webhook", "tether-poller")
        for p in fleet.skr_pods.pods_of(d)
        for c in p.containers
    }


def scale(fleet: deployed.Fleet, replicas: int) -> None:
    deployed.kubectl(
        fleet.kcp,
        "scale",
        "deployment",
        ENROLLER,
        "-n",
        overlays.NAMESPACE,
        f"--replicas={replicas}",
    )


def handshake_with_the_expired_certificate(fleet: deployed.Fleet) -> str:
    """A new connection to the listener's Service with the runtime's (expired) certificate
    from its Secret, as a restarted sender would open one: what the client saw."""
    secret = deployed.runtime_secret(fleet)
    cert, key = fleet.work / "expired.crt", fleet.work / "expired.key"
    cert.write_bytes(base64.b64decode(secret["data"]["tls.crt"]))
    key.write_bytes(base64.b64decode(secret["data"]["tls.key"]))
    ip, port = fleet.kcp_pods.service_address("tether-listener", "https")
    ctx = ssl.create_default_context(cafile=str(fleet.work / "kcp-ca.crt"))
    ctx.load_cert_chain(cert, key)
    try:
        with (
            socket.create_connection((ip, port), timeout=10) as raw,
            ctx.wrap_socket(raw, server_hostname=overlays.LISTENER_HOST) as s,
        ):
            s.sendall(
                b"GET /v1/runtimes/"
                + deployed.RUNTIME_ID.encode()
                + b"/state HTTP/1.1\r\nHost: "
                + overlays.LISTENER_HOST.encode()
                + b"\r\nConnection: close\r\n\r\n"
            )
            return f"answered: {s.recv(64)!r}"
    except (ssl.SSLError, OSError) as e:  # TLS 1.3: the alert arrives with the first read
        return f"refused: {e}"


def test_certificates_expired_while_the_enroller_was_stopped_then_it_restarted(
    fleet: deployed.Fleet,
) -> None:
    cust = Customer(fleet)
    try:
        run(fleet, cust)
    finally:
        cust.close()


def run(fleet: deployed.Fleet, cust: Customer) -> None:
    replicas = json.loads(
        deployed.kubectl(
            fleet.kcp, "get", "deployment", ENROLLER, "-n", overlays.NAMESPACE, "-o", "json"
        ).stdout
    )["spec"]["replicas"]
    cust.write("before", phase="installed")
    fleet.wait_for(
        "the first write in the KCP",
        lambda: kcp_view(fleet, ["before"])["before"] == {"phase": "installed"},
        timeout=60,
        logs_of=ENROLLER,
        poll=0.5,
    )
    scale(fleet, 0)
    fleet.kcp_pods.wait_stopped(ENROLLER, timeout=60)
    stopped = time.monotonic()
    expires = not_after(fleet)  # read after the stop: a renewal just before it counts
    serving = not_after(fleet, "tether-webhook-serving")
    before = restarts(fleet)
    left = (max(expires, serving) - datetime.datetime.now(datetime.UTC)).total_seconds()
    assert 0 < left <= LIFETIME, f"the certificates expire in {left:.0f} s"
    time.sleep(left + 2)  # both certificates expired; the enroller still stopped
    window = time.monotonic()
    for i in range(8):  # the window: creates, updates, a delete; each write succeeds
        cust.write(f"during-{i}", n=str(i))
        cust.write("before", phase=f"window-{i}")
        time.sleep(1.0)
    cust.delete("during-1")
    seen = handshake_with_the_expired_certificate(fleet)
    assert not seen.startswith("answered: b'HTTP"), seen
    fleet.wait_for(
        "the listener's certificate_expired refusal",
        lambda: refusals(fleet) > 0,
        timeout=30,
        logs_of=ENROLLER,
        poll=0.5,
    )
    runs = poll_runs(fleet)  # the poller's next run, still in the window: what it can deliver
    fleet.wait_for(
        "the poller's next run",
        lambda: poll_runs(fleet) > runs,
        timeout=90,
        logs_of=ENROLLER,
        poll=0.5,
    )
    names = sorted(cust.state)
    arrived = kcp_view(fleet, names)
    # no sender delivers with the expired certificate, not even on a connection opened before
    assert [k for k in names if arrived[k] != cust.state[k]], (
        "the KCP converged with an expired certificate"
    )
    print(
        f"window: enroller stopped {window - stopped:.0f} s before; "
        f"{len(names)} ConfigMaps written in "
        f"{time.monotonic() - window:.0f} s, "
        f"{sum(arrived[k] == cust.state[k] for k in names)} of them "
        f"in the KCP; a new handshake with the expired certificate {seen[:120]}; "
        f"{refusals(fleet):.0f} handshakes and "
        f"{refusals(fleet, 'connection_refusals'):.0f} requests on "
        f"older connections refused; the poller's run in the window: {last_run(fleet)}"
    )

    restarted = time.monotonic()
    scale(fleet, replicas)
    renewed = fleet.wait_for(
        "the re-issued certificate in the runtime's Secret",
        lambda: (na := not_after(fleet)) > expires and na,
        timeout=120,
        logs_of=ENROLLER,
        poll=0.5,
    )
    issued_s = time.monotonic() - restarted
    assert renewed > datetime.datetime.now(datetime.UTC)
    fleet.wait_for(
        "the KCP to hold exactly the runtime's state",
        lambda: kcp_view(fleet, names) == cust.state,
        timeout=150,
        logs_of=ENROLLER,
        poll=0.5,
    )
    converged_s = time.monotonic() - restarted
    t0 = time.monotonic()  # the webhook path works again with the new certificates, unrestarted
    cust.write("after", phase="renewed")
    rec = fleet.wait_for(
        "a write after the renewal in the KCP",
        lambda: record(fleet, "after"),
        timeout=90,
        logs_of=ENROLLER,
        poll=0.5,
    )
    after_s = time.monotonic() - t0
    assert rec["spec"]["data"] == {"phase": "renewed"}, rec
    assert restarts(fleet) == before, "a sender was restarted; it should reload the files"
    logs = fleet.skr_pods.logs("tether-webhook") + fleet.skr_pods.logs("tether-poller")
    assert "window-" not in logs and "-----BEGIN" not in logs  # no values, no key material in logs
    print(
        "enroller restarted: certificate re-issued in the runtime's Secret after "
        f"{issued_s:.1f} s, the KCP held the runtime's exact state {converged_s:.1f} s "
        f"after the restart; a new write arrived in {after_s:.1f} s "
        f"(source {rec['spec']['source']})"
    )
