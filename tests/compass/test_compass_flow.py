"""Compass end to end: real KCP and runtime planes, the stand-in Director over HTTPS.

Every Kyma CR points at its own runtime plane (the agent Secret has a fixed name in
``kyma-system``, so two Kyma CRs sharing a plane would overwrite each other's Secret).
"""

from __future__ import annotations

import datetime
import time
from typing import Any

import pytest
import requests
from kubernetes import client

from compass import model
from standins.director import store as store_mod
from testing import compassenv as h
from testing import controlplane, pollerenv
from tether.kube import apitypes

pytestmark = pytest.mark.processes


class SimulatedCrash(BaseException):
    """Stands for the process dying at the hook point (not caught by the reconciler)."""


def runtimes_of(store: store_mod.Store, namespace: str, kyma: str) -> list[store_mod.Runtime]:
    ref = f"{namespace}.{kyma}"
    return [r for r in store.all_runtimes() if r.labels.get(model.KYMA_REF) == ref]


def setup_kymas(
    kcp_api: client.ApiClient,
    ns: str,
    planes: list[controlplane.ControlPlane],
    tenant: str,
    prefix: str,
) -> list[str]:
    names = []
    for i, plane in enumerate(planes):
        name = f"{prefix}-{i:02d}"
        h.create_kubeconfig_secret(kcp_api, ns, name, plane)
        h.create_kyma(kcp_api, ns, name, h.kyma_labels(tenant, f"{prefix}-shoot-{i}"))
        names.append(name)
    return names


def drop_agent_secret(plane: controlplane.ControlPlane) -> None:
    """An agent Secret an earlier test left in the shared runtime plane: the lookup would
    check its RUNTIME_ID in the Director (one more request, ``runtime``)."""
    api = plane.api_client()
    try:
        client.CoreV1Api(api).delete_namespaced_secret("compass-agent-configuration", "kyma-system")
    except client.ApiException as e:
        if e.status != 404:
            raise
    finally:
        api.close()


def all_ready(kcp_api: client.ApiClient, ns: str, names: list[str]) -> bool:
    for n in names:
        m = h.get_mapping(kcp_api, ns, n)
        if m is None or (m.get("status") or {}).get("state") != "Ready":
            return False
    return True


def assert_delivered(
    director: h.Director,
    kcp_api: client.ApiClient,
    ns: str,
    name: str,
    plane: controlplane.ControlPlane,
    tenant: str,
) -> dict[str, str]:
    rts = runtimes_of(director.store, ns, name)
    assert len(rts) == 1, f"{name}: {len(rts)} runtimes in the Director"
    rt = rts[0]
    m = h.get_mapping(kcp_api, ns, name)
    assert m is not None
    labels = m["metadata"]["labels"]
    assert labels[apitypes.COMPASS_RUNTIME_ID_LABEL] == rt.id
    assert labels[apitypes.KYMA_NAME_LABEL] == name
    assert labels[apitypes.GLOBAL_ACCOUNT_LABEL] == tenant
    assert labels[apitypes.SUBACCOUNT_LABEL].startswith("sa-")
    assert model.FINALIZER in m["metadata"]["finalizers"]
    st = m["status"]
    assert (st["state"], st["registered"], st["configured"]) == ("Ready", True, True)
    sec = h.agent_secret(plane)
    assert sec is not None, f"{name}: no agent Secret in its runtime"
    assert sec["RUNTIME_ID"] == rt.id
    assert sec["TENANT"] == tenant
    assert sec["CONNECTOR_URL"] == director.store.connector_url
    assert director.store.token_state(sec["TOKEN"]) == "valid"
    assert "TOKEN" not in str(st) and sec["TOKEN"] not in str(m)
    return sec


