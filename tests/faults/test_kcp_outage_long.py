"""The KCP's kube-apiserver stopped for a long time while the customer keeps writing in
the runtime (issue 29, items 3, 5 and 6).

Production's fault: 10 minutes, with the poller every 60 s (10 poll intervals), longer than
every queue's hold, retry cap and the listener's Kyma cache (10 s). The suite runs its
pollers 20 times faster (every 3 s, ``testing.faultstack.POLL_INTERVAL``), so the outage
here is 10 minutes / 20 = 30 s, 10 poll intervals, still far beyond every retry cap of
the stack (webhook 2 s, poller 3 s) and the Kyma cache.

What must hold: no customer write fails (the webhook allows every admission, KCP or
not: the workload's API writes and a kubectl session's, each answered OK); after the apiserver
is back the KCP ends holding exactly the runtime's state; no record ever went back to an older
state (``testing.history``). Measured and reported:
the time to converge, and the request rate after recovery, as the listener received it
(``tether_listener_requests_total``) and as the KCP apiserver served it on Tether's
records (its ``apiserver_request_total``, which starts at 0 with the restarted process),
and the listener's ``/readyz`` during the outage (503: it checks the KCP API; in a cluster
its pods still stay in the Service, as here: with the KCP apiserver down no readiness
change reaches the Endpoints, so the senders meet the listener's own answers, 503 with
``Retry-After`` or a heartbeat from its cache: ``test_kcp_outage_degrade``).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import requests
from kubernetes import client

from testing import controlplane, listenerenv
from testing.faultstack import POLL_INTERVAL, Stack, Workload
from testing.history import History

SCALE = 60.0 / POLL_INTERVAL  # production's poll interval over the suite's: 20
OUTAGE = 600.0 / SCALE  # the 10 minutes, scaled: 30 s
WINDOW = 15.0  # the recovery window measured (5 poll intervals)
MakeStack = Callable[..., Stack]
Report = Callable[..., None]


def listener_requests(s: Stack) -> float:
    """Requests the listener answered so far (all routes and codes)."""
    assert s.listener is not None
    total = 0.0
    for line in s.listener.metrics().splitlines():
        if line.startswith("tether_listener_requests_total{"):
            total += float(line.rsplit(" ", 1)[1])
    return total


def rate_curve(s: Stack, seconds: float) -> list[float]:
    """The listener's requests answered in each second of the next ``seconds``."""
    counts = [listener_requests(s)]
    began = time.monotonic()
    for i in range(1, int(seconds) + 1):
        time.sleep(max(0.0, began + i - time.monotonic()))
        counts.append(listener_requests(s))
    return [b - a for a, b in zip(counts, counts[1:], strict=False)]


def kubectl_writes(skr: controlplane.ControlPlane, s: Stack) -> int:
    """A customer's kubectl session in the runtime during the outage: watched ConfigMaps
    created, labelled, patched and deleted (so the customer's model stays the workload's);
    every command must succeed. Returns how many ran."""
    labels = [f"{k}={v}" for k, v in s.labels.items()]
    commands = []
    for i in range(2):
        name = f"kubectl-{i}"
        commands += [
            ["create", "configmap", name, "--from-literal=k=1"],
            ["label", "configmap", name, *labels],
            ["patch", "configmap", name, "-p", '{"data":{"k":"2"}}'],
            ["delete", "configmap", name],
        ]
    for args in commands:
        done = skr.kubectl("-n", s.namespace, *args, "--request-timeout=15s", timeout=60)
        assert done.returncode == 0, f"kubectl {' '.join(args)}: {done.stderr[-500:]}"
    return len(commands)


class Curve(threading.Thread):
    """``rate_curve`` in a thread (measured while the test waits for convergence)."""

    def __init__(self, s: Stack, seconds: float) -> None:
        super().__init__(name="rate-curve", daemon=True)
        self.s, self.seconds, self.result = s, seconds, list[float]()
        self.start()

    def run(self) -> None:
        self.result = rate_curve(self.s, self.seconds)

    def value(self) -> list[float]:
        self.join(self.seconds + 60)
        assert self.result, "the listener's request rate could not be measured"
        return self.result


def test_kcp_apiserver_down_for_ten_scaled_minutes(
    stack: MakeStack,
    report: Report,
    fkcp: controlplane.ControlPlane,
    fskr: controlplane.ControlPlane,
    fkcp_api: client.ApiClient,
) -> None:
    s = stack()
    assert s.webhook is not None
    hist = History(s.env.api, s.env.namespace, s.runtime.id, s.namespace).start()
    w = Workload(s.core, s.namespace, s.labels, rate=5).start()
    w.wait_writes(10)
    steady = rate_curve(s, 5)  # the listener's rate before the fault, for comparison
    began = time.monotonic()
    fkcp.stop_apiserver()
    try:
        time.sleep(OUTAGE / 2)
        kubectl = kubectl_writes(fskr, s)
        assert (
            s.listener is not None
        )  # its readiness (reported: no Endpoints change without the apiserver)
        readyz = requests.get(s.listener.ops_url + "/readyz", timeout=10).status_code
        time.sleep(max(0.0, began + OUTAGE - time.monotonic()))
        during = len(w.writes)
    finally:
        fkcp.start_apiserver()
    healed = time.monotonic()
    kcp_before, kcp_since = listenerenv.kcp_requests(fkcp_api), time.monotonic()
    curve = Curve(s, WINDOW)
    w.wait_writes(10)  # the customer goes on writing after the recovery too
    last_write = w.stop()
    failed = w.failed()
    assert not failed, f"{len(failed)} customer writes failed, e.g. {failed[:3]}; {w.summary()}"
    assert during >= 5 * OUTAGE * 0.5, (
        f"the customer wrote too little during the outage: {w.summary()}"
    )
    w.check_runtime()
    since = max(healed, last_write)
    converged = s.wait_converged(since, timeout=120)
    after = curve.value()
    kcp = listenerenv.kcp_requests_since(fkcp_api, kcp_before)
    kcp_seconds = time.monotonic() - kcp_since
    history = hist.stop()
    assert hist.missed > 0, "the history check never met the outage"
    assert (
        s.webhook.metric("tether_webhook_forwards_total", result="retryable", reason="http-503") > 0
    ), "the fault never reached the webhook"
    kcp_writes = sum(v for (_, verb), v in kcp.items() if verb != "LIST")
    report(
        fault=f"KCP apiserver down {OUTAGE:.0f} s (10 min / {SCALE:.0f})",
        writes=len(w.writes),
        failed=len(failed),
        retried=len(w.retried()),
        fault_seconds=round(healed - began, 1),
        after_fault_seconds=round(converged + since - healed, 1),
        converged_seconds=round(converged, 1),
        workload=w.summary(),
        history=history,
        kubectl_writes=kubectl,
        listener_readyz_during=readyz,
        longest_write_seconds=round(w.max_seconds(began, healed), 2),
        listener_rps_before=round(sum(steady) / len(steady), 1),
        listener_rps_after_first_3s=round(sum(after[:3]) / 3, 1),
        listener_rps_after_window=round(sum(after) / len(after), 1),
        listener_per_second_after=after,
        kcp_record_requests_after=kcp,
        kcp_seconds=round(kcp_seconds, 1),
        kcp_record_writes_per_second=round(kcp_writes / kcp_seconds, 1),
    )
