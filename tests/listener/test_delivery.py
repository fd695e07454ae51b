"""Per-runtime delivery health (``RuntimeDelivery``) against the real KCP plane (issue 13).

Listeners run under gunicorn with mTLS and the least-privilege Role of manifests/kcp/listener,
in a namespace of their own (the janitor's short grace touches nothing of the other tests).
A slow admission webhook on ``runtimedeliveries/status`` in the KCP
(``deliveryenv.Delayer``) makes the flush observably slow: to show that no response waits
for it, and that two listeners merging into one object at once hit the conflict path and
still add up exactly.
"""

from __future__ import annotations

import datetime
import json
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import requests
import yaml
from kubernetes import client

from listener.fleet import heartbeat
from listener.storage import records
from testing.deliveryenv import Delayer, delivery_object, summary
from testing.janitorenv import Janitor
from testing.listenercalls import IMMEDIATE, new_runtime, running
from testing.listenerenv import (
    RBAC_FILE,
    Env,
    ListenerProcess,
    Runtime,
    metric_value,
    own_namespace,
    remove_namespace,
)
from testing.pollerenv import wait_until
from tether.base import times
from tether.kube import apitypes
from tether.wire import changes, delivery

pytestmark = pytest.mark.processes
FAST = IMMEDIATE  # flush after every request
BOUND = 64 * 1024  # bytes: a RuntimeDelivery never grows past this, whatever a runtime sends


@pytest.fixture(scope="module")
def env(listener_env: Env) -> Iterator[Env]:
    e = own_namespace(listener_env, "kd")
    yield e
    remove_namespace(e)


@pytest.fixture(scope="module")
def listener_a(env: Env) -> Iterator[ListenerProcess]:
    yield from running(env, "delivery-a")


@pytest.fixture(scope="module")
def listener_b(env: Env) -> Iterator[ListenerProcess]:
    yield from running(env, "delivery-b")


@pytest.fixture
def make_runtime(env: Env) -> Callable[[], Runtime]:
    return lambda: new_runtime(env)


def post(p: ListenerProcess, rt: Runtime, *recs: dict[str, Any]) -> requests.Response:
    doc: Any = recs[0] if len(recs) == 1 else changes.batch(list(recs))  # type: ignore[arg-type]
    with rt.session() as s:
        return s.post(f"{p.url}/v1/runtimes/{rt.id}/changes", json=doc, timeout=120)


def state(p: ListenerProcess, rt: Runtime) -> requests.Response:
    """A GET of the runtime's state: what the poller sends every interval (flushes too)."""
    with rt.session() as s:
        return s.get(f"{p.url}/v1/runtimes/{rt.id}/state", timeout=60)


def ago(seconds: float) -> str:
    return times.format_time(
        datetime.datetime.now(datetime.UTC) - datetime.timedelta(seconds=seconds)
    )


def settled(
    env: Env,
    p: ListenerProcess,
    rt: Runtime,
    check: Callable[[delivery.Summary], bool],
    what: str,
    timeout: float = 60.0,
) -> delivery.Summary:
    """The runtime's summary once ``check`` holds; each try sends a state GET first (its
    counts reach the KCP at its next request, as a poller's heartbeat does)."""

    def probe() -> delivery.Summary | None:
        s = summary(env, rt.id)
        if s is not None and check(s):
            return s
        assert state(p, rt).status_code == 200
        return None

    got: delivery.Summary = wait_until(probe, what=what, timeout=timeout)
    return got


def metrics_sum(text: str, name: str, **labels: str) -> float:
    return metric_value(text, name, **labels)


@pytest.fixture(scope="module")
def delayer(env: Env, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Delayer]:
    d = Delayer(tmp_path_factory.mktemp("delayer"))
    name = f"tether-test-delay-{env.namespace}"
    adm = client.AdmissionregistrationV1Api(env.api)
    adm.create_validating_webhook_configuration(d.vwc(name, env.namespace))  # type: ignore[arg-type]
    objects = client.CustomObjectsApi(env.api)
    probe = delivery.body("probe", env.namespace, "probe", {})
    objects.create_namespaced_custom_object(
        apitypes.RUNTIME_DELIVERIES.group,
        apitypes.RUNTIME_DELIVERIES.version,
        env.namespace,
        apitypes.RUNTIME_DELIVERIES.plural,
        probe,
    )

    def active() -> bool:  # until the apiserver calls the webhook
        obj: Any = objects.get_namespaced_custom_object(
            apitypes.RUNTIME_DELIVERIES.group,
            apitypes.RUNTIME_DELIVERIES.version,
            env.namespace,
            apitypes.RUNTIME_DELIVERIES.plural,
            "probe",
        )
        obj["status"] = {"runtimeId": "probe", "updatedAt": ago(0)}
        objects.replace_namespaced_custom_object_status(
            apitypes.RUNTIME_DELIVERIES.group,
            apitypes.RUNTIME_DELIVERIES.version,
            env.namespace,
            apitypes.RUNTIME_DELIVERIES.plural,
            "probe",
            obj,
        )
        return d.calls > 0

    wait_until(active, what="the delaying webhook is called", timeout=30)
    try:
        yield d
    finally:
        d.delay = 0.0
        adm.delete_validating_webhook_configuration(name)
        d.httpd.shutdown()
        d.httpd.server_close()


