"""``tether resync RUNTIME`` on the real planes (issue 43, item 2): records deleted in the KCP by
hand are not found by a bucket run (the runtime's state summary still counts them); after
``tether resync`` the listener rebuilds the summary from the stored records, and the next run
sends exactly what the KCP lacks."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from typing import Any

import pytest
from kubernetes import client

from testing.listenerenv import Env, ListenerProcess, Runtime, metric_value
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

pytestmark = pytest.mark.processes  # runs the tether command (testing/tiers.py)


def _summaries_in_view(listener: ListenerProcess) -> float:
    return metric_value(listener.metrics(), "tether_listener_view_objects", resource="summaries")


def test_resync_brings_back_records_deleted_by_hand_within_one_run(
    listener_env: Env,
    listener: ListenerProcess,
    runtime: Callable[..., Runtime],
    skr_api: client.ApiClient,
    namespace: str,
) -> None:
    rt = runtime()
    core = client.CoreV1Api(skr_api)
    labels, selector = unique_selector()
    for i in range(40):
        core.create_namespaced_config_map(
            namespace,
            client.V1ConfigMap(
                metadata=client.V1ObjectMeta(name=f"cm-{i:02d}", labels=labels), data={"v": "0"}
            ),
        )
    poller = InProcess(
        rt, listener.url, skr_api, selector, buckets=True, max_buckets=statehash.BUCKETS
    )
    objects: Any = client.CustomObjectsApi(listener_env.api)
    res = apitypes.RUNTIME_CONFIGMAPS
    try:
        assert poller.run().outcome == "ok"
        wait_until(lambda: summary_settled(listener_env, rt.id), 30, "the summary settled")
        gone = sorted(o["metadata"]["name"] for o in listener_env.stored(rt.id))[:5]
        for name in gone:  # an operator's mistake in the KCP
            objects.delete_namespaced_custom_object(
                res.group, res.version, listener_env.namespace, res.plural, name
            )
        missed = poller.run()
        assert missed.outcome == "ok" and missed.sent == 0, missed  # the summary says in sync
        held = _summaries_in_view(listener)
        out = subprocess.run(
            [sys.executable, "-m", "command.cli", "resync", rt.id, "-n", listener_env.namespace],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
            env={**os.environ, "KUBECONFIG": str(listener_env.kcp.kubeconfig)},
        )
        assert out.returncode == 0, out.stderr
        assert "its state summary removed" in out.stdout
        # the listener pod's view has seen the deletion (a watch event, milliseconds)
        wait_until(lambda: _summaries_in_view(listener) < held, 30, "the view dropped it")
        run = poller.run()
        assert run.outcome == "ok" and run.sent == 5, run
        assert kcp_state(listener_env, rt.id, namespace)[0] == runtime_state(
            core, namespace, selector
        )
        events: Any = client.CoreV1Api(listener_env.api).list_namespaced_event(
            listener_env.namespace, field_selector="reason=TetherResync"
        )
        assert any(e.involved_object.kind == "Kyma" for e in events.items)
    finally:
        poller.close()
