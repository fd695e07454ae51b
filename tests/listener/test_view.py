"""The listener pod's view (listener/view) on the real planes: a settled runtime's heartbeat
reads nothing from the KCP and its Lease is written at most once per interval across two
listener processes of two workers each; a deleted Kyma CR or a changed skr-domain is refused
by both within the watch's latency; a killed view is replaced while the workers answer from
direct reads; a watch from a version the server no longer holds (410) relists.

The KCP's own ``apiserver_request_total`` counts the requests (by resource and verb).
"""

from __future__ import annotations

import functools
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import requests
from kubernetes import client

from listener.fleet import heartbeat
from listener.view import store, watcher
from testing.listenerenv import (
    Env,
    ListenerProcess,
    Runtime,
    add_runtime,
    metric_value,
    own_namespace,
    remove_namespace,
)
from testing.pollerenv import wait_until
from tether.kube import apitypes, gateway

pytestmark = pytest.mark.processes
INTERVAL = 4.0  # the heartbeat interval of these listeners (seconds)
WATCHED = {"kymas", "leases", "runtimestatesummaries"}
READS = {"GET", "LIST"}


@pytest.fixture(scope="module")
def env(listener_env: Env) -> Iterator[Env]:
    e = own_namespace(listener_env, "kv")
    yield e
    remove_namespace(e)


def _listener(env: Env, name: str) -> ListenerProcess:
    metrics = env.dir / f"metrics-{name}-{uuid.uuid4().hex[:6]}"  # the workers' counts summed
    return ListenerProcess(
        env,
        name,
        TETHER_LISTENER_WORKERS="2",
        TETHER_LISTENER_THREADS="4",
        PROMETHEUS_MULTIPROC_DIR=str(metrics),
        TETHER_LISTENER_HEARTBEAT_INTERVAL_SECONDS=str(INTERVAL),
        TETHER_LISTENER_VIEW_TIMEOUT_SECONDS="2",
    )


@pytest.fixture(scope="module")
def pair(env: Env) -> Iterator[list[ListenerProcess]]:
    ps: list[ListenerProcess] = []
    try:
        ps.append(_listener(env, "view-a"))
        ps.append(_listener(env, "view-b"))
        for p in ps:
            wait_until(functools.partial(synced, p), what=f"{p.url}: the view synced", timeout=60)
        yield ps
    finally:
        for p in ps:
            p.stop()


def synced(p: ListenerProcess) -> bool:
    text = p.metrics()
    return all(
        metric_value(text, "tether_listener_view_synced", resource=k) == 1
        for k in ("kymas", "leases", "summaries")
    )


def kcp_counts(api: client.ApiClient) -> dict[tuple[str, str], int]:
    """apiserver_request_total of the resources the view watches, by (resource, verb)."""
    r = api.rest_client.pool_manager.request("GET", f"{api.configuration.host}/metrics", timeout=30)
    assert r.status == 200
    out: dict[tuple[str, str], int] = {}
    for line in r.data.decode().splitlines():
        if not line.startswith("apiserver_request_total{"):
            continue
        series, value = line.rsplit(" ", 1)
        lbl = {
            k: v.strip('"')
            for k, v in (
                p.split("=", 1) for p in series[series.index("{") + 1 : -1].split(",") if "=" in p
            )
        }
        if lbl.get("resource") in WATCHED and not lbl.get("subresource"):
            key = (lbl["resource"], lbl.get("verb", ""))
            out[key] = out.get(key, 0) + int(float(value))
    return out


def counted_during(
    api: client.ApiClient, action: Callable[[], object]
) -> dict[tuple[str, str], int]:
    before = kcp_counts(api)
    action()
    last = kcp_counts(api)
    for _ in range(20):  # the apiserver counts just after answering: until two reads agree
        time.sleep(0.3)
        now = kcp_counts(api)
        if now == last:
            break
        last = now
    return {k: v - before.get(k, 0) for k, v in last.items() if v - before.get(k, 0)}


def summary(p: ListenerProcess, rt: Runtime) -> requests.Response:
    with rt.session() as s:  # a new connection: any worker of the process
        return s.get(
            f"{p.url}/v1/runtimes/{rt.id}/state/summary",
            params={"identity": "uid-" + rt.id},
            timeout=30,
        )


