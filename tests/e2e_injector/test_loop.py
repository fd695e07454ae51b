"""The whole loop on real planes (testing/loopenv.py): a customer's labelled ConfigMap in the
runtime -> the webhook (Watch mode, registered in the SKR apiserver) -> the listener (mTLS)
-> a RuntimeConfigMap in the KCP -> ``tether injector`` (a subprocess) -> the runtime's
Sample CR in the KCP, ``spec.configuration``.

The module's Watch stores its records in a namespace of their own (spec.storage.namespace).
Shown: an edit reaches the CR; a second ConfigMap merges in; deleting a ConfigMap removes its
values, deleting the last removes the field (the injector's rule); the injector SIGKILLed while
edits flow and restarted loses no change, and so does a KCP apiserver restart; a runtime
restored from an etcd snapshot (a new epoch, the poller's run) makes the CR converge to the
runtime's actual state; deleting the Kyma CR removes its records (the janitor's rule,
``--once`` runs) and the injector's output."""

from __future__ import annotations

import dataclasses
import pathlib
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client

from poller import metrics, run, scan, watchrun
from testing import controlplane, watchenv
from testing import loopenv as loop
from testing import webhookstack as stack
from testing.listenerenv import Env, ListenerProcess, Runtime, add_runtime
from testing.pollerenv import client_settings
from tether.kube import apitypes, gateway
from tether.runtime import sender
from tether.wire import filters, watches, watchset, watchwire

WAIT = 30.0


@dataclasses.dataclass
class Loop:
    env: Env
    records: Env  # the env read in the Watch's storage namespace
    rt: Runtime
    core: client.CoreV1Api
    skr_ns: str
    target_ns: str
    watch: watches.Watch
    injector: loop.InjectorProcess

    def configuration(self) -> dict[str, str] | None:
        return loop.configuration(self.env.api, self.target_ns, self.rt.id)

    def converges(self, want: dict[str, str] | None, what: str) -> None:
        loop.wait_until(
            lambda: self.configuration() == want,
            WAIT,
            f"{what}: {want}, got {self.configuration()}\n{self.injector.log()}",
        )


def injector_env(env: Env) -> dict[str, str]:
    return {
        "TETHER_KCP_NAMESPACE": env.namespace,
        "TETHER_INJECTOR_KUBECONFIG": str(env.kcp.kubeconfig),
        "TETHER_INJECTOR_WATCH_LIST_SECONDS": "1",
        "TETHER_INJECTOR_LEASE_NAMESPACE": env.namespace,
        "TETHER_INJECTOR_RESYNC_SECONDS": "5",
        "TETHER_INJECTOR_LEASE_SECONDS": "4",
    }


def new_namespace(api: client.ApiClient, prefix: str) -> str:
    name = f"{prefix}-{uuid.uuid4().hex[:8]}"
    core = client.CoreV1Api(api)
    controlplane.retry_busy(
        lambda: core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
    )
    return name


def in_force(env: Env, skr_ns: str, rt: Runtime, target_ns: str, **spec: Any) -> watches.Watch:
    controlplane.install_crds(env.api, loop.sample_crd())
    loop.create_sample(env.api, target_ns, rt.id)
    body = loop.inject_watch(
        f"loop-{uuid.uuid4().hex[:8]}", env.namespace, skr_ns, rt.id, target_ns, **spec
    )
    return watches.parse(watchenv.apply(env.api, body))


@pytest.fixture(scope="module")
def lp(
    skr: controlplane.ControlPlane,
    skr_api: client.ApiClient,
    listener_env: Env,
    listener: ListenerProcess,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Loop]:
    work = tmp_path_factory.mktemp("loop")
    env = dataclasses.replace(listener_env, dir=work)
    rt = add_runtime(env, f"rt-loop-{uuid.uuid4().hex[:8]}")
    skr_ns, target_ns = new_namespace(skr_api, "loop"), new_namespace(env.api, "modules")
    records = dataclasses.replace(env, namespace=new_namespace(env.api, "records"))
    w = in_force(env, skr_ns, rt, target_ns, storage={"namespace": records.namespace})
    core = client.CoreV1Api(skr_api)
    proc, vwc = loop.start_webhook(skr, skr_api, work, rt, listener.url, [w], skr_ns)
    lp = Loop(
        env,
        records,
        rt,
        core,
        skr_ns,
        target_ns,
        w,
        loop.InjectorProcess(work, "a", injector_env(env)).start(),
    )
    try:
        loop.wait_registered(records, core, rt, skr_ns, w.name)
        core.delete_namespaced_config_map("loop-probe", skr_ns)
        yield lp
    finally:
        lp.injector.stop()
        stack.unregister(skr_api, vwc)
        rc = proc.stop()
        watchenv.delete(env.api, env.namespace, w.name)
    assert rc == 0, proc.log()


