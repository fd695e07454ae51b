"""The state summary (``RuntimeStateSummary``) against the real planes: a record written
through one listener while its merge into the summary is still pending, and a poll run
through another listener meanwhile; the janitor removing an orphaned runtime's summary.

Listeners run under gunicorn with mTLS and the least-privilege Role of manifests/kcp/listener,
in a namespace of their own (the janitor's short grace touches nothing of the other tests).
A slow admission webhook on ``runtimestatesummaries/status`` in the KCP holds exactly one
merge (the first status write after it is armed) while everything else goes on.
"""

from __future__ import annotations

import pathlib
import threading
from collections.abc import Iterator
from typing import Any

import pytest
import requests
from kubernetes import client

from listener.fleet import statesummary
from listener.fleet import viewclient as view_client
from listener.storage import records, rules
from listener.view import beats, serve, store
from testing.deliveryenv import Delayer
from testing.janitorenv import Janitor
from testing.listenercalls import new_runtime
from testing.listenerenv import (
    Env,
    ListenerProcess,
    Runtime,
    metric_value,
    own_namespace,
    remove_namespace,
)
from testing.pollerenv import InProcess, kcp_state, runtime_state, unique_selector, wait_until
from tether.base import times
from tether.kube import apitypes, gateway
from tether.wire import conversion, statehash

HOLD = 8.0  # seconds the held merge waits in the KCP's admission


class OneShotDelayer(Delayer):
    """Delays only the first admission call after ``hold`` (``delay`` read once)."""

    def __init__(self, workdir: Any) -> None:
        self._lock = threading.Lock()
        self._armed = 0.0
        super().__init__(workdir)

    @property
    def delay(self) -> float:
        with self._lock:
            d, self._armed = self._armed, 0.0
            return d

    @delay.setter
    def delay(self, value: float) -> None:
        with self._lock:
            self._armed = value

    def vwc(self, name: str, namespace: str) -> dict[str, Any]:
        doc = super().vwc(name, namespace)
        doc["webhooks"][0]["rules"] = [
            {
                "apiGroups": [apitypes.RUNTIME_STATE_SUMMARIES.group],
                "apiVersions": [apitypes.RUNTIME_STATE_SUMMARIES.version],
                "operations": ["UPDATE"],
                "resources": [f"{apitypes.RUNTIME_STATE_SUMMARIES.plural}/status"],
            }
        ]
        return doc


@pytest.fixture(scope="module")
def env(listener_env: Env) -> Iterator[Env]:
    e = own_namespace(listener_env, "ks")
    yield e
    remove_namespace(e)


@pytest.fixture(scope="module")
def listener_a(env: Env) -> Iterator[ListenerProcess]:
    p = ListenerProcess(env, "summary-a", TETHER_LISTENER_HEARTBEAT_INTERVAL_SECONDS="0")
    yield p
    p.stop()


@pytest.fixture(scope="module")
def listener_b(env: Env) -> Iterator[ListenerProcess]:
    p = ListenerProcess(env, "summary-b", TETHER_LISTENER_HEARTBEAT_INTERVAL_SECONDS="0")
    yield p
    p.stop()


@pytest.fixture(scope="module")
def holder(env: Env, tmp_path_factory: pytest.TempPathFactory) -> Iterator[OneShotDelayer]:
    d = OneShotDelayer(tmp_path_factory.mktemp("holder"))
    name = f"tether-test-hold-{env.namespace}"
    adm = client.AdmissionregistrationV1Api(env.api)
    adm.create_validating_webhook_configuration(d.vwc(name, env.namespace))  # type: ignore[arg-type]
    objects = client.CustomObjectsApi(env.api)
    objects.create_namespaced_custom_object(
        apitypes.RUNTIME_STATE_SUMMARIES.group,
        apitypes.RUNTIME_STATE_SUMMARIES.version,
        env.namespace,
        apitypes.RUNTIME_STATE_SUMMARIES.plural,
        {
            "apiVersion": (
                f"{apitypes.RUNTIME_STATE_SUMMARIES.group}/"
                f"{apitypes.RUNTIME_STATE_SUMMARIES.version}"
            ),
            "kind": apitypes.RUNTIME_STATE_SUMMARY_KIND,
            "metadata": {"name": "probe"},
            "spec": {"runtimeId": "probe"},
        },
    )

    def active() -> bool:  # until the apiserver calls the webhook
        obj: Any = objects.get_namespaced_custom_object(
            apitypes.RUNTIME_STATE_SUMMARIES.group,
            apitypes.RUNTIME_STATE_SUMMARIES.version,
            env.namespace,
            apitypes.RUNTIME_STATE_SUMMARIES.plural,
            "probe",
        )
        obj["status"] = {"runtimeId": "probe", "updatedAt": times.now()}
        objects.replace_namespaced_custom_object_status(
            apitypes.RUNTIME_STATE_SUMMARIES.group,
            apitypes.RUNTIME_STATE_SUMMARIES.version,
            env.namespace,
            apitypes.RUNTIME_STATE_SUMMARIES.plural,
            "probe",
            obj,
        )
        return d.calls > 0

    wait_until(active, what="the holding webhook is called", timeout=30)
    try:
        yield d
    finally:
        d.delay = 0.0
        adm.delete_validating_webhook_configuration(name)
        d.httpd.shutdown()
        d.httpd.server_close()