def answers(p: ListenerProcess, rt: Runtime, status: int) -> bool:
    return summary(p, rt).status_code == status


@pytest.fixture
def settled(env: Env, pair: list[ListenerProcess]) -> Runtime:
    rt = add_runtime(env, f"rt-{uuid.uuid4().hex[:12]}")
    for p in pair:  # first contact: the Kyma CR seen, the summary built, the identity recorded
        wait_until(functools.partial(answers, p, rt, 200), what="first summary", timeout=30)
    time.sleep(1.0)  # the watches bring the writes of the first contact
    return rt


def test_a_settled_heartbeat_reads_nothing_and_writes_once_per_interval(
    env: Env, pair: list[ListenerProcess], settled: Runtime
) -> None:
    answers: list[int] = []
    started = time.monotonic()

    def beats() -> None:
        for i in range(40):  # ~10 s: two listeners alternating, new connections each time
            answers.append(summary(pair[i % 2], settled).status_code)
            time.sleep(0.25)

    used = counted_during(env.api, beats)
    took = time.monotonic() - started
    assert answers == [200] * 40
    reads = {k: v for k, v in used.items() if k[1] in READS}
    assert reads == {}, used  # no Kyma CR, Lease or summary read for a settled runtime
    writes = sum(
        v
        for (res, verb), v in used.items()
        if res == "leases" and verb in ("PATCH", "CREATE", "UPDATE")
    )
    assert 1 <= writes <= took / INTERVAL + 2, (writes, took, used)
    lease: Any = client.CoordinationV1Api(env.api).read_namespaced_lease(
        heartbeat.lease_name(settled.id), env.namespace
    )
    assert time.time() - lease.spec.renew_time.timestamp() < INTERVAL + 5


def _refused_within(pair: list[ListenerProcess], rt: Runtime, bound: float) -> list[float]:
    changed = time.monotonic()
    took = []
    for p in pair:
        wait_until(functools.partial(answers, p, rt, 403), what=f"{p.url} refuses", timeout=bound)
        took.append(time.monotonic() - changed)
    return took


def test_a_deleted_kyma_cr_is_refused_by_both_listeners_at_once(
    env: Env, pair: list[ListenerProcess], settled: Runtime
) -> None:
    objects = client.CustomObjectsApi(env.api)
    name = f"kyma-{settled.id.lower()}"[:60]
    objects.delete_namespaced_custom_object(
        apitypes.KYMAS.group, apitypes.KYMAS.version, env.namespace, apitypes.KYMAS.plural, name
    )
    took = _refused_within(pair, settled, 5.0)
    assert max(took) < 5.0, took


def test_a_changed_domain_is_refused_by_both_listeners_at_once(
    env: Env, pair: list[ListenerProcess], settled: Runtime
) -> None:
    objects = client.CustomObjectsApi(env.api)
    name = f"kyma-{settled.id.lower()}"[:60]
    objects.patch_namespaced_custom_object(
        apitypes.KYMAS.group,
        apitypes.KYMAS.version,
        env.namespace,
        apitypes.KYMAS.plural,
        name,
        {"metadata": {"annotations": {apitypes.SKR_DOMAIN_ANNOTATION: "elsewhere.example.com"}}},
    )
    took = _refused_within(pair, settled, 5.0)
    assert max(took) < 5.0, took


def _mute(env: Env, *args: str) -> subprocess.CompletedProcess[str]:
    """``tether mute|unmute ...`` as an operator runs it, with the KCP admin's kubeconfig."""
    return subprocess.run(
        [sys.executable, "-m", "command.cli", *args, "-n", env.namespace],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={**os.environ, "KUBECONFIG": str(env.kcp.kubeconfig)},
    )


