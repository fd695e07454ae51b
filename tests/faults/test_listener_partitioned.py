"""One of two listener replicas cut off from the KCP while the other works (issue 29,
item 3).

Arrangement: the stack's listener Service (``Stack.proxy``) forwards to a Service proxy
(``testing.serviceproxy``: round robin over ready endpoints) in front of two listener
processes, A and B, on the fault KCP. A reaches the KCP apiserver through a
``testing.partition.Partition`` (its kubeconfig names the partition), B directly. A
readiness follower stands in for the kubelet and the EndpointSlice controller with the
listener Deployment's own readiness probe (``/readyz``: period, timeout and failure
threshold read from manifests/kcp/listener/deployment.yaml): a replica that fails it
``failureThreshold`` times in a row leaves the proxy's endpoints, one success brings it
back. In a partial partition that is what happens in a cluster: A's kubelet still reports
to the KCP apiserver, only A's own path to it is cut.

The customer writes throughout; A's path is black-holed (connections accepted, nothing
forwarded, nothing closed: every KCP call of A hangs until its timeout). What must hold:
A's ``/readyz`` fails within a bound and A leaves the rotation; B serves everything: no
customer write fails and the KCP converges to exactly the runtime's state *while A is
still cut off*; no record ever goes back (``testing.history``). Measured: A's time to its
first failed probe and out of the rotation, B's share of the requests, the time to
converge.
"""

from __future__ import annotations

import contextlib
import json
import pathlib
import threading
import time
from collections.abc import Callable

import requests
import yaml

from testing import controlplane, listenerenv, partition, serviceproxy
from testing.faultstack import Stack, Workload
from testing.history import History

DEPLOYMENT = controlplane.REPO_ROOT / "manifests" / "kcp" / "listener" / "deployment.yaml"
PARTITION = 30.0  # seconds A is cut off (10 poll intervals)
MakeStack = Callable[..., Stack]
Report = Callable[..., None]


def readiness_probe() -> dict[str, int]:
    """The listener container's readinessProbe in the shipped Deployment."""
    docs = [d for d in yaml.safe_load_all(DEPLOYMENT.read_text()) if d]
    deployment = next(d for d in docs if d.get("kind") == "Deployment")
    container = next(
        c
        for c in deployment["spec"]["template"]["spec"]["containers"]
        if c["readinessProbe"]["httpGet"]["path"] == "/readyz"
    )
    probe: dict[str, int] = container["readinessProbe"]
    return probe


class Readiness(threading.Thread):
    """The kubelet's readiness probe of each replica and the EndpointSlice controller: the
    proxy's endpoints are the replicas that are ready."""

    def __init__(
        self,
        proxy: serviceproxy.Proxy,
        replicas: dict[str, listenerenv.ListenerProcess],
        held: set[str],
    ) -> None:
        super().__init__(name="readiness", daemon=True)
        probe = readiness_probe()
        self.period, self.timeout = float(probe["periodSeconds"]), float(probe["timeoutSeconds"])
        self.threshold = int(probe["failureThreshold"])
        self.proxy, self.replicas = proxy, replicas
        self.held = held  # replicas not yet in the Service (a scale-up: released later)
        self.failures = dict.fromkeys(replicas, 0)
        self.ready = dict.fromkeys(replicas, True)
        self.first_failure: dict[str, float] = {}  # monotonic
        self.left: dict[str, float] = {}  # monotonic: out of the endpoints
        self._halt = threading.Event()
        self._publish()
        self.start()

    def _publish(self) -> None:
        self.proxy.backends = [
            ("127.0.0.1", p.port)
            for n, p in self.replicas.items()
            if self.ready[n] and n not in self.held
        ]

    def release(self, name: str) -> None:
        self.held.discard(name)
        self._publish()

    def _ok(self, p: listenerenv.ListenerProcess) -> bool:
        try:
            return requests.get(p.ops_url + "/readyz", timeout=self.timeout).status_code == 200
        except requests.RequestException:
            return False

    def run(self) -> None:
        while not self._halt.wait(self.period):
            for name, p in self.replicas.items():
                ok = self._ok(p)
                if ok:
                    self.failures[name] = 0
                    self.ready[name] = True
                else:
                    self.first_failure.setdefault(name, time.monotonic())
                    self.failures[name] += 1
                    if self.failures[name] >= self.threshold and self.ready[name]:
                        self.ready[name] = False
                        self.left[name] = time.monotonic()
                self._publish()

    def stop(self) -> None:
        self._halt.set()
        self.join(30)


def cut_kubeconfig(
    env: listenerenv.Env, cut: partition.Partition, dest: pathlib.Path
) -> pathlib.Path:
    """The listener's kubeconfig with the apiserver reached through ``cut``."""
    cfg = json.loads(env.kubeconfig.read_text())
    for cluster in cfg["clusters"]:
        cluster["cluster"]["server"] = cut.url
    dest.write_text(json.dumps(cfg))
    return dest