def summary_object(env: Env, runtime_id: str) -> dict[str, Any] | None:
    try:
        obj: Any = client.CustomObjectsApi(env.api).get_namespaced_custom_object(
            apitypes.RUNTIME_STATE_SUMMARIES.group,
            apitypes.RUNTIME_STATE_SUMMARIES.version,
            env.namespace,
            apitypes.RUNTIME_STATE_SUMMARIES.plural,
            statesummary.name_of(runtime_id),
        )
        return dict(obj)
    except client.ApiException as e:
        if e.status == 404:
            return None
        raise


def folded(env: Env, runtime_id: str) -> statehash.Stored:
    """What the summary must hold: the runtime's records folded, with their footprint
    (objects and size annotations per bucket; revisions not compared)."""
    metas = [o["metadata"] for o in env.stored(runtime_id)]
    items = [i for i in (records.digest_item(m) for m in metas) if i is not None]
    b = statehash.fold(items)
    held = statehash.Footprint()
    for m in metas:
        i = records.digest_item(m)
        if i is not None:
            held.add(statehash.bucket_of(i["namespace"], i["name"]), rules.stored_size(m))
    return statehash.Stored.listed(b, 0, held)


def post(p: ListenerProcess, rt: Runtime, rec: dict[str, Any]) -> requests.Response:
    with rt.session() as s:
        return s.post(f"{p.url}/v1/runtimes/{rt.id}/changes", json=rec, timeout=60)


def test_a_poll_run_through_another_listener_while_a_merge_is_pending_loses_nothing(
    env: Env,
    listener_a: ListenerProcess,
    listener_b: ListenerProcess,
    holder: OneShotDelayer,
    skr_api: client.ApiClient,
    namespace: str,
) -> None:
    rt = new_runtime(env)
    core = client.CoreV1Api(skr_api)
    labels, selector = unique_selector()
    for i in range(200):
        core.create_namespaced_config_map(
            namespace,
            client.V1ConfigMap(
                metadata=client.V1ObjectMeta(name=f"cm-{i:04d}", labels=labels), data={"v": "0"}
            ),
        )
    poller = InProcess(
        rt,
        listener_b.url,
        skr_api,
        selector,
        buckets=True,
        batch_items=200,
        max_buckets=statehash.BUCKETS,
    )
    conflicts = "tether_listener_write_conflicts_total"
    try:
        assert poller.run().outcome == "ok"  # bootstrap through B, every record sent
        assert poller.run().sent == 0
        # a change the webhook sends through A; A's merge of it is held in the KCP
        cm: Any = core.patch_namespaced_config_map("cm-0007", namespace, {"data": {"v": "1"}})
        obj = client.ApiClient().sanitize_for_serialization(cm)
        before_conflicts = metric_value(listener_a.metrics(), conflicts, path="summary")
        calls = holder.calls
        holder.delay = HOLD
        assert (
            post(
                listener_a,
                rt,
                dict(conversion.from_configmap(obj, runtime_id=rt.id, source="webhook")),
            ).status_code
            == 200
        )
        wait_until(
            lambda: holder.calls > calls, what="A's merge is in the KCP's admission", timeout=10
        )
        # and a change the webhook missed altogether
        core.patch_namespaced_config_map("cm-0011", namespace, {"data": {"v": "2"}})
        # the poll run through B meanwhile: its summary lacks A's write
        listed = poller.sample("tether_poller_buckets_listed_total")
        res = poller.run()
        assert res.outcome == "ok", res
        assert res.differences["changed"] == 1 and res.sent == 1, res  # cm-0011 only
        assert poller.sample("tether_poller_buckets_listed_total") - listed >= 1
        assert kcp_state(env, rt.id, namespace)[0] == runtime_state(core, namespace, selector)
        held = summary_object(env, rt.id)
        assert held is not None
        # A's merge lands after B corrected the bucket: a conflict, read again, and the
        # change it holds is already in the corrected bucket (skipped, not counted twice)
        wait_until(
            lambda: (
                metric_value(listener_a.metrics(), conflicts, path="summary") > before_conflicts
            ),
            what="A's held merge conflicted and merged again",
            timeout=HOLD + 30,
        )

        def wrong() -> list[int]:
            obj = summary_object(env, rt.id)
            stored = None if obj is None else statehash.stored_of(obj.get("status"))
            assert stored is not None
            want = folded(env, rt.id)
            return [
                b
                for b in range(statehash.BUCKETS)
                if (stored.hashes[b], stored.counts[b], stored.records[b], stored.bytes[b])
                != (want.hashes[b], want.counts[b], want.records[b], want.bytes[b])
            ]

        # A's held change is in the corrected bucket once, not twice
        held_bucket = statehash.bucket_of(namespace, "cm-0007")
        if held_bucket != statehash.bucket_of(namespace, "cm-0011"):
            assert held_bucket not in wrong()
        # B merges what the run sent (cm-0011) at its next request of the runtime, as the
        # poller's next summary read does
        with rt.session() as s:
            assert (
                s.get(f"{listener_b.url}/v1/runtimes/{rt.id}/state/summary", timeout=60).status_code
                == 200
            )
        wait_until(lambda: not wrong(), what="the summary equals the records folded", timeout=30)
        # and a run through either listener now agrees without listing any bucket
        listed = poller.sample("tether_poller_buckets_listed_total")
        again = poller.run()
        assert again.outcome == "ok" and again.sent == 0, again
        assert poller.sample("tether_poller_buckets_listed_total") == listed
        other = InProcess(rt, listener_a.url, skr_api, selector, buckets=True)
        try:
            assert other.run().sent == 0
            assert other.sample("tether_poller_buckets_listed_total") == 0
        finally:
            other.close()
    finally:
        holder.delay = 0.0
        poller.close()