# -- tests -----------------------------------------------------------------------------------


def test_records_through_the_listener_show_up_in_the_runtime_delivery(
    listener_a: ListenerProcess, make_runtime: Callable[[], Runtime], env: Env
) -> None:
    rt = make_runtime()
    before = listener_a.metrics()
    r = post(
        listener_a,
        rt,
        rt.record("fast", 1, observed_at=ago(0.001)),  # within the first bucket or two
        rt.record("slow", 1, observed_at=ago(3.5)),  # (2.5, 5]
        rt.record("late", 1, observed_at=ago(45), source="poller"),  # (30, 300]
        rt.record("ahead", 1, observed_at=ago(-30)),
    )  # sender's clock ahead: lag 0
    assert r.status_code == 200, r.text
    assert [i["outcome"] for i in r.json()["results"]] == ["persisted"] * 4
    r = post(listener_a, rt, rt.record("fast", 1), rt.record("slow", 0))
    assert [i["outcome"] for i in r.json()["results"]] == ["duplicate", "stale"]

    s = settled(
        env,
        listener_a,
        rt,
        lambda s: s.records == 4 and len(s.recent) == 6,
        "the records in the RuntimeDelivery",
    )
    assert (s.webhook, s.poller) == (3, 1)
    assert s.refusals == 0 and s.throttled == 0
    obj = delivery_object(env, rt.id)
    assert obj is not None
    [minute] = [m for m in obj["status"]["minutes"] if sum(m["lag"])]
    lag = minute["lag"]
    assert sum(lag) == 4
    assert lag[delivery.lag_bucket(3.5)] == 1 and lag[delivery.lag_bucket(45)] == 1
    # "fast" and "ahead" (no lag): at most the request's own time, under 2.5 s even on a
    # loaded machine ("slow" is in the bucket above)
    assert sum(lag[: delivery.lag_bucket(2.5) + 1]) == 2
    outcomes = {r["name"]: r["outcome"] for r in s.recent if r["outcome"] != "persisted"}
    assert set(outcomes.values()) == {"duplicate", "stale"}
    late = next(r for r in s.recent if r["name"] == "late")
    assert late["source"] == "poller" and late["lagSeconds"] >= 45
    assert s.last_change is not None and s.updated is not None and s.stored["records"] == 4
    assert s.stored["recordLimit"] == 20_000
    meta = obj["metadata"]
    assert meta["labels"] == {
        apitypes.RUNTIME_ID_LABEL: rt.id,
        apitypes.MANAGED_BY_LABEL: records.MANAGED_BY,
    }
    assert obj["spec"] == {"runtimeId": rt.id} and obj["status"]["runtimeId"] == rt.id

    after = listener_a.metrics()
    name = "tether_listener_delivery_lag_seconds_count"
    assert (
        metric_value(after, name, source="webhook") - metric_value(before, name, source="webhook")
        == 3
    )
    assert (
        metric_value(after, name, source="poller") - metric_value(before, name, source="poller")
        == 1
    )
    bucket = "tether_listener_delivery_lag_seconds_bucket"
    assert metric_value(after, bucket, source="poller", le="30.0") == metric_value(
        before, bucket, source="poller", le="30.0"
    )  # 45 s is above 30
    counted = "tether_listener_records_by_source_total"
    for outcome, n in (("persisted", 3), ("duplicate", 1), ("stale", 1)):
        assert (
            metric_value(after, counted, source="webhook", outcome=outcome)
            - metric_value(before, counted, source="webhook", outcome=outcome)
            == n
        )
    assert metric_value(after, "tether_listener_delivery_flushes_total") > metric_value(
        before, "tether_listener_delivery_flushes_total"
    )
    assert rt.id not in after  # no series per runtime

    printed = env.kcp.kubectl(
        "-n", env.namespace, "get", "runtimedeliveries", heartbeat.lease_name(rt.id)
    )
    assert printed.returncode == 0, printed.stderr
    header = printed.stdout.splitlines()[0].split()
    assert header == ["NAME", "RUNTIME", "LAST-CHANGE", "UPDATED", "AGE"]
    assert rt.id in printed.stdout