def test_twenty_kyma_crs_each_registered_once_with_a_valid_token_in_its_runtime(
    kcp_api: client.ApiClient,
    kcp_namespace: str,
    mapping_crd: str,
    clean_director: h.Director,
    runtime_planes: list[controlplane.ControlPlane],
) -> None:
    d, ns, tenant = clean_director, kcp_namespace, "ga-twenty"
    for plane in runtime_planes:
        drop_agent_secret(plane)
    names = setup_kymas(kcp_api, ns, runtime_planes, tenant, "k20")
    svc, audit = h.make_service(kcp_api, h.make_settings(d, ns, concurrency=8))
    before = len(d.store.requests)
    try:
        h.run_until(svc, lambda: all_ready(kcp_api, ns, names), runs=5)
        for name, plane in zip(names, runtime_planes, strict=True):
            sec = assert_delivered(d, kcp_api, ns, name, plane, tenant)
            # the token is one the stand-in's Connector accepts (the agent's first call)
            r = requests.post(
                sec["CONNECTOR_URL"],
                headers={"Connector-Token": sec["TOKEN"]},
                verify=str(d.ca_file),
                timeout=5,
            )
            assert r.status_code == 200
        ops = [r.operation for r in d.store.requests[before:]]
        assert ops.count("registerRuntime") == 20
        assert ops.count("requestOneTimeTokenForRuntime") == 20
        # the lookup for an existing registration: one list of the tenant's labelled
        # runtimes per run that looked (compass.regindex), not one query per runtime
        lists = ops.count("runtimes")
        assert 1 <= lists <= 5, lists
        assert (len(ops) - lists) / 20 == 2.0, ops  # two Director requests per runtime, no retries
        # runtime labels come from the Kyma CR's labels
        rt = runtimes_of(d.store, ns, names[0])[0]
        assert rt.name == "k20-shoot-0"
        assert rt.labels["director_connection_managed_by"] == "tether"
        assert rt.labels["global_account_id"] == tenant
        assert rt.labels["broker_instance_id"] == "inst-k20-shoot-0"
        assert rt.labels["broker_plan_name"] == "azure"
        assert rt.labels["gardenerClusterName"] == "k20-shoot-0"
        events = [e["event"] for e in audit.events]
        assert events.count("compass.runtime_registered") == 20
        assert events.count("compass.token_issued") == 20
        # the agents connected: the full resync records it and asks nothing else
        mark = len(d.store.requests)
        svc.job.run(full=True)
        assert {r.operation for r in d.store.requests[mark:]} == {"runtime"}
        for name in names:
            assert (h.get_mapping(kcp_api, ns, name) or {})["status"]["runtimeConnected"] is True
        mark = len(d.store.requests)
        svc.job.run()
        assert len(d.store.requests) == mark  # steady state: no Director request at all
    finally:
        svc.close()


