"""The listener degrades, not falls over, while the KCP apiserver is down for a long time
(issue 29, item 5; ``listener.fleet.outage``).

The listener runs in the KCP: with the KCP apiserver down nothing updates the Service's
Endpoints, so its pods keep getting the runtimes' requests whatever ``/readyz`` says. It
answers what it safely can. The arrangement is ``test_kcp_outage_long``'s (the issue's 10
minutes scaled by the suite's poll interval: 30 s; the customer writing throughout), and
what it checks here is the listener's answers during the outage:

* the poller's heartbeats (``GET .../state/summary``) keep being answered 200 from the
  summary last read, past the Kyma cache's 10 s (counted from the listener's
  ``tether_listener_requests_total``), and a probe of the runtime's summary equals the one
  read before the outage;
* a change (``POST .../changes``) is refused 503 with a ``Retry-After`` in [base, 2 x base)
  at once (never held near the senders' timeout);
* after the recovery the changes arrive: the KCP ends with exactly the runtime's state, no
  customer write failed, no record went back (``testing.history``).
"""

from __future__ import annotations

import time
from collections.abc import Callable

from testing import controlplane
from testing.faultstack import POLL_INTERVAL, Stack, Workload
from testing.history import History

SCALE = 60.0 / POLL_INTERVAL
OUTAGE = 600.0 / SCALE  # 30 s
KYMA_TTL = 10.0  # the listener's TETHER_LISTENER_KYMA_CACHE_SECONDS default
RETRY_AFTER = 2  # the stack's listener answers 503 with Retry-After in [2, 4)
MakeStack = Callable[..., Stack]
Report = Callable[..., None]


def summary_answers(s: Stack) -> dict[str, float]:
    """The listener's answers to state-summary GETs so far, by status code."""
    assert s.listener is not None
    out: dict[str, float] = {}
    for line in s.listener.metrics().splitlines():
        if line.startswith("tether_listener_requests_total{") and "state/summary" in line:
            code = line.split('code="', 1)[1].split('"', 1)[0]
            out[code] = out.get(code, 0.0) + float(line.rsplit(" ", 1)[1])
    return out


def since(now: dict[str, float], before: dict[str, float]) -> dict[str, int]:
    return {k: int(v - before.get(k, 0.0)) for k, v in now.items() if v > before.get(k, 0.0)}


def probe_change(s: Stack) -> tuple[int, str, float]:
    """A change POSTed as the runtime: status, Retry-After, seconds to the answer."""
    assert s.listener is not None
    rec = s.runtime.record("outage-probe", 1, ns=s.namespace)  # refused: never stored
    t0 = time.monotonic()
    r = s.runtime.session().post(
        f"{s.listener.url}/v1/runtimes/{s.runtime.id}/changes", json=rec, timeout=30
    )
    return r.status_code, r.headers.get("Retry-After", ""), time.monotonic() - t0


def test_kcp_outage_heartbeats_answered_changes_refused(
    stack: MakeStack, report: Report, fkcp: controlplane.ControlPlane
) -> None:
    s = stack(listener={"TETHER_LISTENER_RETRY_AFTER_SECONDS": str(RETRY_AFTER)})
    assert s.webhook is not None and s.listener is not None
    session = s.runtime.session()
    summary_url = f"{s.listener.url}/v1/runtimes/{s.runtime.id}/state/summary"
    hist = History(s.env.api, s.env.namespace, s.runtime.id, s.namespace).start()
    w = Workload(s.core, s.namespace, s.labels, rate=5).start()
    w.wait_writes(10)
    first = summary_answers(s)
    deadline = time.monotonic() + 60  # the poller's heartbeats answered before the fault
    while since(summary_answers(s), first).get("200", 0) < 2:
        assert time.monotonic() < deadline, f"no heartbeat answered 200: {summary_answers(s)}"
        time.sleep(0.5)
    known = session.get(summary_url, timeout=30)
    assert known.status_code == 200, known.text
    began = time.monotonic()
    fkcp.stop_apiserver()
    try:
        time.sleep(KYMA_TTL + 2)  # past the Kyma cache and the epoch cache of normal operation
        late = summary_answers(s)
        probe = session.get(summary_url, timeout=30)
        change = probe_change(s)
        time.sleep(max(0.0, began + OUTAGE - time.monotonic()))
        answered = since(summary_answers(s), late)
        during = len(w.writes)
    finally:
        fkcp.start_apiserver()
    healed = time.monotonic()
    w.wait_writes(10)
    last_write = w.stop()
    failed = w.failed()
    assert not failed, f"{len(failed)} customer writes failed, e.g. {failed[:3]}; {w.summary()}"
    assert during >= 5 * OUTAGE * 0.5, (
        f"the customer wrote too little during the outage: {w.summary()}"
    )
    w.check_runtime()
    converged = s.wait_converged(max(healed, last_write), timeout=120)
    history = hist.stop()
    assert hist.missed > 0, "the history check never met the outage"
    # the runtime's heartbeat, answered from the summary last read
    assert probe.status_code == 200, probe.text
    assert probe.json() == known.json()
    assert answered.get("200", 0) >= 2, (
        f"the poller's heartbeats in the outage's last {OUTAGE - KYMA_TTL - 2:.0f} s, by code: "
        f"{answered}\n{s.logs()}"
    )
    # a change: refused at once, the senders told when to come back (jittered)
    status, retry_after, seconds = change
    assert status == 503 and retry_after in {str(n) for n in range(RETRY_AFTER, 2 * RETRY_AFTER)}, (
        status,
        retry_after,
    )
    assert seconds < 5, f"a change was held {seconds:.1f} s before its 503"
    assert (
        s.webhook.metric("tether_webhook_forwards_total", result="retryable", reason="http-503") > 0
    ), "the fault never reached the webhook"
    report(
        fault=f"KCP apiserver down {OUTAGE:.0f} s: heartbeats from the cache",
        writes=len(w.writes),
        failed=len(failed),
        retried=len(w.retried()),
        fault_seconds=round(healed - began, 1),
        after_fault_seconds=round(converged + max(healed, last_write) - healed, 1),
        converged_seconds=round(converged, 1),
        workload=w.summary(),
        history=history,
        heartbeats_during_by_code=answered,
        change_503_seconds=round(seconds, 2),
        change_retry_after=retry_after,
    )
