"""The canary as a process against the whole delivery chain on real planes (the loop of
testing/loopenv.py): ``tether canary`` applies its ConfigMap in the runtime (SKR apiserver,
through the kubeconfig Secret in the KCP) -> the webhook (Watch mode) -> a listener of this
module's own (mTLS) -> a RuntimeConfigMap in the Watch's storage namespace -> ``tether
injector`` -> the runtime's Sample CR in the KCP.

Shown: both stages measured (the histogram has observations for ``stored`` and ``injected``,
the last-success gauge is recent, no probe failed once both were seen); with the listener
stopped the next probes count ``timeout`` for ``stored``."""

from __future__ import annotations

import dataclasses
import time
import uuid
from collections.abc import Iterator

import pytest
from kubernetes import client

from testing import compassenv, controlplane, watchenv
from testing import loopenv as loop
from testing import webhookstack as stack
from testing.canaryenv import CanaryProcess
from testing.listenerenv import Env, ListenerProcess, Runtime, add_runtime
from tether.wire import watches

pytestmark = pytest.mark.processes

WAIT = 90.0  # the first probes may meet an injector that has not listed yet


@dataclasses.dataclass
class Chain:
    env: Env
    rt: Runtime
    listener: ListenerProcess
    canary: CanaryProcess


def new_namespace(api: client.ApiClient, prefix: str) -> str:
    name = f"{prefix}-{uuid.uuid4().hex[:8]}"
    core = client.CoreV1Api(api)
    controlplane.retry_busy(
        lambda: core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
    )
    return name


@pytest.fixture(scope="module")
def chain(
    skr: controlplane.ControlPlane,
    skr_api: client.ApiClient,
    listener_env: Env,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Chain]:
    work = tmp_path_factory.mktemp("canary")
    env = dataclasses.replace(listener_env, dir=work)
    rt = add_runtime(env, f"rt-canary-{uuid.uuid4().hex[:8]}")
    kyma = f"kyma-{rt.id.lower()}"[:60]  # listenerenv.create_kyma's name
    compassenv.create_kubeconfig_secret(env.api, env.namespace, kyma, skr)
    skr_ns, target_ns = new_namespace(skr_api, "canary"), new_namespace(env.api, "modules")
    records = dataclasses.replace(env, namespace=new_namespace(env.api, "records"))
    controlplane.install_crds(env.api, loop.sample_crd())
    loop.create_sample(env.api, target_ns, rt.id)
    body = loop.inject_watch(
        f"canary-{uuid.uuid4().hex[:8]}",
        env.namespace,
        skr_ns,
        rt.id,
        target_ns,
        storage={"namespace": records.namespace},
    )
    w = watches.parse(watchenv.apply(env.api, body))
    listener = ListenerProcess(
        env,
        "canary",
        TETHER_LISTENER_HEARTBEAT_INTERVAL_SECONDS="0",
        TETHER_LISTENER_SILENT_CACHE_SECONDS="0",
    )
    core = client.CoreV1Api(skr_api)
    hook, vwc = loop.start_webhook(skr, skr_api, work, rt, listener.url, [w], skr_ns)
    injector = canary = None
    try:
        loop.wait_registered(records, core, rt, skr_ns, w.name)
        injector = loop.InjectorProcess(
            work,
            "canary",
            {
                "TETHER_KCP_NAMESPACE": env.namespace,
                "TETHER_INJECTOR_KUBECONFIG": str(env.kcp.kubeconfig),
                "TETHER_INJECTOR_WATCH_LIST_SECONDS": "1",
                "TETHER_INJECTOR_LEASE_NAMESPACE": env.namespace,
                "TETHER_INJECTOR_LEASE_SECONDS": "4",
            },
        ).start()
        canary = CanaryProcess(
            work,
            "a",
            {
                "TETHER_KCP_NAMESPACE": env.namespace,
                "TETHER_CANARY_KUBECONFIG": str(env.kcp.kubeconfig),
                "TETHER_CANARY_RUNTIME": rt.id,
                "TETHER_CANARY_WATCH": w.name,
                "TETHER_CANARY_NAMESPACE": skr_ns,
                "TETHER_CANARY_LABEL": f"{loop.LABEL}=yes",
                "TETHER_CANARY_INTERVAL_SECONDS": "6",
                "TETHER_CANARY_TIMEOUT_SECONDS": "5",
                "TETHER_CANARY_POLL_SECONDS": "0.2",
                "TETHER_CANARY_LEASE_NAMESPACE": env.namespace,
                "TETHER_CANARY_LEASE_SECONDS": "4",
            },
        ).start()
        yield Chain(env, rt, listener, canary)
    finally:
        for proc in (canary, injector):
            if proc is not None:
                proc.stop()
        stack.unregister(skr_api, vwc)
        hook.stop()
        listener.stop()
        watchenv.delete(env.api, env.namespace, w.name)


def test_both_stages_are_measured_and_the_success_is_recent(chain: Chain) -> None:
    c = chain.canary
    loop.wait_until(
        lambda: (
            c.metric("tether_canary_seconds_count", stage="stored") >= 1
            and c.metric("tether_canary_seconds_count", stage="injected") >= 1
        ),
        WAIT,
        f"an observation of both stages:\n{c.log()}",
        interval=0.5,
    )
    for stage in ("stored", "injected"):
        last = c.metric("tether_canary_last_success_timestamp_seconds", stage=stage)
        assert 0 <= time.time() - last < WAIT, stage
        assert c.metric("tether_canary_probes_total", stage=stage, outcome="ok") >= 1
    assert c.metric("tether_canary_enabled") == 1 and c.metric("tether_canary_leader") == 1
    assert c.metric("tether_canary_probes_total", stage="stored", outcome="write_failed") == 0


def test_with_the_listener_stopped_the_stored_stage_times_out(chain: Chain) -> None:
    c = chain.canary
    before = c.metric("tether_canary_probes_total", stage="stored", outcome="timeout")
    chain.listener.stop()
    loop.wait_until(
        lambda: (
            c.metric("tether_canary_probes_total", stage="stored", outcome="timeout") >= before + 1
        ),
        30.0,
        f"a stored timeout counted:\n{c.log()}",
        interval=0.5,
    )
    assert "stored timeout" in c.log()
