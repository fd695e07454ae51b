"""Leader election under time faults, on the fault KCP (``tether.runtime.leader``).

(a) Two electors on one Lease, one with its wall clock skewed by +15 s or -15 s: never
both leading, never both fresh, at any sampled instant; a hand-over still happens. The
wall clock is *injected* (``LeaderElector(clock=...)``): libfaketime is not installed
here and does not reach a Python thread of this process alone, and a time namespace
shifts only CLOCK_MONOTONIC/BOOTTIME, never the wall clock (CLOCK_REALTIME) that
``renewTime`` is written from; the injected clock is exactly what a skewed host gives
the elector: every ``renewTime``/``acquireTime`` it writes is off by the skew, while its
monotonic clock (which the decisions use) runs at the normal rate.

(b) The real ``tether compass`` leader SIGSTOPped past its Lease, in the middle of a
registration (its idempotency lookup answered, the register not yet sent), while a second
process takes over and registers the runtime; then SIGCONT: the resumed process acts on its
stale lookup, but its Director write is refused before it is sent (not fresh), it makes no
Director write at all (its own metrics) and steps down; every Kyma CR is registered in the
Director exactly once. Without the fence it registered the runtime a second time.
"""

from __future__ import annotations

import datetime
import os
import pathlib
import re
import signal
import socket
import time
import uuid
from collections.abc import Callable, Iterator

import pytest
import requests
from kubernetes import client

from compass import model
from standins.director import server as server_mod
from standins.director import store as store_mod
from testing import compassenv, controlplane, listenerenv
from testing.faultstack import CompassProcess
from testing.pollerenv import wait_until
from tether.kube import gateway
from tether.runtime import leader


def _skewed(seconds: float) -> Callable[[], datetime.datetime]:
    return lambda: datetime.datetime.now(datetime.UTC) + datetime.timedelta(seconds=seconds)


def _elector(
    api: client.ApiClient, ns: str, name: str, ident: str, skew: float
) -> leader.LeaderElector:
    return leader.LeaderElector(
        gateway.Kube(api),
        leader.LeaseSettings(
            namespace=ns,
            name=name,
            identity=ident,
            lease_duration=5,
            renew_deadline=3,
            retry_period=0.4,
        ),
        on_started=lambda: None,
        on_stopped=lambda: None,
        clock=_skewed(skew),
    )


def _sample(els: list[leader.LeaderElector], seconds: float) -> tuple[int, int]:
    """Samples of (is_leader, fresh) of both over ``seconds``; fails at the first instant
    both lead or both are fresh. Returns (samples, samples with one fresh leader)."""
    n = fresh = 0
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        leading = [e.is_leader for e in els]
        fr = [e.fresh() for e in els]
        assert leading.count(True) <= 1, f"two leaders at sample {n}: {leading}"
        assert fr.count(True) <= 1, f"two fresh leaders at sample {n}: {fr}"
        n += 1
        fresh += fr.count(True)
        time.sleep(0.02)
    return n, fresh


@pytest.mark.parametrize("skew", [15.0, -15.0])
@pytest.mark.parametrize("skewed_leads", [True, False])
def test_skewed_wall_clock_never_gives_two_leaders(
    fkcp_api: client.ApiClient,
    skew: float,
    skewed_leads: bool,
) -> None:
    ns, name = "default", f"skew-{uuid.uuid4().hex[:6]}"
    first = _elector(fkcp_api, ns, name, "first", skew if skewed_leads else 0.0)
    second = _elector(fkcp_api, ns, name, "second", 0.0 if skewed_leads else skew)
    try:
        first.start()
        wait_until(first.fresh, 20, "the first elector to lead")
        second.start()
        # longer than the follower's Lease duration (5 s; the skew is 15 s): with renewTime
        # compared to its own clock, a follower 15 s ahead took the live Lease at once
        n, fresh = _sample([first, second], 7.0)
        assert first.is_leader and not second.is_leader
        assert fresh > n * 0.5, f"the leader was fresh in only {fresh} of {n} samples"
        first.stop()  # released: the other takes over at once, whatever its clock
        wait_until(second.fresh, 10, "the second elector to take over")
        _sample([first, second], 1.0)
        assert not first.is_leader and second.is_leader
    finally:
        first.stop()
        second.stop()


@pytest.fixture(scope="module")
def director(tmp_path_factory: pytest.TempPathFactory) -> Iterator[compassenv.Director]:
    ca, cert, key = server_mod.self_signed(tmp_path_factory.mktemp("leader-director"))
    store = store_mod.Store(client_secret="s3cr3t-of-the-leader-test")
    srv = server_mod.DirectorServer(store, cert, key).start()
    store.connector_url = f"{srv.url}/connector/graphql"
    yield compassenv.Director(srv, ca)
    srv.stop()


def _director_writes(proc: CompassProcess) -> int:
    """Director writes this compass process sent (its own /metrics)."""
    text = requests.get(proc.url + "/metrics", timeout=10).text
    total = 0
    for op in ("register_runtime", "request_token", "unregister_runtime"):
        pattern = (
            "^tether_compass_director_request_seconds_count"
            + re.escape(f'{{operation="{op}"}}')
            + r" ([0-9.e+]+)$"
        )
        m = re.search(pattern, text, re.M)
        total += int(float(m.group(1))) if m else 0
    return total