def test_a_quota_refusal_and_429s_are_counted_and_the_rest_flushed_at_worker_exit(
    env: Env, make_runtime: Callable[[], Runtime]
) -> None:
    p = ListenerProcess(
        env,
        "delivery-t",
        **FAST,
        TETHER_LISTENER_QUOTA_RECORDS="2",
        TETHER_LISTENER_RATE_PER_SECOND="0.01",
        TETHER_LISTENER_RATE_BURST="4",
        TETHER_LISTENER_GRACEFUL_TIMEOUT_SECONDS="25",
    )  # the exit's flush budget
    try:
        rt = make_runtime()
        r = post(p, rt, rt.record("k0", 1), rt.record("k1", 1))  # 4 tokens -> 2
        assert [i["outcome"] for i in r.json()["results"]] == ["persisted", "persisted"]
        time.sleep(0.3)  # each answer's flush finishes before the next request
        # 3 records, 2 tokens: 429 by the application (the body was read)
        r = post(p, rt, *(rt.record(f"b{i}", 1) for i in range(3)))
        assert r.status_code == 429, r.text
        time.sleep(0.3)
        r = post(p, rt, rt.record("k2", 1))  # a third key: over the record quota; 2 -> 1
        assert r.status_code == 413 and r.json()["details"]["reason"] == "quota_records"
        time.sleep(0.3)
        assert state(p, rt).status_code == 200  # the last token
        s = wait_until(
            lambda: (lambda s: s if s is not None and s.refusals else None)(summary(env, rt.id)),
            what="the quota refusal in the RuntimeDelivery",
            timeout=30,
        )
        assert s.refused == {"quota_records": 1} and s.throttled == 1 and s.webhook == 2
        assert s.stored["records"] == 2 and s.stored["recordLimit"] == 2
        refused = [r for r in s.recent if r["outcome"] == "refused"]
        assert [r["name"] for r in refused] == ["k2"]
        last = s.last_refused["quota_records"]  # the refused object and when (issue 28, item 6)
        assert (last["namespace"], last["name"], last["status"]) == (
            refused[0]["namespace"],
            "k2",
            413,
        )
        assert last["at"] == refused[0]["at"] and "rate" not in s.last_refused  # 429: counted
        # the bucket is empty now: 429 in the worker's main loop (no thread, no flush)
        before = metric_value(
            p.metrics(),
            "tether_listener_requests_total",
            route="/v1/runtimes/<runtime_id>/changes",
            method="POST",
            code="429",
        )
        r = post(p, rt, rt.record("k3", 1))
        assert r.status_code == 429
        assert (
            metric_value(
                p.metrics(),
                "tether_listener_requests_total",
                route="/v1/runtimes/<runtime_id>/changes",
                method="POST",
                code="429",
            )
            == before + 1
        )
        # read at once: the worker's flush thread (every second) would merge it, and on a
        # loaded machine its tick drifts into any wait here (it did in parallel runs)
        s = summary(env, rt.id)
        assert s is not None and s.throttled == 1  # still only in the worker's memory
        assert (
            metric_value(
                p.metrics(),
                "tether_listener_records_by_source_total",
                source="webhook",
                outcome="refused",
            )
            == 1
        )
    finally:
        p.stop()  # SIGTERM: the worker flushes what it holds before it exits
    s = summary(env, rt.id)
    assert s is not None and s.throttled == 2, s
    assert (s.webhook, s.refused) == (2, {"quota_records": 1})


