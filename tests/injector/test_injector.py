"""``tether injector`` as a subprocess on a real KCP plane: records (RuntimeConfigMaps written
as the listener stores them) -> the runtime's Sample CR (a CRD standing for a module's).

Shown: created, updated, tombstoned and deleted records reach the target (merged values, the
digest and origin annotations, the ConfigurationInjected condition, an Event); deleting the
last record removes the field; an edited target is repaired by the periodic pass; an epoch
change converges; no target and two targets are skipped/refused; the process killed
mid-stream (SIGKILL) and started again converges with no value lost; the KCP apiserver
restarted converges."""

from __future__ import annotations

import dataclasses
import os
import pathlib
import signal
import uuid
from collections.abc import Iterator
from typing import Any, cast

import pytest
from kubernetes import client

from injector import merge
from listener.storage import records
from testing import consumerenv, controlplane, listenerenv, watchenv
from testing import loopenv as loop
from testing.injectorenv import GROUP, new_namespace
from tether.kube import apitypes

pytestmark = pytest.mark.processes
WAIT = 30.0


@dataclasses.dataclass
class Env:
    kcp: controlplane.ControlPlane
    api: client.ApiClient
    ns: str  # the Watches, the Lease
    records_ns: str  # the Watch's storage namespace
    target_ns: str
    watch: str
    work: pathlib.Path
    injector: loop.InjectorProcess
    rv: int = 100  # the records' runtime resourceVersions
    stored: int = 0  # the KCP resourceVersion of the last record written

    def record(
        self, rt: str, name: str, data: dict[str, str] | None, *, epoch: int = 0, cm_ns: str = "app"
    ) -> None:
        """Store (create or replace) the record of ConfigMap ``cm_ns/name``; ``data`` None:
        a tombstone."""
        self.rv += 1
        rec = {
            "runtimeId": rt,
            "watch": self.watch,
            "resource": {"group": "", "version": "v1", "kind": "ConfigMap"},
            "namespace": cm_ns,
            "name": name,
            "uid": f"uid-{name}",
            "resourceVersion": str(self.rv),
            "observedAt": "2026-12-04T21:00:00Z",
            "deleted": data is None,
            "source": "webhook",
            "epoch": epoch,
            "labels": {},
            "annotations": {},
            "data": data or {},
        }
        body = records.body(rec, self.records_ns)
        co = client.CustomObjectsApi(self.api)
        r = apitypes.RUNTIME_CONFIGMAPS
        try:
            made = co.create_namespaced_custom_object(
                r.group, r.version, self.records_ns, r.plural, body
            )
        except client.ApiException as e:
            if e.status != 409:
                raise
            cur: Any = co.get_namespaced_custom_object(
                r.group, r.version, self.records_ns, r.plural, body["metadata"]["name"]
            )
            body["metadata"]["resourceVersion"] = cur["metadata"]["resourceVersion"]
            made = co.replace_namespaced_custom_object(
                r.group, r.version, self.records_ns, r.plural, body["metadata"]["name"], body
            )
        self.stored = int(cast(dict[str, Any], made)["metadata"]["resourceVersion"])

    def remove(self, rt: str, name: str, cm_ns: str = "app") -> None:
        """Delete the stored object (as the janitor does)."""
        r = apitypes.RUNTIME_CONFIGMAPS
        key = records.Key(rt, self.watch, cm_ns, name)
        client.CustomObjectsApi(self.api).delete_namespaced_custom_object(
            r.group, r.version, self.records_ns, r.plural, records.object_name(key)
        )

    def target(self, rt: str) -> dict[str, Any]:
        return loop.sample(self.api, self.target_ns, rt, GROUP)

    def configuration(self, rt: str) -> dict[str, str] | None:
        return loop.configuration(self.api, self.target_ns, rt, GROUP)

    def converges(
        self, rt: str, want: dict[str, str] | None, what: str, timeout: float = WAIT
    ) -> None:
        loop.wait_until(
            lambda: self.configuration(rt) == want,
            timeout,
            f"{what}: {want}, got {self.configuration(rt)}\n{self.injector.log()}",
            interval=0.1,
        )

    def runtime(self, *, samples: int = 1) -> str:
        rt = f"rt-{uuid.uuid4().hex[:8]}"
        for i in range(samples):
            body = {
                "apiVersion": f"{GROUP}/v1",
                "kind": "Sample",
                "metadata": {
                    "name": f"{loop.sample_name(rt)}{'-' + str(i) if i else ''}",
                    "namespace": self.target_ns,
                    "labels": {apitypes.RUNTIME_ID_LABEL: rt},
                },
                "spec": {"replicas": 1},
            }
            client.CustomObjectsApi(self.api).create_namespaced_custom_object(
                GROUP, "v1", self.target_ns, loop.SAMPLES, body
            )
        return rt

    def start_injector(self, name: str, **extra: str) -> loop.InjectorProcess:
        self.injector = loop.InjectorProcess(
            self.work,
            name,
            {
                "TETHER_KCP_NAMESPACE": self.ns,
                "TETHER_INJECTOR_KUBECONFIG": str(self.kcp.kubeconfig),
                "TETHER_INJECTOR_LEASE_NAMESPACE": self.ns,
                "TETHER_INJECTOR_LEASE_SECONDS": "3",
                "TETHER_INJECTOR_WATCH_LIST_SECONDS": "1",
                "TETHER_INJECTOR_RESYNC_SECONDS": "5",
                **extra,
            },
        ).start()
        return self.injector


