"""Migration from the Provisioner on real planes: a Director stand-in holding runtimes the
Provisioner (and compass-manager) registered, a runtime plane holding their agent Secrets.
Dry-run first (nothing changed anywhere, the plan reported), registration-off (adopts,
registers none), then normal: every one adopted, no duplicate, no working Secret replaced;
a missing, used or expired token is re-issued.

The Kyma CRs share the session's runtime plane: each has its own agent Secret name
(``agent-{kyma}``) in a namespace of the test's own.
"""

from __future__ import annotations

import logging
import time
from typing import Any

import pytest
from kubernetes import client

from compass import model
from standins.director import store as store_mod
from testing import compassenv as h
from testing import controlplane
from testing.compassenv import Landscape, reasons, writes_since
from tether.kube import apitypes


def director_state(store: store_mod.Store, tenant: str) -> list[tuple[Any, ...]]:
    return sorted(
        (r.id, r.name, sorted(r.labels.items()), r.condition)
        for r in store.all_runtimes()
        if r.tenant == tenant
    )


def test_provisioner_runtimes_dry_run_then_registration_off_then_adopted(
    kcp_api: client.ApiClient,
    kcp_namespace: str,
    mapping_crd: str,
    clean_director: h.Director,
    skr: controlplane.ControlPlane,
    caplog: pytest.LogCaptureFixture,
) -> None:
    d, ns = clean_director, kcp_namespace
    caplog.set_level(logging.INFO, logger="compass.job")
    ls = Landscape(d, kcp_api, ns, skr)
    connected = ls.provisioned("p-conn", used=True)  # the agent connected
    pending = ls.provisioned("p-pend", condition="INITIAL")  # token not used yet
    cm = ls.provisioned("p-cm", managed_by="compass-manager")  # compass-manager's
    missing = ls.provisioned("p-miss", condition="INITIAL", secret=False)
    d.store.seed_provisioned(ls.tenant, "p-amb-shoot")  # two registrations of
    d.store.seed_provisioned(ls.tenant, "p-amb-shoot")  # one shoot: ambiguous
    ls.kyma("p-amb")
    ls.kyma("p-new")  # nothing registered yet
    working = ("p-conn", "p-pend", "p-cm")
    before = director_state(d.store, ls.tenant)

    # 1. dry-run: the plan, and nothing changed in the Director, the KCP or the runtime
    mark = len(d.store.requests)
    svc, _ = h.make_service(kcp_api, ls.settings(mode="dry-run"))
    try:
        plan = {(e.kyma, e.action, e.reason, e.runtime_id) for e in svc.job.run().plan}
        plan |= {(e.kyma, e.action, e.reason, e.runtime_id) for e in svc.job.run().plan}
        planned = svc.metrics.registry.get_sample_value(
            "tether_compass_planned_actions", {"action": "adopt"}
        )
    finally:
        svc.close()
    assert planned == 4
    assert any(
        "dry-run interval run: nothing changed; would do" in r.getMessage() for r in caplog.records
    )
    assert {
        ("p-conn", "adopt", "", connected),
        ("p-conn", "mark_connected", "", connected),
        ("p-pend", "adopt", "", pending),
        ("p-pend", "keep_secret", "SecretKept", pending),
        ("p-cm", "adopt", "", cm),
        ("p-miss", "adopt", "", missing),
        ("p-miss", "issue_token", "SecretMissing", missing),
        ("p-new", "register", "", None),
    } <= plan, plan
    assert any(e[:3] == ("p-amb", "report_invalid", "AmbiguousRegistration") for e in plan), plan
    assert director_state(d.store, ls.tenant) == before
    assert writes_since(d.store, mark) == []
    assert h.mappings_in(kcp_api, ns) == []
    assert client.CoreV1Api(kcp_api).list_namespaced_event(ns).items == []
    for name in working:
        assert (ls.secret(name) or ("", {}))[0] == ls.versions[name]
    assert ls.secret("p-miss") is None

    # 2. registration-off: every registration adopted, none registered
    svc, _ = h.make_service(kcp_api, ls.settings(mode="registration-off"))
    try:
        h.run_until(
            svc,
            lambda: (
                "RegistrationOff" in reasons(ls.status("p-new"))
                and all(ls.status(n).get("state") == "Ready" for n in (*working, "p-miss"))
            ),
        )
    finally:
        svc.close()
    assert "registerRuntime" not in writes_since(d.store, mark)
    assert not any(
        r.labels.get("gardenerClusterName") == "p-new-shoot" for r in d.store.all_runtimes()
    )

    # 3. normal: the new one registered; the adopted ones untouched; the ambiguous one reported
    svc, _ = h.make_service(kcp_api, ls.settings())
    try:
        h.run_until(svc, lambda: ls.status("p-new").get("state") == "Ready")
        svc.job.run(full=True)
    finally:
        svc.close()
    after = {r.id: r for r in d.store.all_runtimes() if r.tenant == ls.tenant}
    assert len(after) == len(before) + 1  # p-new only: 0 duplicates
    for name, rid in ls.ids.items():
        m = h.get_mapping(kcp_api, ns, name) or {}
        assert m["metadata"]["labels"][apitypes.COMPASS_RUNTIME_ID_LABEL] == rid
        assert m["status"]["state"] == "Ready", (name, m["status"])
        labels = after[rid].labels
        old = dict(next(lab for i, _, lab, _ in before if i == rid))
        assert all(labels.get(k) == v for k, v in old.items()), (old, labels)  # none changed
        assert labels[model.KYMA_REF] == f"{ns}.{name}"
    assert after[cm].labels[model.MANAGED_BY] == "compass-manager"
    for name in working:  # 0 Secrets replaced
        assert (ls.secret(name) or ("", {}))[0] == ls.versions[name], name
    assert "SecretKept" in reasons(ls.status("p-pend"))
    assert ls.status("p-conn")["runtimeConnected"] is True
    fresh = ls.secret("p-miss")
    assert fresh is not None and fresh[1]["RUNTIME_ID"] == missing
    assert d.store.token_state(fresh[1]["TOKEN"]) == "valid"
    amb = ls.status("p-amb")
    assert amb["state"] == "Failed" and "AmbiguousRegistration" in reasons(amb)
    seen = {e.reason for e in client.CoreV1Api(kcp_api).list_namespaced_event(ns).items}
    assert {"Registered", "SecretKept", "AmbiguousRegistration", "RegistrationOff"} <= seen, seen
    assert apitypes.COMPASS_RUNTIME_ID_LABEL not in (
        (h.get_mapping(kcp_api, ns, "p-amb") or {})["metadata"].get("labels") or {}
    )