def test_two_listeners_flushing_one_runtime_add_up_exactly(
    listener_a: ListenerProcess,
    listener_b: ListenerProcess,
    delayer: Delayer,
    make_runtime: Callable[[], Runtime],
    env: Env,
) -> None:
    rt = make_runtime()
    assert post(listener_a, rt, rt.record("first", 1)).status_code == 200
    wait_until(
        lambda: (lambda s: s is not None and s.records == 1)(summary(env, rt.id)),
        what="the object exists with the first record",
        timeout=30,
    )
    conflicts = "tether_listener_write_conflicts_total"
    before = sum(
        metric_value(p.metrics(), conflicts, path="delivery") for p in (listener_a, listener_b)
    )
    delayer.delay = 1.5  # both read the same resourceVersion before either write lands
    barrier = threading.Barrier(2)
    answers: dict[str, int] = {}

    def send(p: ListenerProcess, tag: str, n: int) -> None:
        recs = [rt.record(f"{tag}{i}", 1) for i in range(n)]
        barrier.wait()
        answers[tag] = post(p, rt, *recs).status_code

    threads = [
        threading.Thread(target=send, args=(listener_a, "a", 3)),
        threading.Thread(target=send, args=(listener_b, "b", 5)),
    ]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        assert answers == {"a": 200, "b": 200}
        s = wait_until(
            lambda: (lambda s: s if s is not None and s.records >= 9 else None)(
                summary(env, rt.id)
            ),
            what="both listeners' counts merged",
            timeout=60,
        )
    finally:
        delayer.delay = 0.0
    time.sleep(1.0)
    s = summary(env, rt.id)
    assert s is not None and s.records == 1 + 3 + 5 and s.webhook == 9  # exactly, no double count
    after = sum(
        metric_value(p.metrics(), conflicts, path="delivery") for p in (listener_a, listener_b)
    )
    assert after >= before + 1  # one of them lost the race, read again and merged again
    names = {r["name"] for r in s.recent}
    assert {"first", "a0", "b4"} <= names


def test_the_flush_happens_after_the_response(
    listener_a: ListenerProcess, delayer: Delayer, make_runtime: Callable[[], Runtime], env: Env
) -> None:
    rt = make_runtime()
    delayer.delay = 4.0  # every status write takes 4 s
    try:
        t0 = time.monotonic()
        r = post(listener_a, rt, rt.record("app", 1))
        answered = time.monotonic() - t0
        assert r.status_code == 200, r.text
        assert answered < 3.0, answered  # the answer did not wait for the write
        assert summary(env, rt.id) is None  # not written yet: the flush is still running
        s = wait_until(lambda: summary(env, rt.id), what="written after the answer", timeout=30)
        assert s.webhook == 1
        assert time.monotonic() - t0 >= 3.5
    finally:
        delayer.delay = 0.0


