"""The process wiring: the scheduler runs only in the Lease holder; the HTTP surface."""

from __future__ import annotations

import time

from kubernetes import client

from common import controlplane, leader
from compass import app as app_mod
from compass import metrics, service
from tests.compass import conftest as h


def test_scheduler_runs_only_in_the_lease_holder(
    kcp_api: client.ApiClient, kcp_namespace: str, mapping_crd: str,
    clean_director: h.Director, skr: controlplane.ControlPlane,
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
                kcp_api, leader.LeaseSettings(namespace=ns, name=s.lease_name, identity=ident,
                                              lease_duration=3, renew_deadline=2, retry_period=0.3),
                on_started=sched.resume, on_stopped=sched.pause)
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
        while svcs[1].metrics.run_seconds.labels("interval")._sum.get() == 0 and time.monotonic() < deadline:
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
    c = app_mod.create_app(stats, ready=lambda: ready["v"]).test_client()
    assert c.get("/healthz").status_code == 200
    assert c.get("/readyz").status_code == 503
    ready["v"] = True
    assert c.get("/readyz").status_code == 200
    body = c.get("/metrics").get_data(as_text=True)
    assert 'tether_compass_actions_total{action="register",result="ok"} 1.0' in body
    r = c.get("/nope")
    assert r.status_code == 404 and r.get_json()["error"] == "not found"
    assert c.post("/healthz").status_code == 405
