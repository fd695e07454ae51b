"""The process wiring: the scheduler runs only in the Lease holder; the HTTP surface."""

from __future__ import annotations

import json
import os
import pathlib
import signal
import subprocess
import sys
import time

import pytest
import requests
from kubernetes import client

from compass import app as app_mod
from compass import metrics, service
from testing import compassenv as h
from testing import controlplane, localnet
from tether.kube import gateway
from tether.runtime import leader

pytestmark = pytest.mark.processes  # starts processes of its own (testing/tiers.py)


def test_scheduler_runs_only_in_the_lease_holder(
    kcp_api: client.ApiClient,
    kcp_namespace: str,
    mapping_crd: str,
    clean_director: h.Director,
    skr: controlplane.ControlPlane,
) -> None:
    ns = kcp_namespace
    h.create_kubeconfig_secret(kcp_api, ns, "sched-00", skr)
    h.create_kyma(kcp_api, ns, "sched-00", h.kyma_labels("ga-sched", "sched-shoot-0"))
    s = h.make_settings(clean_director, ns, interval=0.3)
    svcs, scheds, electors = [], [], []
    try:
        for ident in ("replica-a", "replica-b"):
            svc, _ = h.make_service(kcp_api, s)
            sched = service.scheduler(svc)
            el = leader.LeaderElector(
                gateway.Kube(kcp_api),
                leader.LeaseSettings(
                    namespace=ns,
                    name=s.lease_name,
                    identity=ident,
                    lease_duration=3,
                    renew_deadline=2,
                    retry_period=0.3,
                ),
                on_started=sched.resume,
                on_stopped=sched.pause,
            )
            svcs.append(svc)
            scheds.append(sched)
            electors.append(el)
        electors[0].start()
        deadline = time.monotonic() + 20
        while not electors[0].is_leader and time.monotonic() < deadline:
            time.sleep(0.1)
        electors[1].start()
        while time.monotonic() < deadline:
            m = h.get_mapping(kcp_api, ns, "sched-00")
            if m and (m.get("status") or {}).get("state") == "Ready":
                break
            time.sleep(0.2)
        assert (h.get_mapping(kcp_api, ns, "sched-00") or {})["status"]["state"] == "Ready"
        assert electors[0].is_leader and not electors[1].is_leader
        ran = [svc.metrics.run_seconds.labels("interval")._sum.get() > 0 for svc in svcs]
        assert ran == [True, False]
        # the holder steps down: the other replica takes over and runs
        electors[0].stop()
        deadline = time.monotonic() + 20
        while not electors[1].is_leader and time.monotonic() < deadline:
            time.sleep(0.1)
        assert electors[1].is_leader
        deadline = time.monotonic() + 10
        while (
            svcs[1].metrics.run_seconds.labels("interval")._sum.get() == 0
            and time.monotonic() < deadline
        ):
            time.sleep(0.1)
        assert svcs[1].metrics.run_seconds.labels("interval")._sum.get() > 0
    finally:
        for el in electors:
            el.stop()
        for sched in scheds:
            sched.shutdown(wait=True)
        for svc in svcs:
            svc.close()


def test_http_surface() -> None:
    stats = metrics.Metrics()
    stats.actions.labels("register", "ok").inc()
    ready = {"v": False}
    c = app_mod.create_app(stats, ready=lambda: ready["v"], cache_seconds=0).test_client()
    assert c.get("/healthz").status_code == 200
    assert c.get("/readyz").status_code == 503
    ready["v"] = True
    assert c.get("/readyz").status_code == 200
    body = c.get("/metrics").get_data(as_text=True)
    assert 'tether_compass_actions_total{action="register",result="ok"} 1.0' in body
    r = c.get("/nope")
    assert r.status_code == 404 and r.get_json()["error"] == "not found"
    assert c.post("/healthz").status_code == 405


def test_tether_compass_process_end_to_end(
    kcp: controlplane.ControlPlane,
    kcp_api: client.ApiClient,
    kcp_namespace: str,
    mapping_crd: str,
    clean_director: h.Director,
    skr: controlplane.ControlPlane,
    tmp_path: pathlib.Path,
) -> None:
    """The real entry point as a process: settings from the environment, Lease, scheduler,
    /readyz and /metrics, audit on stdout without tokens, clean stop on SIGTERM."""
    ns, d = kcp_namespace, clean_director
    h.create_kubeconfig_secret(kcp_api, ns, "proc-00", skr)
    h.create_kyma(kcp_api, ns, "proc-00", h.kyma_labels("ga-proc", "proc-shoot-0"))
    secret_file = tmp_path / "client_secret"
    secret_file.write_text(d.store.client_secret)
    port = controlplane.free_port()
    env = {
        **os.environ,
        **localnet.ENV,
        "KUBECONFIG": str(kcp.kubeconfig),
        "TETHER_KCP_NAMESPACE": ns,
        "TETHER_COMPASS_DIRECTOR_URL": d.graphql_url,
        "TETHER_COMPASS_OAUTH_TOKEN_URL": d.token_url,
        "TETHER_COMPASS_OAUTH_CLIENT_ID": d.store.client_id,
        "TETHER_COMPASS_OAUTH_CLIENT_SECRET_FILE": str(secret_file),
        "TETHER_COMPASS_DIRECTOR_CA_FILE": str(d.ca_file),
        "TETHER_COMPASS_INTERVAL_SECONDS": "1",
        "TETHER_COMPASS_LEASE_NAMESPACE": ns,
        "TETHER_COMPASS_BIND": f"127.0.0.1:{port}",
    }
    proc = subprocess.Popen(
        [sys.executable, "-m", "command.cli", "compass"],
        env=env,
        cwd=controlplane.REPO_ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=controlplane.die_with_parent(),
    )
    try:
        deadline = time.monotonic() + 40
        while time.monotonic() < deadline:
            m = h.get_mapping(kcp_api, ns, "proc-00")
            if m and (m.get("status") or {}).get("state") == "Ready":
                break
            assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
            time.sleep(0.3)
        assert (h.get_mapping(kcp_api, ns, "proc-00") or {})["status"]["state"] == "Ready"
        assert requests.get(f"http://127.0.0.1:{port}/readyz", timeout=5).status_code == 200
        text = requests.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
        assert "tether_compass_leader 1.0" in text
        assert 'tether_compass_actions_total{action="register",result="ok"} 1.0' in text
        lease = client.CoordinationV1Api(kcp_api).read_namespaced_lease("tether-compass", ns)
        assert lease.spec.holder_identity
    finally:
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err[-2000:]
    token = (h.agent_secret(skr) or {}).get("TOKEN")
    assert token and token not in out and token not in err
    events = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    assert {"compass.runtime_registered", "compass.token_issued"} <= {
        e.get("event") for e in events
    }
    lease = client.CoordinationV1Api(kcp_api).read_namespaced_lease("tether-compass", ns)
    assert not lease.spec.holder_identity  # released on SIGTERM