def answered(p: listenerenv.ListenerProcess) -> float:
    total = 0.0
    for line in p.metrics().splitlines():
        if line.startswith("tether_listener_requests_total{") and "/v1/runtimes" in line:
            total += float(line.rsplit(" ", 1)[1])
    return total


def test_one_listener_replica_partitioned_from_the_kcp(
    stack: MakeStack,
    report: Report,
    fkcp: controlplane.ControlPlane,
    fault_env: listenerenv.Env,
    tmp_path: pathlib.Path,
) -> None:
    s = stack()
    assert s.webhook is not None and s.listener is not None
    s.listener.stop()  # its port becomes the Service proxy of the two replicas
    cut = partition.Partition(("127.0.0.1", fkcp.port))
    replicas: dict[str, listenerenv.ListenerProcess] = {}
    service: serviceproxy.Proxy | None = None
    ready: Readiness | None = None
    w: Workload | None = None
    try:
        replicas["a"] = listenerenv.ListenerProcess(
            fault_env,
            f"{s.namespace}-a",
            TETHER_LISTENER_KUBECONFIG=str(
                cut_kubeconfig(fault_env, cut, tmp_path / "kubeconfig-a")
            ),
        )
        replicas["b"] = listenerenv.ListenerProcess(fault_env, f"{s.namespace}-b")
        service = serviceproxy.Proxy("listener", "127.0.0.1", s.listener_port)
        # A alone first: the senders' kept-alive connections (kube-proxy balances
        # connections, not requests) are A's when it is cut off; then B joins
        ready = Readiness(service, replicas, held={"b"})
        hist = History(s.env.api, s.env.namespace, s.runtime.id, s.namespace).start()
        w = Workload(s.core, s.namespace, s.labels, rate=5).start()
        w.wait_writes(15)
        ready.release("b")
        w.wait_writes(5)
        before = {n: answered(p) for n, p in replicas.items()}
        assert before["a"] > 0, f"A served nothing before the fault: {before}"
        b_before = before["b"]
        retried_before = s.webhook.metric("tether_webhook_forwards_total", result="retryable")
        began = time.monotonic()
        cut.hole()
        try:
            time.sleep(PARTITION)
            last_write = w.stop()
            failed = w.failed()
            assert not failed, (
                f"{len(failed)} customer writes failed, e.g. {failed[:3]}; {w.summary()}"
            )
            w.check_runtime()
            # B alone: the KCP holds exactly the runtime's state while A is still cut off
            converged = s.wait_converged(last_write, timeout=90)
            b_during = answered(replicas["b"]) - b_before
            webhook_retried = (
                s.webhook.metric("tether_webhook_forwards_total", result="retryable")
                - retried_before
            )
            a_left = ready.left.get("a")
            a_first = ready.first_failure.get("a")
        finally:
            cut.heal()
        healed = time.monotonic()
        history = hist.stop()
        a_during = answered(replicas["a"]) - before["a"]  # its /metrics lists Leases: after
        assert a_first is not None and a_left is not None, (
            f"A never failed its readiness: {ready.failures}, {ready.ready}"
        )
        bound = ready.threshold * (ready.period + ready.timeout) + ready.period + 5
        assert a_left - began <= bound, (
            f"A left the rotation {a_left - began:.1f} s after the cut (bound {bound:.0f} s)"
        )
        assert ready.ready["b"] and not ready.left.get("b"), "B left the rotation"
        assert b_during > 0, "B answered nothing during the partition"
        deadline = time.monotonic() + 60  # A healed: back in the rotation
        while not ready.ready["a"]:
            assert time.monotonic() < deadline, "A did not become ready again after the heal"
            time.sleep(0.5)
        assert s.difference() == "", s.difference()
        report(
            fault="one of two listener replicas cut off from the KCP",
            writes=len(w.writes),
            failed=len(failed),
            retried=len(w.retried()),
            fault_seconds=round(healed - began, 1),
            after_fault_seconds=0.0,  # converged during the partition, A still cut off
            converged_seconds=round(converged, 1),
            workload=w.summary(),
            history=history,
            a_first_failed_probe_seconds=round(a_first - began, 1),
            a_out_of_rotation_seconds=round(a_left - began, 1),
            probe=(
                f"period {ready.period:.0f} s, timeout {ready.timeout:.0f} s, "
                f"threshold {ready.threshold}"
            ),
            a_requests_during=int(a_during),
            b_requests_during=int(b_during),
            webhook_retried_posts=int(webhook_retried),
            held_kcp_connections=cut.held_connections,
            longest_write_seconds=round(w.max_seconds(began, healed), 2),
        )
    finally:
        if w is not None:
            with contextlib.suppress(AssertionError):
                w.stop()
        if ready is not None:
            ready.stop()
        for p in replicas.values():
            p.stop()
        if service is not None:
            service.close()
        cut.close()