def test_an_edit_reaches_the_component_cr_and_deletions_remove_the_values(lp: Loop) -> None:
    loop.put(lp.core, lp.skr_ns, "app-a", {"color": "red", "size": "s"})
    lp.converges({"color": "red", "size": "s"}, "the first ConfigMap's values")
    loop.put(lp.core, lp.skr_ns, "app-a", {"color": "blue"})
    lp.converges({"color": "blue", "size": "s"}, "the edit")
    loop.put(lp.core, lp.skr_ns, "app-b", {"size": "xl", "mode": "fast"})
    lp.converges({"color": "blue", "size": "xl", "mode": "fast"}, "app-b merged over app-a")
    obj = loop.sample(lp.env.api, lp.target_ns, lp.rt.id)
    assert obj["spec"]["replicas"] == 1  # the module's own field is untouched
    lp.core.delete_namespaced_config_map("app-b", lp.skr_ns)
    lp.converges({"color": "blue", "size": "s"}, "app-b's values gone with it")
    loop.put(lp.core, lp.skr_ns, "plain", {"secret": "not-asked-for"}, labels={})
    lp.core.delete_namespaced_config_map("app-a", lp.skr_ns)
    lp.converges(None, "the field removed with the last ConfigMap")
    assert "not-asked-for" not in str(loop.sample(lp.env.api, lp.target_ns, lp.rt.id))


def test_the_injector_killed_mid_stream_and_restarted_loses_no_change(lp: Loop) -> None:
    """SIGKILL while edits flow; edits and a deletion while it is down; a new process (the
    next leader, after the dead one's Lease expires) converges to the runtime's state."""
    for n in range(5):
        loop.put(lp.core, lp.skr_ns, "kill-a", {"n": str(n)})
    lp.injector.kill()
    loop.put(lp.core, lp.skr_ns, "kill-a", {"n": "down"})
    loop.put(lp.core, lp.skr_ns, "kill-b", {"m": "down"})
    loop.put(lp.core, lp.skr_ns, "kill-c", {"gone": "soon"})
    lp.core.delete_namespaced_config_map("kill-c", lp.skr_ns)
    loop.wait_until(
        lambda: {o["spec"]["name"]: o["spec"]["deleted"] for o in lp.records.stored(lp.rt.id)}.get(
            "kill-c"
        ),
        WAIT,
        "kill-c's tombstone stored",
    )
    assert lp.configuration() != {"n": "down", "m": "down"}  # nobody applied it yet
    lp.injector = loop.InjectorProcess(
        lp.injector.log_path.parent, "b", injector_env(lp.env)
    ).start()
    lp.converges({"n": "down", "m": "down"}, "the state written while the injector was down")
    for name in ("kill-a", "kill-b"):
        lp.core.delete_namespaced_config_map(name, lp.skr_ns)
    lp.converges(None, "the field removed after the restart")


def poller_runner(
    rt: Runtime, url: str, api: client.ApiClient, skr_ns: str
) -> tuple[run.Runner, sender.ListenerClient]:
    """One poller run in Watch mode (the runtime's Watch list in ``skr_ns``)."""
    m = metrics.Metrics()
    lc = sender.ListenerClient(client_settings(rt, url))
    kube = gateway.Kube(api)
    flt = filters.ConfigMapFilter.build(filters.DEFAULT_IGNORED_NAMESPACES, f"{loop.LABEL}=yes")
    lister = scan.Lister(kube, flt, page_size=50, timeout=30, on_request=m.apiserver_requests.inc)
    source = watchset.WatchSet(kube, skr_ns, ttl=0)
    return run.Runner(
        rt.id,
        run.RunSettings(),
        flt,
        lister,
        lc,
        m,
        identity=lister.identity,
        watches=watchrun.Watching(source, lister),
    ), lc


def poll(rt: Runtime, url: str, plane: controlplane.ControlPlane, skr_ns: str) -> Any:
    runner, lc = poller_runner(rt, url, plane.api_client(), skr_ns)
    try:
        return runner.run()
    finally:
        lc.close()