def test_director_outage_then_recovery_converges_without_duplicates(
    kcp_api: client.ApiClient,
    kcp_namespace: str,
    mapping_crd: str,
    clean_director: h.Director,
    runtime_planes: list[controlplane.ControlPlane],
) -> None:
    d, ns, tenant = clean_director, kcp_namespace, "ga-outage"
    planes = runtime_planes[:6]
    names = setup_kymas(kcp_api, ns, planes[:3], tenant, "out")
    svc, _ = h.make_service(kcp_api, h.make_settings(d, ns))
    try:
        h.run_until(svc, lambda: all_ready(kcp_api, ns, names), runs=5)
        # outage: every Director call fails with 503; three more Kyma CRs arrive meanwhile
        d.store.set_faults(store_mod.Faults(http_status=503))
        names += [f"out-{i:02d}" for i in range(3, 6)]
        for i in range(3, 6):
            h.create_kubeconfig_secret(kcp_api, ns, names[i], planes[i])
            h.create_kyma(kcp_api, ns, names[i], h.kyma_labels(tenant, f"out-shoot-{i}"))
        h.delete_kyma(kcp_api, ns, names[0])  # a deletion during the outage, too
        start, t0 = time.monotonic(), time.monotonic()
        runs = 0
        while time.monotonic() - t0 < 4.0:  # eight intervals of 0.5 s
            svc.job.run()
            runs += 1
            time.sleep(0.5)
        outage = time.monotonic() - t0
        seen = d.store.request_count(since=start)
        # breaker: threshold (3) + in-flight at opening (<= concurrency 4) + one probe per
        # open period (0.5 s doubling to 1 s) -> far below runs x runtimes
        assert seen <= 3 + 4 + int(outage / 0.5) + 1, seen
        for n in names[3:]:
            st = (h.get_mapping(kcp_api, ns, n) or {}).get("status") or {}
            assert st.get("state") == "Processing", st
            reasons = {c["reason"] for c in st.get("conditions", [])}
            assert reasons & {"DirectorUnavailable", "DirectorCircuitOpen"}, reasons
        assert h.get_mapping(kcp_api, ns, names[0]) is not None  # not unregistered yet
        # then the Director is gone altogether (connections refused) for a few intervals
        d.store.set_faults(store_mod.Faults())
        d.server.stop()
        try:
            for _ in range(4):
                svc.job.run()
                time.sleep(0.5)
        finally:
            d.server.start()
        st = (h.get_mapping(kcp_api, ns, names[3]) or {})["status"]
        assert st["state"] == "Processing" and not st["registered"]
        # recovery
        live = names[1:]
        h.run_until(
            svc,
            lambda: all_ready(kcp_api, ns, live) and h.get_mapping(kcp_api, ns, names[0]) is None,
            runs=20,
            pause=0.5,
        )
        assert runtimes_of(d.store, ns, names[0]) == []
        for name, plane in zip(live, planes[1:], strict=True):
            assert_delivered(d, kcp_api, ns, name, plane, tenant)
    finally:
        d.store.set_faults(store_mod.Faults())
        svc.close()


def test_timeouts_and_graphql_errors_are_retried_and_reported(
    kcp_api: client.ApiClient,
    kcp_namespace: str,
    mapping_crd: str,
    clean_director: h.Director,
    runtime_planes: list[controlplane.ControlPlane],
) -> None:
    d, ns, tenant = clean_director, kcp_namespace, "ga-errors"
    planes = runtime_planes[6:8]
    names = setup_kymas(kcp_api, ns, planes[:1], tenant, "err")
    svc, _ = h.make_service(
        kcp_api, h.make_settings(d, ns, director_timeout=0.5, breaker_threshold=50)
    )
    try:
        # the register call times out on our side, but the Director did register it
        d.store.set_faults(store_mod.Faults(hang=1.0, remaining=1, operations=("registerRuntime",)))
        svc.job.run()
        st = (h.get_mapping(kcp_api, ns, names[0]) or {})["status"]
        assert st["state"] == "Processing" and st["failures"] == 1
        reg = next(c for c in st["conditions"] if c["type"] == "Registered")
        assert reg["reason"] == "DirectorUnavailable" and "timed out" in reg["message"]
        deadline = time.monotonic() + 5  # the stand-in finishes the request after its sleep
        while not runtimes_of(d.store, ns, names[0]) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert len(runtimes_of(d.store, ns, names[0])) == 1
        # the next run finds it (label filter) instead of registering a second one
        h.run_until(svc, lambda: all_ready(kcp_api, ns, names), runs=10, pause=0.5)
        assert_delivered(d, kcp_api, ns, names[0], planes[0], tenant)
        # GraphQL errors: invalid input -> Failed with the Director's message; internal ->
        # Processing
        h.create_kubeconfig_secret(kcp_api, ns, "err-01", planes[1])
        h.create_kyma(kcp_api, ns, "err-01", h.kyma_labels(tenant, "err-shoot-1"))
        names.append("err-01")
        d.store.set_faults(
            store_mod.Faults(graphql_error="InvalidData", operations=("registerRuntime",))
        )
        svc.job.run()
        st = (h.get_mapping(kcp_api, ns, "err-01") or {})["status"]
        reg = next(c for c in st["conditions"] if c["type"] == "Registered")
        assert st["state"] == "Failed"
        assert reg["reason"] == "DirectorInvalidInput" and "InvalidData" in reg["message"]
        d.store.set_faults(
            store_mod.Faults(graphql_error="InternalError", operations=("registerRuntime",))
        )

        def due() -> bool:  # past its backoff: the next run tries it again
            st = (h.get_mapping(kcp_api, ns, "err-01") or {})["status"]
            nxt = model.parse_time(st.get("nextAttemptAt"))
            return nxt is None or datetime.datetime.now(datetime.UTC) >= nxt

        pollerenv.wait_until(due, 10, "err-01's nextAttemptAt", interval=0.05)
        svc.job.run()
        st = (h.get_mapping(kcp_api, ns, "err-01") or {})["status"]
        assert st["state"] == "Processing" and st["failures"] == 2
        d.store.set_faults(store_mod.Faults())
        h.run_until(svc, lambda: all_ready(kcp_api, ns, names), runs=10, pause=0.5)
        for name, plane in zip(names, planes, strict=True):
            assert_delivered(d, kcp_api, ns, name, plane, tenant)
    finally:
        d.store.set_faults(store_mod.Faults())
        svc.close()


