"""The runtime's clock ahead of and behind the KCP's by more than the certificate backdate
(issue 29, item 3; ``testing.clockskew``: libfaketime on the runtime's webhook and poller,
the SKR apiserver keeps the real time).

Where a runtime's parts use the wall clock, and what decides with it:

* ``observedAt`` of every record (webhook, poller) is the runtime's time. The listener's
  ordering rule compares resourceVersions (integers); ``observedAt`` decides only between
  versions that do not parse, and for a key the KCP does not hold (refused when older than
  the tombstone retention, 7 days: a clock that far behind is refused new keys). A clock
  behind cannot make a newer change look older: asserted by the history check.
* TLS: the runtime's parts check the listener's serving certificate with their clock
  (OpenSSL); the listener checks the runtime's client certificate with the KCP's clock,
  which issued it. Ahead by less than the serving certificate's remaining life: no
  difference (asserted). Behind by more than the serving certificate's age (a certificate
  rotated less than the skew ago; it is backdated by only 5 minutes): every new connection
  fails, logged as ``listener call failed (tls SSLError: certificate is not yet valid)``,
  counted as ``tether_webhook_forwards_total{reason="tls"}`` (TetherWebhookForwardingFailing,
  later TetherPollerNotSucceeding), nothing reaches the KCP, and everything converges once
  the clock is corrected (asserted). A connection opened before the rotation keeps working
  (the check is made at the handshake).
* The pollers' schedule (APScheduler) runs on the wall clock: a clock *stepped* back by N
  paused the poll job for N (seen while writing these tests); ``tether.runtime.clockstep`` now
  runs the pushed jobs at once (the last test; it fails without the guard).
* Heartbeats and silence: the listener writes the runtime's heartbeat Lease with its own
  clock when the runtime authenticates, so skew alone never makes a runtime silent
  (asserted). The pollers' Lease is written and read by the runtime's pollers alone, on
  one clock.
* The runtime's last-success gauges (``tether_poller_last_success_timestamp_seconds``,
  the webhook's) are the runtime's time, compared with Prometheus's ``time()``: a node
  behind by more than an alert's threshold (15 min, 30 min) raises it without a fault
  (docs/operations.md, "What each failure costs").
* Certificate renewal is decided by the enroller in the KCP (KCP clock), not in the runtime.
"""

from __future__ import annotations

import datetime
import pathlib
import time
from collections.abc import Callable
from typing import Any

from cryptography import x509
from kubernetes import client

from enroller import pki
from listener.fleet import heartbeat
from testing import clockskew, controlplane
from testing.faultstack import Stack, Workload
from testing.history import History
from tether.base import certs, times

MakeStack = Callable[..., Stack]
Report = Callable[..., None]
BACKDATE = pki.BACKDATE.total_seconds()  # 300 s
AHEAD = BACKDATE * 2  # 10 minutes


def skewed(stack: MakeStack, skew: clockskew.Skew) -> Stack:
    return stack(webhook=skew.env(), poller=skew.env())


def newest_observed_at(s: Stack) -> float:
    """The latest ``observedAt`` among the runtime's records in the KCP (epoch seconds)."""
    observed = [
        times.parse_time(o["spec"]["observedAt"])
        for o in s.env.stored(s.runtime.id)
        if o["spec"]["namespace"] == s.namespace
    ]
    assert observed, "the KCP holds no record of the runtime"
    return max(t.timestamp() for t in observed if t is not None)


def heartbeat_age(s: Stack) -> float:
    """Seconds since the listener last renewed the runtime's heartbeat Lease (real time)."""
    lease: Any = client.CoordinationV1Api(s.env.api).read_namespaced_lease(
        heartbeat.lease_name(s.runtime.id), s.env.namespace
    )
    return time.time() - float(lease.spec.renew_time.timestamp())


def run_workload(s: Stack, seconds: float) -> tuple[Workload, History, float]:
    hist = History(s.env.api, s.env.namespace, s.runtime.id, s.namespace).start()
    w = Workload(s.core, s.namespace, s.labels, rate=5).start()
    time.sleep(seconds)
    last = w.finish()
    return w, hist, last