@pytest.fixture(scope="module")
def env(
    kcp: controlplane.ControlPlane,
    kcp_api: client.ApiClient,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Env]:
    watchenv.install_crd(kcp_api)
    controlplane.install_crds(kcp_api, listenerenv.CRD_FILE, loop.sample_crd(GROUP))
    ns = new_namespace(kcp_api, "inj")
    records_ns, target_ns = new_namespace(kcp_api, "injrec"), new_namespace(kcp_api, "injmod")
    watch = f"inj-{uuid.uuid4().hex[:6]}"
    watchenv.apply(
        kcp_api,
        watchenv.watch(
            watch,
            loop.CM,
            ns,
            storage={"namespace": records_ns},
            inject={
                "resource": {"group": GROUP, "version": "v1", "resource": loop.SAMPLES},
                "namespace": target_ns,
                "field": "spec.configuration",
            },
        ),
    )
    e = Env(
        kcp,
        kcp_api,
        ns,
        records_ns,
        target_ns,
        watch,
        tmp_path_factory.mktemp("injector"),
        cast(loop.InjectorProcess, None),
    )
    e.start_injector("first")
    try:
        yield e
    finally:
        e.injector.stop()


def events_on(e: Env, name: str) -> list[str]:
    items = (
        client.CoreV1Api(e.api)
        .list_namespaced_event(e.target_ns, field_selector=f"involvedObject.name={name}")
        .items
    )
    return [str(ev.reason) for ev in items]


def test_records_reach_the_target_and_removing_them_removes_the_values(env: Env) -> None:
    rt = env.runtime()
    env.record(rt, "a", {"k1": "v1", "shared": "from-a"})
    env.record(rt, "b", {"shared": "from-b"})
    env.converges(rt, {"k1": "v1", "shared": "from-b"}, "two ConfigMaps merged, b after a")
    obj = env.target(rt)
    ann = obj["metadata"]["annotations"]
    assert ann[merge.DIGEST_ANNOTATION] == merge.digest({"k1": "v1", "shared": "from-b"})
    assert ann[merge.FROM_ANNOTATION] == f"{env.watch}:{env.stored}"  # the KCP revision
    loop.wait_until(
        lambda: merge.condition_current(
            env.target(rt),
            merge.Intent(
                {"k1": "v1", "shared": "from-b"},
                ann[merge.DIGEST_ANNOTATION],
                ann[merge.FROM_ANNOTATION],
                2,
            ),
        ),
        WAIT,
        "the condition at the target's generation",
    )
    cond = next(c for c in env.target(rt)["status"]["conditions"] if c["type"] == merge.CONDITION)
    assert cond["observedGeneration"] == env.target(rt)["metadata"]["generation"]
    assert "v1" not in cond["message"] and "from-b" not in cond["message"]
    loop.wait_until(
        lambda: "Injected" in events_on(env, obj["metadata"]["name"]), WAIT, "an Injected Event"
    )

    env.record(rt, "a", {"k1": "v2", "shared": "from-a"})
    env.converges(rt, {"k1": "v2", "shared": "from-b"}, "an update")
    env.record(rt, "b", None)  # the ConfigMap deleted: a tombstone
    env.converges(rt, {"k1": "v2", "shared": "from-a"}, "b's tombstone removes its values")
    env.remove(rt, "b")
    env.remove(rt, "a")  # the janitor removes a deleted Kyma CR's records
    env.converges(rt, None, "no record left: the field goes")
    loop.wait_until(
        lambda: (
            merge.DIGEST_ANNOTATION not in (env.target(rt)["metadata"].get("annotations") or {})
        ),
        WAIT,
        "the annotations gone",
    )
    assert env.target(rt)["spec"]["replicas"] == 1  # the module's own field is kept
    full_log = env.injector.log_path.read_text(errors="replace")
    assert "from-a" not in full_log and "from-b" not in full_log  # values never logged


