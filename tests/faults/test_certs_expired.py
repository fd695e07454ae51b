"""The runtime's client certificate expired while the enroller was stopped longer than its
lifetime, then a new one is issued (issue 29, item 3).

The certificate is one the enroller issues with its shortest lifetime
(``TETHER_ENROLLER_CERT_LIFETIME_SECONDS`` = 60, backdated by a tenth: 6 s), issued 45 s
before the test starts, so it expires 15 s in. What the enroller's restart does for the
runtime is written by the test: a new certificate from the same CA in the files the
webhook and the poller read (in a cluster: the enroller server-side applies the Secret and
the kubelet updates the mounted files; tests/enroller covers the re-issue of an expired
certificate). The senders are not restarted: they reload the files
(``tether.base.tlsreload``).

During the window the listener refuses every new handshake
(``tether_listener_tls_handshake_refusals_total{reason="certificate_expired"}``); an
established TLS connection outlives the certificate (it is checked at the handshake), so the
test cuts the open connections once at expiry. Asserted: the refusals counted, the
webhook's log naming the cause (``tls SSLError: the peer refused our certificate
(tlsv1_alert_certificate_expired)``), nothing of the
window stored, no customer write failed, then after the new certificate the KCP holds exactly
the runtime's state (every change of the window: the webhook's retries and the poller's
anti-entropy), no key went back; the time to converge is reported.
"""

from __future__ import annotations

import datetime
import pathlib
import time
from collections.abc import Callable

from testing import controlplane, listenerenv
from testing.faultstack import Stack, Workload
from testing.history import History
from testing.listenerenv import metric_value

Report = Callable[..., None]
LIFETIME = datetime.timedelta(seconds=60)  # the enroller's minimum
ISSUED_AGO = datetime.timedelta(seconds=45)


def write_cert(
    s: Stack, d: pathlib.Path, issued: datetime.datetime, lifetime: datetime.timedelta
) -> None:
    """A client certificate of the runtime as the enroller issues it at ``issued``
    (backdated by a tenth of the lifetime, at most 5 minutes), written over the files."""
    start = issued - min(datetime.timedelta(minutes=5), lifetime / 10)
    pair = s.env.runtime_ca.issue(
        s.runtime.id,
        dns_names=[s.runtime.domain],
        client=True,
        not_before=start,
        validity=issued + lifetime - start,
    )
    tmp_c, tmp_k = d / "client.crt.new", d / "client.key.new"
    pair.write(tmp_c, tmp_k)
    tmp_k.replace(d / "client.key")  # the kubelet swaps a Secret's files at once
    tmp_c.replace(d / "client.crt")


def refusals(s: Stack) -> float:
    assert s.listener is not None
    return metric_value(
        s.listener.metrics(),
        "tether_listener_tls_handshake_refusals_total",
        reason="certificate_expired",
    )


def test_client_certificate_expired_while_the_enroller_was_stopped(
    fskr: controlplane.ControlPlane,
    fault_env: listenerenv.Env,
    report: Report,
    tmp_path: pathlib.Path,
) -> None:
    files = {
        "TETHER_CLIENT_CERT_FILE": str(tmp_path / "client.crt"),
        "TETHER_CLIENT_KEY_FILE": str(tmp_path / "client.key"),
    }
    s = Stack(fskr, fault_env, tmp_path, webhook=files, poller=files)
    try:
        issued = datetime.datetime.now(datetime.UTC) - ISSUED_AGO
        write_cert(s, tmp_path, issued, LIFETIME)
        expires = issued + LIFETIME
        s.start()
        run(s, report, tmp_path, expires)
    finally:
        s.close()


def run(s: Stack, report: Report, d: pathlib.Path, expires: datetime.datetime) -> None:
    assert s.webhook is not None
    hist = History(s.env.api, s.env.namespace, s.runtime.id, s.namespace).start()
    w = Workload(s.core, s.namespace, s.labels, rate=5).start()
    time.sleep(max(0.0, (expires - datetime.datetime.now(datetime.UTC)).total_seconds() + 1))
    s.proxy.hole()  # the open connections end; every new one needs a handshake
    s.proxy.heal()
    began = time.monotonic()
    w.wait_writes(10)
    deadline = time.monotonic() + 60
    while (
        refusals(s) == 0
        or s.webhook.metric("tether_webhook_forwards_total", result="retryable", reason="tls") == 0
    ):
        assert time.monotonic() < deadline, f"the expired certificate was not refused\n{s.logs()}"
        time.sleep(0.25)
    w.wait_writes(25)  # the window: the enroller still stopped
    assert "certificate_expired" in s.webhook.log(), f"the webhook's log names no cause\n{s.logs()}"
    assert s.difference(), "the KCP converged with an expired certificate"
    write_cert(s, d, datetime.datetime.now(datetime.UTC), datetime.timedelta(hours=1))
    healed = time.monotonic()
    w.wait_writes(10)
    last = w.finish()
    since = max(healed, last)
    converged = s.wait_converged(since, timeout=90)
    history = hist.stop()
    report(
        fault="client cert expired, enroller stopped",
        writes=len(w.writes),
        failed=len(w.failed()),
        retried=len(w.retried()),
        fault_seconds=round(healed - began, 1),
        after_fault_seconds=round(converged + since - healed, 1),
        converged_seconds=round(converged, 1),
        history=history,
        listener_expired_refusals=refusals(s),
        webhook_tls_failures=s.webhook.metric(
            "tether_webhook_forwards_total", result="retryable", reason="tls"
        ),
    )