def test_runtime_clock_ahead_by_twice_the_backdate(
    stack: MakeStack, report: Report, tmp_path: Any
) -> None:
    skew = clockskew.Skew(tmp_path, AHEAD)
    offset = skew.now() - time.time()
    assert abs(offset - AHEAD) < 30, f"the skew is not in effect: {offset:.0f} s"
    s = skewed(stack, skew)
    assert s.webhook is not None
    began = time.monotonic()
    w, hist, last = run_workload(s, 12)
    converged = s.wait_converged(last, timeout=60)
    history = hist.stop()
    ahead = newest_observed_at(s) - time.time()
    assert ahead > AHEAD - 60, f"the records' observedAt is not the runtime's clock ({ahead:.0f} s)"
    tls = s.webhook.metric("tether_webhook_forwards_total", result="retryable", reason="tls")
    assert tls == 0, f"{tls} webhook forwards failed TLS with the clock ahead\n{s.logs()}"
    assert s.webhook.metric("tether_webhook_forwards_total", result="ok") > 0
    age = heartbeat_age(s)
    assert age < 60, f"the runtime's heartbeat is {age:.0f} s old (KCP time): it looks silent"
    report(
        fault=f"SKR clock {AHEAD / 60:+.0f} min (backdate {BACKDATE / 60:.0f} min)",
        writes=len(w.writes),
        failed=len(w.failed()),
        retried=len(w.retried()),
        fault_seconds=round(last - began, 1),
        after_fault_seconds=round(converged, 1),
        converged_seconds=round(converged, 1),
        history=history,
        observed_at_ahead_seconds=round(ahead),
        heartbeat_age_seconds=round(age, 1),
    )


def chain_start(*pem_files: pathlib.Path) -> datetime.datetime:
    """When the last certificate of the files became valid."""
    return max(
        c.not_valid_before_utc
        for f in pem_files
        for c in x509.load_pem_x509_certificates(f.read_bytes())
    )


def fresh_serving_pki(d: pathlib.Path) -> tuple[dict[str, str], dict[str, str]]:
    """A listener serving certificate issued now (a rotation that just happened), from a
    new CA: (the listener's settings, the senders')."""
    ca = certs.CertificateAuthority.create("tether-listener-serving-ca-rotated")
    pair = ca.issue(
        "tether-listener", dns_names=["localhost"], ip_addresses=["127.0.0.1"], server=True
    )
    pair.write(d / "serving.crt", d / "serving.key")
    (d / "serving-ca.crt").write_bytes(ca.cert_pem)
    return (
        {
            "TETHER_LISTENER_TLS_CERT_FILE": str(d / "serving.crt"),
            "TETHER_LISTENER_TLS_KEY_FILE": str(d / "serving.key"),
        },
        {"TETHER_LISTENER_CA_FILE": str(d / "serving-ca.crt")},
    )