def test_used_and_expired_tokens_of_adopted_runtimes_are_reissued(
    kcp_api: client.ApiClient,
    kcp_namespace: str,
    mapping_crd: str,
    clean_director: h.Director,
    skr: controlplane.ControlPlane,
) -> None:
    d, ns = clean_director, kcp_namespace
    ls = Landscape(d, kcp_api, ns, skr)
    expired = ls.provisioned("p-exp", condition="INITIAL")
    time.sleep(2.5)  # the Secret is older than the token lifetime below
    svc, _ = h.make_service(kcp_api, ls.settings(token_lifetime=2.0))
    try:
        h.run_until(svc, lambda: ls.status("p-exp").get("state") == "Ready")
    finally:
        svc.close()
    sec = ls.secret("p-exp")
    assert sec is not None and sec[0] != ls.versions["p-exp"] and sec[1]["RUNTIME_ID"] == expired
    assert d.store.token_state(sec[1]["TOKEN"]) == "valid"
    assert "TokenExpired" in str(ls.status("p-exp"))

    # used: the agent left its certificate, but the Director does not see it connected
    ls2 = Landscape(d, kcp_api, ns, skr)
    used = ls2.provisioned("p-used", condition="INITIAL", used=True)
    h.write_agent_secret(skr, ls2.secret_ns, model.AGENT_CERT_SECRET, {"crt": "x"})
    svc, _ = h.make_service(kcp_api, ls2.settings())
    try:
        h.run_until(svc, lambda: ls2.status("p-used").get("state") == "Ready")
    finally:
        svc.close()
    sec = ls2.secret("p-used")
    assert sec is not None and sec[0] != ls2.versions["p-used"] and sec[1]["RUNTIME_ID"] == used
    assert d.store.token_state(sec[1]["TOKEN"]) == "valid"
    assert len([r for r in d.store.all_runtimes() if r.tenant in (ls.tenant, ls2.tenant)]) == 2


def test_a_runtime_id_from_another_source_settles_an_ambiguous_lookup(
    kcp_api: client.ApiClient,
    kcp_namespace: str,
    mapping_crd: str,
    clean_director: h.Director,
    skr: controlplane.ControlPlane,
) -> None:
    """``Reconciler.known_runtime_id`` (compass-manager's mappings, ``compass.legacy``):
    checked in the Director like the agent Secret's RUNTIME_ID, so two labelled runtimes are
    no longer ambiguous; an ID the Director does not know in this tenant is not taken."""
    d, ns = clean_director, kcp_namespace
    ls = Landscape(d, kcp_api, ns, skr)
    first = d.store.seed_provisioned(ls.tenant, "p-hint-shoot")
    second = d.store.seed_provisioned(ls.tenant, "p-hint-shoot")
    ls.kyma("p-hint")
    svc, _ = h.make_service(kcp_api, ls.settings())
    try:
        svc.reconciler.known_runtime_id = lambda name: "not-a-runtime"
        svc.job.run()
        assert "AmbiguousRegistration" in reasons(ls.status("p-hint"))
        svc.reconciler.known_runtime_id = lambda name: second.id if name == "p-hint" else None
        h.run_until(svc, lambda: ls.status("p-hint").get("state") == "Ready")
    finally:
        svc.close()
    m = h.get_mapping(kcp_api, ns, "p-hint") or {}
    assert m["metadata"]["labels"][apitypes.COMPASS_RUNTIME_ID_LABEL] == second.id
    assert first.id in {r.id for r in d.store.all_runtimes()}  # left alone
    assert len([r for r in d.store.all_runtimes() if r.tenant == ls.tenant]) == 2
