"""Anti-entropy by buckets on the real planes: a run of a runtime in sync costs the KCP a
constant number of requests (one summary read), a changed key is found by listing one
bucket, and a summary damaged by hand is corrected after one run with nothing lost."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest
from kubernetes import client

from listener import settings
from listener.fleet import statesummary
from testing.listenerenv import Env, Runtime, kcp_requests, kcp_requests_since
from testing.pollerenv import (
    InProcess,
    kcp_state,
    runtime_state,
    summary_settled,
    unique_selector,
    wait_until,
)
from tether.kube import apitypes
from tether.wire import statehash


def make(
    core: client.CoreV1Api, ns: str, n: int, labels: dict[str, str], prefix: str = "cm"
) -> None:
    for i in range(n):
        core.create_namespaced_config_map(
            ns,
            client.V1ConfigMap(
                metadata=client.V1ObjectMeta(name=f"{prefix}-{i:04d}", labels=labels),
                data={"v": "0"},
            ),
        )


@pytest.mark.parametrize("objects", [100, 2000])
def test_an_in_sync_run_costs_the_kcp_the_same_whatever_the_records(
    objects: int,
    listener_env: Env,
    listener: Any,
    runtime: Callable[..., Runtime],
    skr_api: client.ApiClient,
    kcp_api: client.ApiClient,
    namespace: str,
) -> None:
    rt = runtime()
    core = client.CoreV1Api(skr_api)
    labels, selector = unique_selector()
    make(core, namespace, objects, labels)
    poller = InProcess(
        rt,
        listener.url,
        skr_api,
        selector,
        buckets=True,
        batch_items=200,
        max_buckets=statehash.BUCKETS,
    )
    try:
        first = poller.run()  # bootstrap (full listing once) and every record sent
        assert first.outcome == "ok", first
        assert kcp_state(listener_env, rt.id, namespace)[0] == runtime_state(
            core, namespace, selector
        )
        poller.run()  # the summary settles (merges after the answers)
        before, started = kcp_requests(kcp_api), time.monotonic()
        runs = [poller.run() for _ in range(3)]
        used = kcp_requests_since(kcp_api, before)
        merges = 1 + int((time.monotonic() - started) // settings.Settings().delivery_flush_seconds)
        assert all(r.outcome == "ok" and r.sent == 0 for r in runs), runs
        # the runtime's delivery counts (listener.fleet.deliveries) are merged by time, not per
        # run (at most one GET and PUT per flush interval and worker): not the runs' cost
        bookkeeping = {k: v for k, v in used.items() if k[0] == "runtimedeliveries"}
        assert sum(bookkeeping.values()) <= 2 * merges, used
        # three runs, no listing of the records at all; the summaries come from the listener
        # pod's view (listener/view, watch-fed: no read), at most one GET each while it
        # does not answer
        # the view's watches end (WATCH is counted when one ends) and are renewed once a
        # minute whatever the runs do: at most one per kind in this window, not a read
        streams = {k: v for k, v in used.items() if k[1] == "WATCH"}
        assert all(v <= 1 for v in streams.values()), used
        others = {k: v for k, v in used.items() if k[0] != "runtimedeliveries" and k[1] != "WATCH"}
        assert set(others) <= {("runtimestatesummaries", "GET")}, used
        assert others.get(("runtimestatesummaries", "GET"), 0) <= 3, used
        assert poller.sample("tether_poller_listener_requests_total", call="summary") >= 5
    finally:
        poller.close()


def test_a_change_is_found_by_listing_its_bucket_and_a_damaged_summary_heals(
    listener_env: Env,
    listener: Any,
    runtime: Callable[..., Runtime],
    skr_api: client.ApiClient,
    kcp_api: client.ApiClient,
    namespace: str,
) -> None:
    rt = runtime()
    core = client.CoreV1Api(skr_api)
    labels, selector = unique_selector()
    make(core, namespace, 300, labels)
    poller = InProcess(
        rt,
        listener.url,
        skr_api,
        selector,
        buckets=True,
        batch_items=200,
        max_buckets=statehash.BUCKETS,
    )
    objects = client.CustomObjectsApi(kcp_api)
    try:
        assert poller.run().outcome == "ok"
        poller.run()
        # a change the webhook path missed: found by listing exactly its bucket
        core.patch_namespaced_config_map("cm-0007", namespace, {"data": {"v": "1"}})
        listed = poller.sample("tether_poller_buckets_listed_total")
        res = poller.run()
        assert res.outcome == "ok" and res.differences["changed"] == 1 and res.sent == 1, res
        assert poller.sample("tether_poller_buckets_listed_total") - listed == 1
        assert kcp_state(listener_env, rt.id, namespace)[0] == runtime_state(
            core, namespace, selector
        )
        # damage the summary by hand: three buckets wrong, one of them a bucket without
        # any record (its listing is empty: it must be corrected too; it once was not, and
        # was listed again on every later run), after the listener's merge of the record
        # just sent (at most a second after its answer) has landed
        wait_until(
            lambda: summary_settled(listener_env, rt.id), 30, "the merge of cm-0007 in the summary"
        )
        name = statesummary.name_of(rt.id)
        obj = objects.get_namespaced_custom_object(
            apitypes.RUNTIME_STATE_SUMMARIES.group,
            apitypes.RUNTIME_STATE_SUMMARIES.version,
            listener_env.namespace,
            apitypes.RUNTIME_STATE_SUMMARIES.plural,
            name,
        )
        spread = statehash.spread([(namespace, f"cm-{i:04d}") for i in range(300)])
        empty = [b for b in range(statehash.BUCKETS) if spread[b] == 0]
        full = [b for b in range(statehash.BUCKETS) if spread[b] > 0]
        assert empty and len(full) >= 2, spread
        wrong = [empty[0], full[0], full[1]]
        for b in wrong:
            obj["status"]["hashes"][b] = "0123456789abcdef"
        objects.replace_namespaced_custom_object_status(
            apitypes.RUNTIME_STATE_SUMMARIES.group,
            apitypes.RUNTIME_STATE_SUMMARIES.version,
            listener_env.namespace,
            apitypes.RUNTIME_STATE_SUMMARIES.plural,
            name,
            obj,
        )
        listed = poller.sample("tether_poller_buckets_listed_total")
        healed = poller.run()
        assert healed.outcome == "ok" and healed.sent == 0, healed
        assert poller.sample("tether_poller_buckets_listed_total") - listed == len(wrong)
        # healed: the next run lists nothing
        listed = poller.sample("tether_poller_buckets_listed_total")
        again = poller.run()
        assert again.outcome == "ok" and again.sent == 0, again
        assert poller.sample("tether_poller_buckets_listed_total") == listed
        fixed = objects.get_namespaced_custom_object(
            apitypes.RUNTIME_STATE_SUMMARIES.group,
            apitypes.RUNTIME_STATE_SUMMARIES.version,
            listener_env.namespace,
            apitypes.RUNTIME_STATE_SUMMARIES.plural,
            name,
        )
        stored = statehash.stored_of(fixed["status"])
        assert stored is not None and all(stored.hashes[b] != 0x0123456789ABCDEF for b in wrong)
        assert stored.hashes[empty[0]] == 0 and stored.counts[empty[0]] == 0
        # a delete while the webhook is away: a tombstone through its bucket, nothing lost
        core.delete_namespaced_config_map("cm-0100", namespace)
        gone = poller.run()
        assert gone.outcome == "ok" and gone.differences["deleted"] == 1, gone
        live, dead = kcp_state(listener_env, rt.id, namespace)
        assert live == runtime_state(core, namespace, selector)
        assert (namespace, "cm-0100") in dead
    finally:
        poller.close()


def test_a_summary_damaged_in_more_buckets_than_a_run_lists_heals_at_the_full_digest(
    listener_env: Env,
    listener: Any,
    runtime: Callable[..., Runtime],
    skr_api: client.ApiClient,
    kcp_api: client.ApiClient,
    namespace: str,
) -> None:
    """More than MAX_BUCKETS differing buckets send a run to the full digest; that listing
    of every record sets the summary's buckets, so the next run is by buckets again and
    lists nothing (before, every later run went to the full digest)."""
    rt = runtime()
    core = client.CoreV1Api(skr_api)
    labels, selector = unique_selector()
    make(core, namespace, 300, labels)
    poller = InProcess(rt, listener.url, skr_api, selector, buckets=True, batch_items=200)
    objects = client.CustomObjectsApi(kcp_api)
    try:
        assert poller.run().outcome == "ok"
        assert poller.run().sent == 0
        wait_until(
            lambda: summary_settled(listener_env, rt.id),
            30,
            "the merges of the first run's records in the summary",
        )
        name = statesummary.name_of(rt.id)
        obj = objects.get_namespaced_custom_object(
            apitypes.RUNTIME_STATE_SUMMARIES.group,
            apitypes.RUNTIME_STATE_SUMMARIES.version,
            listener_env.namespace,
            apitypes.RUNTIME_STATE_SUMMARIES.plural,
            name,
        )
        wrong = list(range(0, statehash.BUCKETS, 2))  # 128 buckets: over MAX_BUCKETS (64)
        for b in wrong:
            obj["status"]["hashes"][b] = "0123456789abcdef"
            obj["status"]["records"][b] = 999
        objects.replace_namespaced_custom_object_status(
            apitypes.RUNTIME_STATE_SUMMARIES.group,
            apitypes.RUNTIME_STATE_SUMMARIES.version,
            listener_env.namespace,
            apitypes.RUNTIME_STATE_SUMMARIES.plural,
            name,
            obj,
        )
        state_calls = poller.sample("tether_poller_listener_requests_total", call="state")
        full = poller.run()
        assert full.outcome == "ok" and full.sent == 0, full
        assert poller.sample("tether_poller_listener_requests_total", call="state") > state_calls

        def healed() -> bool:
            got = objects.get_namespaced_custom_object(
                apitypes.RUNTIME_STATE_SUMMARIES.group,
                apitypes.RUNTIME_STATE_SUMMARIES.version,
                listener_env.namespace,
                apitypes.RUNTIME_STATE_SUMMARIES.plural,
                name,
            )
            stored = statehash.stored_of(got["status"])
            return stored is not None and all(
                stored.hashes[b] != 0x0123456789ABCDEF and stored.records[b] != 999 for b in wrong
            )

        deadline = time.monotonic() + 30
        while not healed():
            assert time.monotonic() < deadline, "the full digest's listing set the buckets"
            time.sleep(0.3)
        state_calls = poller.sample("tether_poller_listener_requests_total", call="state")
        listed = poller.sample("tether_poller_buckets_listed_total")
        again = poller.run()
        assert again.outcome == "ok" and again.sent == 0, again
        assert poller.sample("tether_poller_listener_requests_total", call="state") == state_calls
        assert poller.sample("tether_poller_buckets_listed_total") == listed
    finally:
        poller.close()