def test_an_edited_target_is_repaired_by_the_periodic_pass(env: Env) -> None:
    rt = env.runtime()
    env.record(rt, "cfg", {"mode": "fast"})
    env.converges(rt, {"mode": "fast"}, "the first apply")
    client.CustomObjectsApi(env.api).patch_namespaced_custom_object(
        GROUP,
        "v1",
        env.target_ns,
        loop.SAMPLES,
        loop.sample_name(rt),
        {"spec": {"configuration": {"mode": "edited"}}},
    )
    assert env.configuration(rt) == {"mode": "edited"}
    env.converges(rt, {"mode": "fast"}, "the periodic pass (5 s) repairs the edit", timeout=20)


def test_an_epoch_change_converges(env: Env) -> None:
    rt = env.runtime()
    env.record(rt, "a", {"x": "1"})
    env.record(rt, "b", {"y": "2"})
    env.converges(rt, {"x": "1", "y": "2"}, "epoch 0")
    # the runtime restored from a snapshot: the poller's run in the new epoch sends what the
    # runtime now holds (a with its older value) and a tombstone for b (gone there)
    env.record(rt, "a", {"x": "0"}, epoch=1)
    env.record(rt, "b", None, epoch=1)
    env.converges(rt, {"x": "0"}, "the runtime's actual state after the new epoch")


def test_no_target_is_skipped_and_two_targets_are_refused(env: Env) -> None:
    before = (
        env.injector.metric("tether_injector_applies_total", result="no_target"),
        env.injector.metric("tether_injector_applies_total", result="ambiguous"),
    )
    lonely, doubled = f"rt-none-{uuid.uuid4().hex[:6]}", env.runtime(samples=2)
    env.record(lonely, "a", {"k": "v"})
    env.record(doubled, "a", {"k": "v"})
    loop.wait_until(
        lambda: (
            env.injector.metric("tether_injector_applies_total", result="no_target") > before[0]
        ),
        WAIT,
        "no_target",
    )
    loop.wait_until(
        lambda: (
            env.injector.metric("tether_injector_applies_total", result="ambiguous") > before[1]
        ),
        WAIT,
        "ambiguous",
    )
    assert env.configuration(doubled) is None


def test_killed_mid_stream_and_restarted_loses_no_value(env: Env) -> None:
    rt = env.runtime()
    want: dict[str, str] = {}
    for i in range(10):
        env.record(rt, f"cm{i:02d}", {f"k{i}": f"v{i}"})
        want[f"k{i}"] = f"v{i}"
    env.injector.kill()  # SIGKILL while it may be applying
    for i in range(10, 20):
        env.record(rt, f"cm{i:02d}", {f"k{i}": f"v{i}"})
        want[f"k{i}"] = f"v{i}"
    env.record(rt, "cm03", None)
    del want["k3"]
    env.start_injector("second")  # takes the Lease once the killed one's expires (3 s)
    env.converges(rt, want, "every value written before, during and after the kill")
    assert (
        env.target(rt)["metadata"]["annotations"][merge.FROM_ANNOTATION]
        == f"{env.watch}:{env.stored}"
    )


def test_kcp_apiserver_restart_converges(env: Env) -> None:
    rt = env.runtime()
    env.record(rt, "a", {"before": "1"})
    env.converges(rt, {"before": "1"}, "before the restart")
    env.kcp.stop_apiserver()
    env.kcp.start_apiserver()
    env.record(rt, "a", {"before": "1", "after": "2"})
    env.converges(
        rt, {"before": "1", "after": "2"}, "after the KCP apiserver restarted", timeout=60
    )
    assert env.injector.get("/healthz")[0] == 200


