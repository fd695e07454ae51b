"""Faults on the change-detection path, each on the real planes and the real processes
(``testing.faultstack.Stack``) while a customer writes ConfigMaps at a steady rate.

Every test asserts the same three things: no customer write failed (``Workload``'s
docstring defines it; only the SKR apiserver's own restart lets the customer retry), the
runtime holds what the customer wrote, and the KCP ends holding exactly the runtime's
state (``Stack.wait_converged``); the time to converge goes into the suite's table.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from testing import controlplane
from testing.faultstack import Stack, Workload, finish
from testing.history import History
from testing.pollerenv import wait_until

MakeStack = Callable[..., Stack]
Report = Callable[..., None]


def test_listener_killed_and_restarted_mid_burst(stack: MakeStack, report: Report) -> None:
    """SIGKILL of the listener's gunicorn (master and workers at once, nothing drained);
    the webhook retries through connection errors, a new listener on the same Service
    takes the retries and the pollers' next runs."""
    s = stack()
    hist = History(s.env.api, s.env.namespace, s.runtime.id, s.namespace).start()
    w = Workload(s.core, s.namespace, s.labels).start()
    w.wait_writes(20)
    began = time.monotonic()
    s.kill_listener()
    w.wait_writes(20)  # ~2 s of writes with no listener at all
    s.start_listener()
    healed = time.monotonic()
    w.wait_writes(10)
    finish(
        s,
        w,
        report,
        fault="listener SIGKILLed, restarted mid-burst",
        began=began,
        healed=healed,
        history=hist.summary(),
    )
    hist.stop()  # no record went back to an older state meanwhile


def test_webhook_killed_with_a_full_queue(stack: MakeStack, report: Report) -> None:
    """A webhook whose bounded queue is full (8 keys held 10 s each before hand-out,
    admissions beyond counted as overflow) is SIGKILLed: the queued keys existed only in
    its memory. While it is down the apiserver fails open; after the restart (same port
    and registration) its queue is empty: the pollers deliver what was lost."""
    s = stack(
        webhook={
            "TETHER_WEBHOOK_QUEUE_SIZE": "8",
            "TETHER_WEBHOOK_COALESCE_SECONDS": "10",
            "TETHER_WEBHOOK_READBACK_SECONDS": "12",
        }
    )
    assert s.webhook is not None
    wh = s.webhook
    w = Workload(s.core, s.namespace, s.labels, keys=40, rate=15).start()
    wait_until(
        lambda: wh.metric("tether_webhook_queue_overflowed_total") > 0,
        30,
        "the webhook's queue to be full (an overflow)",
    )
    queued = wh.metric("tether_webhook_queue_depth")
    overflowed = wh.metric("tether_webhook_queue_overflowed_total")
    began = time.monotonic()
    s.kill_webhook()
    w.wait_writes(20)  # admissions fail open while no webhook answers
    s.restart_webhook()
    healed = time.monotonic()
    w.wait_writes(10)
    finish(
        s,
        w,
        report,
        fault="webhook SIGKILLed with a full queue",
        began=began,
        healed=healed,
        queued_at_kill=queued,
        overflowed_at_kill=overflowed,
    )


def test_kcp_apiserver_restarted_mid_burst(
    stack: MakeStack, report: Report, fkcp: controlplane.ControlPlane
) -> None:
    """The KCP's kube-apiserver stopped and started again (etcd keeps the data, same port
    and certificates): the listener answers 503 with Retry-After meanwhile and acknowledges
    nothing it did not persist; the webhook and the pollers retry. The KCP's records are
    sampled meanwhile: none may go back to an older state (``testing.history``)."""
    s = stack()
    assert s.webhook is not None
    hist = History(s.env.api, s.env.namespace, s.runtime.id, s.namespace).start()
    w = Workload(s.core, s.namespace, s.labels).start()
    w.wait_writes(20)
    began = time.monotonic()
    fkcp.stop_apiserver()
    try:
        w.wait_writes(30)  # ~3 s of writes with the KCP API gone
    finally:
        fkcp.start_apiserver()
    healed = time.monotonic()
    w.wait_writes(10)
    finish(
        s,
        w,
        report,
        fault="KCP apiserver restarted mid-burst",
        began=began,
        healed=healed,
        timeout=90,
        history=hist.summary(),
    )
    hist.stop()  # no record went back to an older state meanwhile
    assert (
        s.webhook.metric("tether_webhook_forwards_total", result="retryable", reason="http-503") > 0
    ), "the fault never reached the webhook"