def test_crash_between_register_and_mapping_write_makes_no_duplicate(
    kcp_api: client.ApiClient,
    kcp_namespace: str,
    mapping_crd: str,
    clean_director: h.Director,
    runtime_planes: list[controlplane.ControlPlane],
) -> None:
    d, ns, tenant = clean_director, kcp_namespace, "ga-crash"
    planes = runtime_planes[8:11]
    names = setup_kymas(kcp_api, ns, planes, tenant, "crash")
    svc, _ = h.make_service(kcp_api, h.make_settings(d, ns, concurrency=1))

    def crash(kind: str) -> None:
        if kind == "register":
            raise SimulatedCrash()

    svc.reconciler.after_director_call = crash
    with pytest.raises(SimulatedCrash):
        svc.job.run()
    svc.close()
    # every Kyma CR's runtime was registered, but no mapping heard of it (the worker
    # threads go on after one raised, so each of them "crashed" at the same point)
    for n in names:
        assert len(runtimes_of(d.store, ns, n)) == 1
        m = h.get_mapping(kcp_api, ns, n)
        assert m is not None and apitypes.COMPASS_RUNTIME_ID_LABEL not in m["metadata"]["labels"]
    # a new process (fresh memory) picks up
    svc2, audit = h.make_service(kcp_api, h.make_settings(d, ns))
    try:
        h.run_until(svc2, lambda: all_ready(kcp_api, ns, names), runs=5)
        for name, plane in zip(names, planes, strict=True):
            assert_delivered(d, kcp_api, ns, name, plane, tenant)
        adopted = [e for e in audit.events if e["event"] == "compass.runtime_adopted"]
        assert sorted(e["kyma"] for e in adopted) == [f"{ns}/{n}" for n in names]
    finally:
        svc2.close()


def test_kyma_deleted_unregisters_and_removes_mapping_also_when_director_lost_it(
    kcp_api: client.ApiClient,
    kcp_namespace: str,
    mapping_crd: str,
    clean_director: h.Director,
    runtime_planes: list[controlplane.ControlPlane],
) -> None:
    d, ns, tenant = clean_director, kcp_namespace, "ga-delete"
    names = setup_kymas(kcp_api, ns, runtime_planes[11:13], tenant, "del")
    svc, audit = h.make_service(kcp_api, h.make_settings(d, ns))
    try:
        h.run_until(svc, lambda: all_ready(kcp_api, ns, names), runs=5)
        gone_in_director = runtimes_of(d.store, ns, names[1])[0]
        d.store.unregister(tenant, gone_in_director.id)  # someone removed it in Compass
        for n in names:
            h.delete_kyma(kcp_api, ns, n)
        h.run_until(svc, lambda: all(h.get_mapping(kcp_api, ns, n) is None for n in names), runs=5)
        assert runtimes_of(d.store, ns, names[0]) == []
        unreg = {
            e["kyma"]: e["directorKnewIt"]
            for e in audit.events
            if e["event"] == "compass.runtime_unregistered"
        }
        assert unreg == {f"{ns}/{names[0]}": True, f"{ns}/{names[1]}": False}
    finally:
        svc.close()