def test_watches_over_the_bound_are_not_followed(env: Env) -> None:
    ns = new_namespace(env.api, "injw")
    for name in ("w-a", "w-b"):
        watchenv.apply(
            env.api,
            watchenv.watch(
                name,
                loop.CM,
                ns,
                inject={
                    "resource": {"group": GROUP, "version": "v1", "resource": loop.SAMPLES},
                    "namespace": ns,
                    "field": "spec.configuration",
                },
            ),
        )
    other = loop.InjectorProcess(
        env.work,
        "bounded",
        {
            "TETHER_KCP_NAMESPACE": ns,
            "TETHER_INJECTOR_KUBECONFIG": str(env.kcp.kubeconfig),
            "TETHER_INJECTOR_LEASE_NAMESPACE": ns,
            "TETHER_INJECTOR_WATCH_LIST_SECONDS": "1",
            "TETHER_INJECTOR_MAX_WATCHES": "1",
        },
    ).start()
    try:
        loop.wait_until(
            lambda: other.metric("tether_injector_watches_skipped") == 1,
            WAIT,
            f"one Watch skipped\n{other.log()}",
        )
        assert other.metric("tether_injector_watches") == 1
        assert "over TETHER_INJECTOR_MAX_WATCHES (1) not followed: w-b" in other.log()
    finally:
        other.stop()


def test_an_expired_watch_relists_and_converges(env: Env) -> None:
    """The injector paused (SIGSTOP) while a record goes and another comes, etcd compacted and
    the apiserver restarted: its watch resumes from a revision no longer held (410), the
    library lists again (Synced relist) and the target converges."""
    env.injector.stop()  # releases the Lease
    # the pause must not cost the Lease (a new leader would list afresh: no 410)
    proc = env.start_injector("relist", TETHER_INJECTOR_LEASE_SECONDS="60")
    rt = env.runtime()
    env.record(rt, "a", {"a": "1"})
    env.record(rt, "b", {"b": "2"})
    env.converges(rt, {"a": "1", "b": "2"}, "before the pause")
    assert proc.proc is not None
    os.killpg(proc.proc.pid, signal.SIGSTOP)
    try:
        env.remove(rt, "b")
        env.record(rt, "c", {"c": "3"})
        consumerenv.compact(env.kcp)
        env.kcp.stop_apiserver()  # its watch cache starts again at the current revision
        env.kcp.start_apiserver()
    finally:
        os.killpg(proc.proc.pid, signal.SIGCONT)
    env.converges(rt, {"a": "1", "c": "3"}, "after the relist", timeout=60)
    loop.wait_until(
        lambda: "relist complete" in proc.log_path.read_text(),
        WAIT,
        f"the relist logged\n{proc.log()}",
    )


def test_a_record_over_the_keys_cap_refuses_its_runtime_alone_until_it_fits(env: Env) -> None:
    """A runtime with one record of 1,001 keys (the cap for Watches that inject: 1,000) is
    refused and named on its target (condition, metric); another runtime's values flow
    meanwhile; trimmed to the cap, the runtime is injected again."""
    bad, good = env.runtime(), env.runtime()
    before = env.injector.metric("tether_injector_applies_total", result="refused")
    # the flood first: with "ok" alone the injector may inject it before the flood arrives
    env.record(bad, "flood", {f"k{i}": "" for i in range(1_001)})
    env.record(bad, "ok", {"small": "1"})
    env.record(good, "a", {"x": "1"})
    env.converges(good, {"x": "1"}, "the other runtime's values")

    def reason() -> str:
        conds = (env.target(bad).get("status") or {}).get("conditions") or []
        return next(
            (f"{c['reason']}: {c['message']}" for c in conds if c["type"] == merge.CONDITION), ""
        )

    loop.wait_until(
        lambda: reason().startswith("OverBounds"),
        WAIT,
        f"the refusal on the target\n{env.injector.log()}",
    )
    assert "1001 keys in one record" in reason() and "k0" not in reason()
    assert env.configuration(bad) is None
    assert env.injector.metric("tether_injector_applies_total", result="refused") > before
    assert env.injector.metric("tether_injector_runtimes_refused", bound="keys_per_record") >= 1
    assert "InjectRefused" in events_on(env, env.target(bad)["metadata"]["name"])
    env.record(bad, "flood", {f"k{i}": "" for i in range(1_000)})
    want = {"small": "1", **{f"k{i}": "" for i in range(1_000)}}
    env.converges(bad, want, "the trimmed record injected")
    loop.wait_until(lambda: reason().startswith("Injected"), WAIT, "the condition True again")