def test_a_hostile_runtime_keeps_its_runtime_delivery_bounded(
    listener_a: ListenerProcess, make_runtime: Callable[[], Runtime], env: Env
) -> None:
    rt = make_runtime()
    ns = "n" * 63
    n = 0
    for batch in range(4):  # 2,000 records with the longest names there are
        recs = [
            dict(
                rt.record(
                    f"{batch}-{i}-" + "x" * 240, 1, ns=ns, source="poller" if i % 2 else "webhook"
                ),
                uid=f"u-{batch}-{i}",
            )
            for i in range(500)
        ]
        r = post(listener_a, rt, *recs)
        assert r.status_code == 200, r.text
        n += len(recs)
    with rt.session() as session:  # refusals of every kind the runtime can cause
        url = f"{listener_a.url}/v1/runtimes/{rt.id}/changes"
        assert (
            session.post(
                url, data=b"{not json", timeout=30, headers={"Content-Type": "application/json"}
            ).status_code
            == 400
        )
        assert (
            session.post(
                url, data=b"x", headers={"Content-Type": "text/plain"}, timeout=30
            ).status_code
            == 415
        )
        assert session.post(url, json={"kind": "nonsense"}, timeout=30).status_code == 400
        other = dict(rt.record("x", 1), runtimeId="someone-else")
        assert session.post(url, json=other, timeout=30).status_code == 403
        assert (
            session.get(
                f"{listener_a.url}/v1/runtimes/{rt.id}/state?limit=0", timeout=30
            ).status_code
            == 400
        )
    s = settled(
        env,
        listener_a,
        rt,
        lambda s: s.records == n and s.refusals >= 5,
        "every record and refusal counted",
        timeout=120,
    )
    assert (s.webhook, s.poller) == (n // 2, n // 2)
    assert set(s.refused) >= {"invalid_json", "media_type", "schema", "runtime_id_mismatch"}
    obj = delivery_object(env, rt.id)
    assert obj is not None
    size = len(json.dumps(obj).encode())
    assert size < BOUND, size
    st = obj["status"]
    assert len(st["recent"]) == delivery.RECENT
    assert all(len(r["name"]) <= delivery.MAX_TEXT for r in st["recent"])
    assert len(st["minutes"]) <= delivery.WINDOW_MINUTES
    assert all(len(m["refused"]) <= delivery.MAX_REASONS + 1 for m in st["minutes"])
    # the last refusal of each reason: the runtime's own requests, no object read
    assert set(st["lastRefused"]) >= {"invalid_json", "media_type", "schema", "query"}
    assert all("name" not in e for e in st["lastRefused"].values()), st["lastRefused"]


def test_the_janitor_removes_an_orphaned_runtimes_delivery(
    listener_a: ListenerProcess, make_runtime: Callable[[], Runtime], env: Env
) -> None:
    gone, kept = make_runtime(), make_runtime()
    for rt in (gone, kept):
        assert post(listener_a, rt, rt.record("a", 1)).status_code == 200
        settled(env, listener_a, rt, lambda s: s.records == 1, "delivery written")
    client.CustomObjectsApi(env.api).delete_namespaced_custom_object(
        apitypes.KYMAS.group,
        apitypes.KYMAS.version,
        env.namespace,
        apitypes.KYMAS.plural,
        f"kyma-{gone.id.lower()}"[:60],
    )
    janitor = Janitor(env)
    try:
        wait_until(
            lambda: delivery_object(env, gone.id) is None and not env.stored(gone.id),
            what="the orphan's RuntimeDelivery and records removed",
            timeout=60,
        )
        assert janitor.metric("tether_listener_janitor_orphan_deliveries_deleted_total") >= 1
    finally:
        janitor.stop()
    assert delivery_object(env, kept.id) is not None  # a runtime with its Kyma CR keeps it


def test_a_failed_flush_keeps_the_counts_until_the_kcp_takes_them(
    listener_env: Env, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """Without the Role's rules on runtimedeliveries every flush fails (403): requests are
    answered as always, the counts stay in the worker (bounded) and arrive once allowed."""
    env = own_namespace(listener_env, "kdr")
    role = next(d for d in yaml.safe_load_all(RBAC_FILE.read_text()) if d["kind"] == "Role")
    full_rules = role["rules"]
    try:
        rbac = client.RbacAuthorizationV1Api(env.api)
        role = rbac.read_namespaced_role("tether-listener", env.namespace)
        role.rules = [
            r
            for r in role.rules or []
            if not any(
                res.startswith(apitypes.RUNTIME_DELIVERIES.plural) for res in r.resources or []
            )
        ]
        rbac.replace_namespaced_role("tether-listener", env.namespace, role)
        p = ListenerProcess(env, "delivery-rbac", **FAST)
        try:
            rt = new_runtime(env)
            for i in range(3):
                r = post(p, rt, rt.record(f"k{i}", 1))
                assert r.status_code == 200, r.text
            wait_until(
                lambda: (
                    metric_value(
                        p.metrics(),
                        "tether_listener_delivery_flush_errors_total",
                        reason="forbidden",
                    )
                    >= 1
                ),
                what="flushes refused",
                timeout=30,
            )
            assert delivery_object(env, rt.id) is None
            role = rbac.read_namespaced_role("tether-listener", env.namespace)
            role.rules = full_rules
            rbac.replace_namespaced_role("tether-listener", env.namespace, role)
            s = settled(env, p, rt, lambda s: s.records == 3, "the kept counts written")
            assert s.webhook == 3 and len(s.recent) == 3
        finally:
            p.stop()
    finally:
        remove_namespace(env)


def test_requests_alone_are_heartbeats_that_cost_no_write_of_their_own(
    env: Env, listener_a: ListenerProcess, make_runtime: Callable[[], Runtime]
) -> None:
    """Each authenticated request counts in the minute's ``beats`` (the admin pages'
    heartbeat chart); a delta of requests only is merged with the runtime's next counts or
    after 50 minutes (listener.fleet.beatcounts), never once per heartbeat (FLUSH_SECONDS is 0
    here)."""
    rt = make_runtime()
    for _ in range(3):
        assert state(listener_a, rt).status_code == 200
    time.sleep(1.0)
    assert delivery_object(env, rt.id) is None  # three heartbeats, no write
    assert post(listener_a, rt, rt.record("beat", 5)).status_code == 200
    s = settled(env, listener_a, rt, lambda s: s.records == 1, "the record merged")
    assert sum(p.beats for p in s.series) >= 4  # the three GETs and the POST (one worker)
    raw = delivery_object(env, rt.id)
    assert raw is not None and all("beats" in m for m in raw["status"]["minutes"])