def test_a_muted_runtime_is_answered_429_by_both_listeners_until_unmuted(
    env: Env, pair: list[ListenerProcess], settled: Runtime
) -> None:
    out = _mute(env, "mute", settled.id, "--reason", "flooding\nOPS-1")
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().endswith(": flooding OPS-1")  # one line, whatever was typed
    for p in pair:
        wait_until(functools.partial(answers, p, settled, 429), what=f"{p.url} mutes", timeout=5)
    r = summary(pair[0], settled)
    assert r.headers["Retry-After"] == "600" and r.json()["details"]["reason"] == "muted"
    assert "OPS-1" not in r.text  # the operator's reason stays in the KCP
    kyma: Any = client.CustomObjectsApi(env.api).get_namespaced_custom_object(
        apitypes.KYMAS.group,
        apitypes.KYMAS.version,
        env.namespace,
        apitypes.KYMAS.plural,
        f"kyma-{settled.id.lower()}"[:60],
    )
    assert kyma["metadata"]["annotations"][apitypes.MUTED_ANNOTATION] == "flooding OPS-1"
    again = _mute(env, "mute", settled.id, "--reason", "flooding OPS-1")
    assert again.returncode == 0 and "already muted" in again.stdout
    assert _mute(env, "unmute", settled.id).returncode == 0
    for p in pair:
        wait_until(functools.partial(answers, p, settled, 200), what=f"{p.url} unmutes", timeout=5)
    events: Any = client.CoreV1Api(env.api).list_namespaced_event(
        env.namespace, field_selector=f"involvedObject.name={kyma['metadata']['name']}"
    )
    assert {e.reason for e in events.items} >= {"TetherMuted", "TetherUnmuted"}
    unknown = _mute(env, "mute", "rt-nobody")
    assert unknown.returncode == 1 and "no Kyma CR" in unknown.stderr


def view_pid(p: ListenerProcess) -> int | None:
    """The pid of the listener's view process (a child of its gunicorn master)."""
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            with open(f"/proc/{d}/cmdline", "rb") as f:
                cmd = f.read()
        except OSError:
            continue
        if ppid == p.proc.pid and b"listener.view.process" in cmd:
            return int(d)
    return None


def test_a_killed_view_falls_back_to_direct_reads_and_comes_back(
    env: Env, pair: list[ListenerProcess], settled: Runtime
) -> None:
    p = pair[0]
    pid = view_pid(p)
    assert pid is not None, "no view process under the listener"
    os.kill(pid, signal.SIGKILL)
    fallbacks = metric_value(
        p.metrics(), "tether_listener_view_fallbacks_total", what="kyma", reason="unreachable"
    )
    assert summary(p, settled).status_code == 200  # answered from direct reads meanwhile
    assert (
        metric_value(
            p.metrics(), "tether_listener_view_fallbacks_total", what="kyma", reason="unreachable"
        )
        + metric_value(
            p.metrics(), "tether_listener_view_fallbacks_total", what="kyma", reason="unsynced"
        )
        > fallbacks
    )
    wait_until(lambda: view_pid(p) not in (None, pid), what="a new view process", timeout=30)
    wait_until(lambda: synced(p), what="the new view synced", timeout=60)
    time.sleep(1.5)  # the workers' clients retry the socket at most once a second
    used = counted_during(env.api, lambda: [summary(p, settled) for _ in range(5)])
    assert {k: v for k, v in used.items() if k[1] in READS} == {}, used


def test_a_watch_from_a_version_too_old_relists(env: Env) -> None:
    kcp = gateway.from_kubeconfig(str(env.kubeconfig))
    add_runtime(env, f"rt-{uuid.uuid4().hex[:12]}")
    kind = store.Kind("kymas", store.kyma_entry, 1000, 1 << 20)
    reasons: list[str] = []

    class Stale(watcher.Watcher):
        lists = 0

        def list(self) -> str:
            rv = super().list()
            self.lists += 1
            return "1" if self.lists == 1 else rv  # the first watch: from a compacted version

    w = Stale(
        kcp,
        watcher.Source(apitypes.KYMAS, env.namespace),
        kind,
        timeout=20,
        max_event_bytes=1 << 20,
        hooks=watcher.Hooks(restarted=lambda k, why: reasons.append(why)),
    )
    t = w.start()
    try:
        wait_until(lambda: w.lists >= 2 and kind.synced, what="relisted after the 410", timeout=30)
        assert reasons[0] == "gone", reasons
        rid = f"rt-{uuid.uuid4().hex[:12]}"
        add_runtime(env, rid)  # and the watch after the relist brings new objects
        wait_until(lambda: bool(kind.of(rid)), what="the new Kyma CR in the view", timeout=30)
    finally:
        w.stop.set()
        t.join(timeout=10)