def test_a_runtime_restored_from_a_snapshot_converges_the_component_cr(
    lp: Loop, listener: ListenerProcess, tmp_path: pathlib.Path
) -> None:
    """Its own SKR plane (the session's must not go back) and runtime; the poller carries
    the changes (its run after the restore starts a new epoch)."""
    plane = controlplane.ControlPlane("skr-loop-epochs").start()
    try:
        env = dataclasses.replace(lp.env, dir=tmp_path)
        rt = add_runtime(env, f"rt-loop-{uuid.uuid4().hex[:8]}")
        api = plane.api_client()
        core = client.CoreV1Api(api)
        skr_ns = "team-a"
        controlplane.retry_busy(
            lambda: core.create_namespace(
                client.V1Namespace(metadata=client.V1ObjectMeta(name=skr_ns))
            )
        )
        w = in_force(env, skr_ns, rt, lp.target_ns)  # no webhook: the poller moves the changes
        core.create_namespaced_config_map(
            skr_ns,
            client.V1ConfigMap(
                metadata=client.V1ObjectMeta(name=watchwire.WIRE_CONFIGMAP),
                data={watchwire.WIRE_KEY: watchwire.to_wire((w,))},
            ),
        )

        def want() -> dict[str, str] | None:
            return loop.configuration(env.api, lp.target_ns, rt.id)

        loop.put(core, skr_ns, "a", {"k1": "before", "k2": "before"})
        loop.wait_until(
            lambda: (
                poll(rt, listener.url, plane, skr_ns).outcome == "ok"
                and want() == {"k1": "before", "k2": "before"}
            ),
            WAIT,
            "the first state",
        )
        snap = plane.snapshot(tmp_path / "skr.db")
        loop.put(core, skr_ns, "b", {"k3": "lost"})
        for n in range(20):  # history the restore takes back: well beyond what follows it
            loop.put(core, skr_ns, "a", {"k1": f"lost-{n}"})
        loop.put(core, skr_ns, "a", {"k1": "lost"})
        assert poll(rt, listener.url, plane, skr_ns).outcome == "ok"
        high = max(int(o["spec"]["resourceVersion"]) for o in env.stored(rt.id))
        loop.wait_until(
            lambda: want() == {"k1": "lost", "k2": "before", "k3": "lost"},
            WAIT,
            "the changes after the snapshot",
        )

        plane.restore(snap)
        core = client.CoreV1Api(plane.api_client())
        controlplane.retry_busy(lambda: core.list_namespace(limit=1))
        loop.put(core, skr_ns, "c", {"k4": "after"})
        listed = int(core.list_namespaced_config_map(skr_ns, limit=1).metadata.resource_version)  # type: ignore[union-attr,arg-type]
        assert listed < high, "the restored history must be behind the stored records"
        res = poll(rt, listener.url, plane, skr_ns)
        assert res.outcome == "ok" and res.epoch == 1, res
        loop.wait_until(
            lambda: want() == {"k1": "before", "k2": "before", "k4": "after"},
            WAIT,
            f"the restored runtime's state, got {want()}\n{lp.injector.log()}",
        )
        stored = [o for o in env.stored(rt.id) if not o["spec"]["deleted"]]
        assert {o["spec"]["name"] for o in stored} == {"a", "c"}
        assert all(o["spec"]["epoch"] == 1 for o in stored)
        watchenv.delete(env.api, env.namespace, w.name)
    finally:
        plane.stop()


def test_a_kcp_apiserver_restart_mid_stream_loses_no_change(
    lp: Loop, kcp: controlplane.ControlPlane
) -> None:
    """The KCP apiserver stopped while a change is on its way (the webhook retries the
    listener's refusals, the injector's watch breaks) and started again: the change and one
    made after arrive."""
    loop.put(lp.core, lp.skr_ns, "restart-a", {"r": "1"})
    lp.converges({"r": "1"}, "the value before the restart")
    kcp.stop_apiserver()
    try:
        loop.put(lp.core, lp.skr_ns, "restart-a", {"r": "2"})
        time.sleep(2.0)  # the outage lasts while the change is on its way (retried)
    finally:
        kcp.start_apiserver()
    controlplane.retry_busy(lambda: client.CoreV1Api(lp.env.api).list_namespace(limit=1))
    lp.converges({"r": "2"}, "the change made during the outage")
    loop.put(lp.core, lp.skr_ns, "restart-a", {"r": "3"})
    lp.converges({"r": "3"}, "a change after the restart")
    lp.core.delete_namespaced_config_map("restart-a", lp.skr_ns)
    lp.converges(None, "the field removed")


def test_deleting_the_kyma_cr_removes_its_records_and_the_injected_values(lp: Loop) -> None:
    loop.put(lp.core, lp.skr_ns, "app-k", {"owner": "kyma"})
    lp.converges({"owner": "kyma"}, "the value before the Kyma CR goes")
    kyma = f"kyma-{lp.rt.id.lower()}"[:60]
    stored = lp.records.stored(lp.rt.id)
    assert stored and all(o["metadata"]["labels"][apitypes.KYMA_NAME_LABEL] == kyma for o in stored)
    assert lp.env.stored(lp.rt.id) == []  # all in the Watch's storage namespace
    client.CustomObjectsApi(lp.env.api).delete_namespaced_custom_object(
        apitypes.KYMAS.group, apitypes.KYMAS.version, lp.env.namespace, apitypes.KYMAS.plural, kyma
    )
    grace = {"TETHER_LISTENER_ORPHAN_GRACE_SECONDS": "1"}  # the least grace there is
    for _ in range(3):  # the first run marks the orphan, a run after the grace deletes
        loop.janitor_once(lp.env, **grace)
        if not lp.records.stored(lp.rt.id):
            break
        time.sleep(1.2)  # past the 1 s grace: the next run deletes
    assert lp.records.stored(lp.rt.id) == []
    lp.converges(None, "the injector's output removed with the records")