def test_secret_deleted_in_runtime_is_recreated_with_a_fresh_token(
    kcp_api: client.ApiClient,
    kcp_namespace: str,
    mapping_crd: str,
    clean_director: h.Director,
    runtime_planes: list[controlplane.ControlPlane],
) -> None:
    d, ns, tenant = clean_director, kcp_namespace, "ga-secret"
    plane = runtime_planes[13]
    names = setup_kymas(kcp_api, ns, [plane], tenant, "sec")
    svc, _ = h.make_service(kcp_api, h.make_settings(d, ns))
    try:
        h.run_until(svc, lambda: all_ready(kcp_api, ns, names), runs=5)
        first = h.agent_secret(plane)
        assert first is not None
        api = plane.api_client()
        client.CoreV1Api(api).delete_namespaced_secret("compass-agent-configuration", "kyma-system")
        svc.job.run()
        second = h.agent_secret(plane)
        assert second is not None and second["TOKEN"] != first["TOKEN"]
        assert second["RUNTIME_ID"] == first["RUNTIME_ID"]
        assert d.store.token_state(second["TOKEN"]) == "valid"
        # an altered Secret is replaced too
        body: dict[str, Any] = {"data": {"TOKEN": "dGFtcGVyZWQ="}}
        client.CoreV1Api(api).patch_namespaced_secret(
            "compass-agent-configuration", "kyma-system", body
        )
        svc.job.run()
        third = h.agent_secret(plane)
        assert third is not None and third["TOKEN"] not in ("tampered", second["TOKEN"])
        assert d.store.token_state(third["TOKEN"]) == "valid"
        api.close()
        assert_delivered(d, kcp_api, ns, names[0], plane, tenant)
    finally:
        svc.close()


def test_expired_unused_token_is_replaced_until_the_runtime_connects(
    kcp_api: client.ApiClient,
    kcp_namespace: str,
    mapping_crd: str,
    clean_director: h.Director,
    runtime_planes: list[controlplane.ControlPlane],
) -> None:
    d, ns, tenant = clean_director, kcp_namespace, "ga-expiry"
    plane = runtime_planes[14]
    names = setup_kymas(kcp_api, ns, [plane], tenant, "exp")
    d.store.one_time_token_ttl = 1
    svc, _ = h.make_service(kcp_api, h.make_settings(d, ns))
    try:
        h.run_until(svc, lambda: all_ready(kcp_api, ns, names), runs=5)
        first = h.agent_secret(plane)
        assert first is not None
        pollerenv.wait_until(
            lambda: d.store.token_state(first["TOKEN"]) == "expired",
            10,
            "the first one-time token to expire (1 s)",
            interval=0.05,
        )
        d.store.one_time_token_ttl = 600
        svc.job.run()
        second = h.agent_secret(plane)
        assert second is not None and second["TOKEN"] != first["TOKEN"]
        assert d.store.connect(second["TOKEN"]) is not None  # the agent connects
        # once connected, an expired token or a deleted Secret asks for nothing new
        mark = len(d.store.requests)
        svc.job.run(full=True)
        m = h.get_mapping(kcp_api, ns, names[0]) or {}
        assert m["status"]["runtimeConnected"] is True and m["status"]["state"] == "Ready"
        client.CoreV1Api(plane.api_client()).delete_namespaced_secret(
            "compass-agent-configuration", "kyma-system"
        )
        svc.job.run()
        assert [r.operation for r in d.store.requests[mark:]] == ["runtime"]
        assert h.agent_secret(plane) is None
    finally:
        d.store.one_time_token_ttl = 600
        svc.close()