def test_the_janitor_removes_an_orphaned_runtimes_state_summary(
    env: Env,
    listener_a: ListenerProcess,
) -> None:
    gone, kept = new_runtime(env), new_runtime(env)
    for rt in (gone, kept):
        assert post(listener_a, rt, rt.record("a", 1)).status_code == 200
        with rt.session() as s:  # the first summary read builds it
            r = s.get(f"{listener_a.url}/v1/runtimes/{rt.id}/state/summary", timeout=60)
        assert r.status_code == 200, r.text
        assert sum(r.json()["counts"]) == 1
        assert summary_object(env, rt.id) is not None
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
            lambda: summary_object(env, gone.id) is None and not env.stored(gone.id),
            what="the orphan's RuntimeStateSummary and records removed",
            timeout=60,
        )
        removed = wait_until(
            lambda: [
                a
                for a in janitor.audit()
                if a.get("event") == "orphan_removed" and a.get("runtime") == gone.id
            ],
            what="audited",
            timeout=30,
        )
        assert removed[0]["summary"] is True
    finally:
        janitor.stop()
    assert summary_object(env, kept.id) is not None  # a runtime with its Kyma CR keeps it


def test_a_view_behind_the_workers_own_write_is_not_believed(
    env: Env,
    tmp_path: pathlib.Path,
) -> None:
    """A summary read after this worker merged a write must hold that write, though the
    pod's view (a watch's latency behind the KCP) still holds the summary before it: the
    view is frozen here at the bootstrap's version; the read goes to the KCP."""
    rt = new_runtime(env)
    frozen = store.Kind("summaries", store.summary_entry, 100, 1 << 20)
    k = store.Kind("kymas", store.kyma_entry, 1, 1 << 20)
    views = serve.Views(
        k,
        store.Kind("leases", store.lease_entry, 1, 1 << 20),
        frozen,
        beats.Beats(None, "ns", 30.0, 1.0, k),
    )  # type: ignore[arg-type]
    server = serve.Server(str(tmp_path / "view.sock"), views)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    kcp = gateway.from_kubeconfig(str(env.kubeconfig))
    view = view_client.ViewClient(str(tmp_path / "view.sock"), 5.0)
    summaries = statesummary.Summaries(kcp, env.namespace, 20.0, view=view)
    try:
        stored, _ = summaries.read(rt.id)  # none yet: built from a listing (no records)
        assert sum(stored.counts) == 0
        built = summary_object(env, rt.id)
        assert built is not None
        frozen.replace([built])
        frozen.synced = True
        rec = rt.record("a", 1)
        meta = dict(records.body(rec, env.namespace)["metadata"])
        meta["resourceVersion"] = str(10**12)  # after the listing that built the summary
        summaries.written(rt.id, None, meta, rec)
        assert summaries.flush(rt.id) is not None  # merged: the KCP holds the write
        stored, _ = summaries.read(rt.id)
        assert sum(stored.counts) == 1, "the view's older summary was believed"
        caught_up = summary_object(env, rt.id)  # a view that caught up is believed again
        assert caught_up is not None
        frozen.replace([caught_up])
        stored, _ = summaries.read(rt.id)
        assert sum(stored.counts) == 1
    finally:
        view.close()
        server.shutdown()
        server.server_close()