def test_skr_apiserver_restarted(
    stack: MakeStack, report: Report, fskr: controlplane.ControlPlane
) -> None:
    """The runtime's own kube-apiserver stopped and started again. Customer writes cannot
    succeed while it is down: the customer retries each until it succeeds after the
    restart (``Workload(retry_seconds=...)``); none may fail for good. The webhook's
    read-backs and the pollers' lists fail meanwhile and are retried; the poller's Lease
    may change hands."""
    s = stack()
    w = Workload(s.core, s.namespace, s.labels, retry_seconds=90).start()
    w.wait_writes(20)
    began = time.monotonic()
    fskr.stop_apiserver()
    try:
        time.sleep(3)  # the outage: the customer's write in progress is retried
    finally:
        fskr.start_apiserver()
    healed = time.monotonic()
    w.wait_writes(10, timeout=60)
    finish(s, w, report, fault="SKR apiserver restarted", began=began, healed=healed, timeout=90)
    assert w.retried(), "no customer write met the outage"


def test_poller_leader_killed_mid_run(stack: MakeStack, report: Report) -> None:
    """Two poller processes share the Lease; the webhook is down, so the pollers alone
    deliver, slowly (10 records/s): the leader is SIGKILLed while a run is sending. The
    other takes the Lease when it expires and its run delivers the rest."""
    s = stack(
        pollers=2,
        poller={
            "TETHER_POLLER_RATE": "10",
            "TETHER_POLLER_BURST": "5",
            "TETHER_POLLER_BATCH_ITEMS": "5",
        },
    )
    s.kill_webhook()
    lead = s.leader()
    assert lead is not None
    other = next(p for p in s.pollers if p is not lead)
    sent = lead.metric("tether_poller_records_sent_total")
    w = Workload(s.core, s.namespace, s.labels, keys=60, rate=20).start()
    wait_until(
        lambda: lead.metric("tether_poller_records_sent_total") >= sent + 10,
        30,
        "the leader's run to send the burst",
    )
    assert s.difference(), "the run was over before the kill"
    hist = History(s.env.api, s.env.namespace, s.runtime.id, s.namespace).start()
    began = time.monotonic()
    lead.kill()
    wait_until(
        lambda: s.leader() is other, 30, f"the other poller to take the Lease:\n{other.log()}"
    )
    healed = time.monotonic()
    w.wait_writes(10)
    finish(
        s,
        w,
        report,
        fault="poller leader SIGKILLed mid-run",
        began=began,
        healed=healed,
        history=hist.summary(),
    )
    hist.stop()  # the two pollers' runs never wrote a key back


def test_listener_black_holed_longer_than_every_timeout(stack: MakeStack, report: Report) -> None:
    """The listener's address accepts connections and never answers, on new connections
    and on those open (``testing.blackhole``), until the webhook's timeouts (connect 1 s,
    read 2 s) and a poller run's (connect 1 s, read 3 s, two attempts) have fired, and
    for at least 8 s. No customer write waits on it: each ends well within the webhook's
    ``timeoutSeconds`` (2 s), so the apiserver never even had to fail open. Healed, the
    held connections are closed and everything converges."""
    s = stack()
    assert s.webhook is not None
    wh = s.webhook
    w = Workload(s.core, s.namespace, s.labels).start()
    w.wait_writes(20)
    lead = s.leader()
    assert lead is not None
    forwards = wh.metric("tether_webhook_forwards_total", result="retryable")
    runs = lead.metric("tether_poller_runs_total", outcome="listener-failed")
    began = time.monotonic()
    s.proxy.hole()
    try:
        wait_until(
            lambda: (
                wh.metric("tether_webhook_forwards_total", result="retryable") > forwards
                and lead.metric("tether_poller_runs_total", outcome="listener-failed") > runs
            ),
            30,
            "the webhook's and the poller's timeouts to fire",
        )
        time.sleep(max(0.0, began + 8 - time.monotonic()))
    finally:
        s.proxy.heal()
    healed = time.monotonic()
    w.wait_writes(10)
    longest = w.max_seconds(began, healed)
    finish(
        s,
        w,
        report,
        fault="listener black-holed beyond every timeout",
        began=began,
        healed=healed,
        longest_write_seconds=round(longest, 2),
        held_connections=s.proxy.held_connections,
    )
    assert longest < 2.0, f"a customer write took {longest:.2f}s while the listener was black-holed"
    assert s.proxy.held_connections > 0