def test_runtime_clock_behind_a_fresh_serving_certificate_fails_tls_then_converges(
    stack: MakeStack, report: Report, tmp_path: pathlib.Path, fskr: controlplane.ControlPlane
) -> None:
    """The runtime's clock BEHIND + 30 s behind, the listener's serving certificate issued
    now (backdated by BEHIND): the runtime's senders find it not yet valid. The SKR
    apiserver is not skewed here, but its certificate (issued on the real clock at the
    plane's start) must stay valid for the skewed webhook's read-back: the test waits until
    it is old enough (at once in a suite)."""
    behind = BACKDATE + 30
    plane_start = chain_start(fskr.ca_file, fskr.dir / "pki" / "serving.crt")
    wait = behind - (datetime.datetime.now(datetime.UTC) - plane_start).total_seconds() + 5
    time.sleep(max(0.0, wait))
    skew = clockskew.Skew(tmp_path, -behind)  # skewed from the start (no clock step)
    listener, senders = fresh_serving_pki(tmp_path)
    s = stack(
        listener=listener, webhook={**skew.env(), **senders}, poller={**skew.env(), **senders}
    )
    assert s.webhook is not None
    began = time.monotonic()
    hist = History(s.env.api, s.env.namespace, s.runtime.id, s.namespace).start()
    w = Workload(s.core, s.namespace, s.labels, rate=5).start()
    w.wait_writes(40, timeout=60)  # changes made while every call fails
    _wait(
        lambda: (
            s.webhook is not None
            and s.webhook.metric("tether_webhook_forwards_total", result="retryable", reason="tls")
            > 0
        ),
        60,
        f"the webhook to fail TLS with the clock {behind:.0f} s behind\n{s.logs()}",
    )
    assert s.webhook.metric("tether_webhook_forwards_total", result="ok") == 0
    assert s.difference(), "the KCP converged although the runtime refuses the listener"
    assert "SSLError: certificate is not yet valid" in s.logs(), (
        f"no log line names the cause:\n{s.logs()}"
    )
    skew.set(0)  # the node's clock is corrected
    healed = time.monotonic()
    w.wait_writes(10)
    last = w.finish()
    since = max(healed, last)
    converged = s.wait_converged(since, timeout=90)
    history = hist.stop()
    report(
        fault=f"SKR clock -{behind / 60:.1f} min, serving cert fresh",
        writes=len(w.writes),
        failed=len(w.failed()),
        retried=len(w.retried()),
        fault_seconds=round(healed - began, 1),
        after_fault_seconds=round(converged + since - healed, 1),
        converged_seconds=round(converged, 1),
        history=history,
        webhook_tls_failures=s.webhook.metric(
            "tether_webhook_forwards_total", result="retryable", reason="tls"
        ),
    )


def _wait(cond: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(0.25)


def test_runtime_clock_stepped_back_does_not_pause_the_poller(
    stack: MakeStack, report: Report, tmp_path: Any
) -> None:
    """A node's clock 10 minutes ahead stepped back to the right time while the pollers run
    (NTP correcting it): APScheduler's next run is a wall-clock time, so without
    ``tether.runtime.clockstep`` the poll job would wait the 10 minutes; with it, runs go on within
    a few intervals. (Stepped back *behind* the KCP by more than the backdate, every call
    would fail TLS instead: the test above.)"""
    skew = clockskew.Skew(tmp_path, AHEAD)
    s = skewed(stack, skew)
    leader = _leader(s)
    ok = {"kind": "interval", "outcome": "ok"}
    _wait(lambda: leader.metric("tether_poller_runs_total", **ok) >= 1, 60, "a first poll run")
    hist = History(s.env.api, s.env.namespace, s.runtime.id, s.namespace).start()
    w = Workload(s.core, s.namespace, s.labels, rate=5).start()
    began = time.monotonic()
    skew.set(0)
    _wait(
        lambda: "stepped back" in leader.log(),
        60,  # it read the new offset
        f"the poller to see its clock stepped back {AHEAD / 60:.0f} min:\n{s.logs()}",
    )
    before = leader.metric("tether_poller_runs_total", **ok)
    _wait(
        lambda: leader.metric("tether_poller_runs_total", **ok) >= before + 2,
        60,
        f"two poll runs after the clock was stepped back {AHEAD / 60:.0f} min:\n{s.logs()}",
    )
    resumed = time.monotonic() - began
    assert "stepped back" in leader.log(), "the poller did not say its clock was stepped back"
    last = w.finish()
    converged = s.wait_converged(last, timeout=60)
    history = hist.stop()
    report(
        fault=f"SKR clock {AHEAD / 60:.0f} min ahead stepped back to the KCP's while polling",
        writes=len(w.writes),
        failed=len(w.failed()),
        retried=len(w.retried()),
        fault_seconds=round(last - began, 1),
        after_fault_seconds=round(converged, 1),
        converged_seconds=round(converged, 1),
        history=history,
        poll_runs_resumed_seconds=round(resumed, 1),
    )


def _leader(s: Stack) -> Any:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        found = s.leader()
        if found is not None:
            return found
        time.sleep(0.5)
    raise AssertionError(f"no poller leads after 60 s:\n{s.logs()}")