def test_paused_compass_leader_makes_no_director_write_after_resuming(
    fkcp: controlplane.ControlPlane,
    fkcp_api: client.ApiClient,
    fskr: controlplane.ControlPlane,
    fault_env: listenerenv.Env,
    director: compassenv.Director,
    tmp_path: pathlib.Path,
) -> None:
    controlplane.install_crds(fkcp_api, compassenv.CRD_FILE)
    ns, secret_ns = f"kl-{uuid.uuid4().hex[:8]}", f"kls-{uuid.uuid4().hex[:8]}"
    client.CoreV1Api(fkcp_api).create_namespace(
        client.V1Namespace(metadata=client.V1ObjectMeta(name=ns))
    )
    d, tag = director, uuid.uuid4().hex[:6]
    secret_file = tmp_path / "client_secret"
    secret_file.write_text(d.store.client_secret)
    env = {
        "TETHER_KCP_NAMESPACE": ns,
        "TETHER_COMPASS_LEASE_NAMESPACE": ns,
        "TETHER_COMPASS_DIRECTOR_URL": d.graphql_url,
        "TETHER_COMPASS_OAUTH_TOKEN_URL": d.token_url,
        "TETHER_COMPASS_OAUTH_CLIENT_ID": d.store.client_id,
        "TETHER_COMPASS_OAUTH_CLIENT_SECRET_FILE": str(secret_file),
        "TETHER_COMPASS_DIRECTOR_CA_FILE": str(d.ca_file),
        "TETHER_COMPASS_INTERVAL_SECONDS": "1",
        "TETHER_COMPASS_AGENT_SECRET_NAMESPACE": secret_ns,
        "TETHER_COMPASS_AGENT_SECRET_NAME": "compass-agent-{kyma}",
        "TETHER_COMPASS_BACKOFF_BASE_SECONDS": "0.5",
        "TETHER_COMPASS_BACKOFF_CAP_SECONDS": "1",
    }
    leases = client.CoordinationV1Api(fkcp_api)

    def holder() -> str:
        try:
            spec = leases.read_namespaced_lease("tether-compass", ns).spec
        except client.ApiException:
            return ""
        return str(spec.holder_identity or "") if spec is not None else ""

    def create(name: str) -> None:
        compassenv.create_kubeconfig_secret(fkcp_api, ns, name, fskr)
        compassenv.create_kyma(
            fkcp_api, ns, name, compassenv.kyma_labels("ga-leader", f"{name}-{tag}")
        )

    def registrations(name: str) -> int:
        return sum(
            1 for r in d.store.all_runtimes() if r.labels.get(model.KYMA_REF) == f"{ns}.{name}"
        )

    def ready(name: str) -> bool:
        m = compassenv.get_mapping(fkcp_api, ns, name) or {}
        return (m.get("status") or {}).get("state") == "Ready"

    a = CompassProcess(tmp_path, fkcp.kubeconfig, env).start()
    b: CompassProcess | None = None
    assert a.proc is not None
    a_id = f"{socket.gethostname()}_{a.proc.pid}"
    paused = False
    try:
        wait_until(lambda: holder() == a_id, 30, "the first compass to lead")
        create("k-00")
        wait_until(lambda: ready("k-00"), 60, "k-00 Ready (registered by the first compass)")
        # b writes its agent Secrets under another name: the resumed leader's lookup must
        # not find b's registration through the runtime's Secret (it would adopt it, no
        # Director write to fence), so that it goes on to register and is fenced
        b = CompassProcess(
            tmp_path,
            fkcp.kubeconfig,
            {**env, "TETHER_COMPASS_AGENT_SECRET_NAME": "compass-agent-b-{kyma}"},
        ).start()
        # The leader's idempotency lookup for k-01 is answered late; it is paused (a GC
        # pause, a frozen VM) while waiting, past its 15 s Lease: when it resumes, the
        # answer ("not registered") is stale, the second compass has registered k-01.
        # (its first register of k-01 fails, so that its retry starts with the lookup)
        d.store.set_faults(
            store_mod.Faults(http_status=503, operations=("registerRuntime",), remaining=1)
        )
        create("k-01")
        wait_until(
            lambda: d.store.faults.remaining == 0,
            30,
            "the leader's register of k-01",
            interval=0.02,
        )
        d.store.set_faults(store_mod.Faults(latency=3.0, operations=("runtimes",), remaining=1))
        wait_until(
            lambda: d.store.faults.remaining == 0, 30, "the leader's lookup of k-01", interval=0.02
        )
        writes_before = _director_writes(a)  # k-00's register and token, k-01's 503
        assert writes_before >= 3
        os.kill(a.proc.pid, signal.SIGSTOP)
        paused = True
        d.store.set_faults(store_mod.Faults())  # (its latency would apply to every request)
        stopped_at = time.monotonic()
        wait_until(lambda: holder() not in ("", a_id), 60, "the second compass to take over")
        took_over = time.monotonic() - stopped_at
        wait_until(
            lambda: ready("k-01") and registrations("k-01") == 1,
            60,
            "k-01 Ready (registered by the second compass)",
        )
        os.kill(a.proc.pid, signal.SIGCONT)
        paused = False
        wait_until(
            lambda: (
                "tether_compass_leader 0.0" in requests.get(a.url + "/metrics", timeout=10).text
            ),
            20,
            "the resumed compass to step down",
        )
        time.sleep(3)  # a few of its intervals: anything it would still do, it has done
        assert _director_writes(a) == writes_before, a.log()
        assert "register_runtime not sent: leadership not fresh" in a.log(), a.log()
        assert holder() != a_id
        assert [registrations(n) for n in ("k-00", "k-01")] == [1, 1]
        print(
            f"paused leader: taken over {took_over:.1f}s after SIGSTOP; "
            f"its stale lookup led to no Director write after SIGCONT"
        )
    finally:
        d.store.set_faults(store_mod.Faults())
        if paused:
            os.kill(a.proc.pid, signal.SIGCONT)
        rc = [a.stop(), b.stop() if b is not None else 0]
    assert rc == [0, 0], a.log() + (b.log() if b else "")