def test_missing_label_is_reported_and_module_setting_filters(
    kcp_api: client.ApiClient,
    kcp_namespace: str,
    mapping_crd: str,
    clean_director: h.Director,
    runtime_planes: list[controlplane.ControlPlane],
) -> None:
    d, ns, tenant = clean_director, kcp_namespace, "ga-labels"
    labels = h.kyma_labels(tenant, "lab-shoot-0")
    del labels[apitypes.GLOBAL_ACCOUNT_LABEL]
    h.create_kubeconfig_secret(kcp_api, ns, "lab-00", runtime_planes[15])
    h.create_kyma(kcp_api, ns, "lab-00", labels, modules=("application-connector",))
    h.create_kubeconfig_secret(kcp_api, ns, "lab-01", runtime_planes[16])
    h.create_kyma(kcp_api, ns, "lab-01", h.kyma_labels(tenant, "lab-shoot-1"))
    h.create_kubeconfig_secret(kcp_api, ns, "lab-02", runtime_planes[17])
    h.create_kyma(
        kcp_api,
        ns,
        "lab-02",
        h.kyma_labels(tenant, "lab-shoot-2"),
        modules=("application-connector",),
    )
    svc, _ = h.make_service(kcp_api, h.make_settings(d, ns, only_app_connector=True))
    mark = len(d.store.requests)
    try:
        h.run_until(svc, lambda: all_ready(kcp_api, ns, ["lab-02"]), runs=5)
        m = h.get_mapping(kcp_api, ns, "lab-00") or {}
        assert m["status"]["state"] == "Failed"
        reg = next(c for c in m["status"]["conditions"] if c["type"] == "Registered")
        assert reg["reason"] == "MissingLabel" and apitypes.GLOBAL_ACCOUNT_LABEL in reg["message"]
        assert h.get_mapping(kcp_api, ns, "lab-01") is None  # module not enabled: not managed
        assert {r.tenant for r in d.store.requests[mark:]} == {tenant}
        assert runtimes_of(d.store, ns, "lab-01") == [] and runtimes_of(d.store, ns, "lab-00") == []
        # the label is fixed: registered at the next run
        client.CustomObjectsApi(kcp_api).patch_namespaced_custom_object(
            apitypes.KYMAS.group,
            apitypes.KYMAS.version,
            ns,
            apitypes.KYMAS.plural,
            "lab-00",
            {"metadata": {"labels": {apitypes.GLOBAL_ACCOUNT_LABEL: tenant}}},
        )
        h.run_until(svc, lambda: all_ready(kcp_api, ns, ["lab-00"]), runs=5)
        assert_delivered(d, kcp_api, ns, "lab-00", runtime_planes[15], tenant)
    finally:
        svc.close()


def test_two_shards_share_the_kyma_crs_without_overlap(
    kcp_api: client.ApiClient,
    kcp_namespace: str,
    mapping_crd: str,
    clean_director: h.Director,
    runtime_planes: list[controlplane.ControlPlane],
) -> None:
    from compass import job

    d, ns, tenant = clean_director, kcp_namespace, "ga-shards"
    # one Kyma CR per shard (names chosen by the shard function itself)
    candidates = [f"shard-{i:02d}" for i in range(50)]
    names = [next(n for n in candidates if job.in_shard(n, s, 2)) for s in (0, 1)]
    for name, plane in zip(names, runtime_planes[18:20], strict=True):
        h.create_kubeconfig_secret(kcp_api, ns, name, plane)
        h.create_kyma(kcp_api, ns, name, h.kyma_labels(tenant, f"{name}-shoot"))
    svcs = [
        h.make_service(kcp_api, h.make_settings(d, ns, shard_index=i, shard_count=2))
        for i in (0, 1)
    ]
    try:
        for _ in range(5):
            for svc, _a in svcs:
                svc.job.run()
            if all_ready(kcp_api, ns, names):
                break
        for name, plane in zip(names, runtime_planes[18:20], strict=True):
            assert_delivered(d, kcp_api, ns, name, plane, tenant)
        for (_svc, audit), mine in zip(svcs, names, strict=True):
            kymas = {e["kyma"] for e in audit.events}
            assert kymas == {f"{ns}/{mine}"}, kymas
    finally:
        for svc, _a in svcs:
            svc.close()
