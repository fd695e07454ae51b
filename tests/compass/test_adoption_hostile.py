"""Adoption against a hostile tenant, on real planes (issue 38): two bring-your-own runtimes of
one global account, the attacker's agent Secret names the victim's Director runtime ID. No
mapping, token, label or unregistration reaches the victim, before or after the attacker's
Kyma CR is deleted, and the attacker's mapping says why. Mappings left by the code before
the fix (a second mapping holding the victim's ID) are released, never unregistered. A
Director answer of the wrong shape never reaches a runtime.

Like ``test_adoption.py``, the Kyma CRs share the session's runtime plane, each with its
own agent Secret name (``agent-{kyma}``) in namespaces of the test's own; the attacker's
Secret sits where older runtimes keep theirs (``TETHER_COMPASS_AGENT_SECRET_LEGACY_NAMESPACES``,
``compass-system`` by default).
"""

from __future__ import annotations

import uuid
from typing import Any

from kubernetes import client

from compass import model
from testing import compassenv as h
from testing import controlplane
from testing.compassenv import Landscape, reasons, writes_since
from tether.kube import apitypes


def condition(st: dict[str, Any], reason: str) -> dict[str, Any]:
    return next((c for c in st.get("conditions") or [] if c.get("reason") == reason), {})


def events(kcp_api: client.ApiClient, ns: str, name: str, reason: str) -> list[Any]:
    return [
        e
        for e in client.CoreV1Api(kcp_api).list_namespaced_event(ns).items
        if e.involved_object.name == name and e.reason == reason
    ]


def holding(kcp_api: client.ApiClient, ns: str, rid: str) -> list[str]:
    return sorted(
        m["metadata"]["name"]
        for m in h.mappings_in(kcp_api, ns)
        if (m["metadata"].get("labels") or {}).get(apitypes.COMPASS_RUNTIME_ID_LABEL) == rid
    )


def conflicts(svc: Any, reason: str) -> float:
    return (
        svc.metrics.registry.get_sample_value(
            "tether_compass_runtime_conflicts_total", {"reason": reason}
        )
        or 0.0
    )


def old_mapping(kcp_api: client.ApiClient, ns: str, name: str, rid: str, tenant: str) -> None:
    """A mapping as the code before issue 38 could leave it: holding another's runtime ID."""
    res = apitypes.COMPASS_MAPPINGS
    body = {
        "apiVersion": f"{res.group}/{res.version}",
        "kind": apitypes.COMPASS_MAPPING_KIND,
        "metadata": {
            "name": name,
            "namespace": ns,
            "finalizers": [model.FINALIZER],
            "labels": {
                apitypes.KYMA_NAME_LABEL: name,
                apitypes.GLOBAL_ACCOUNT_LABEL: tenant,
                apitypes.COMPASS_RUNTIME_ID_LABEL: rid,
            },
        },
        "spec": {},
    }
    client.CustomObjectsApi(kcp_api).create_namespaced_custom_object(
        res.group, res.version, ns, res.plural, body
    )


def test_an_agent_secret_naming_another_runtimes_id_reaches_nothing_of_the_victim(
    kcp_api: client.ApiClient,
    kcp_namespace: str,
    mapping_crd: str,
    clean_director: h.Director,
    skr: controlplane.ControlPlane,
) -> None:
    d, ns = clean_director, kcp_namespace
    ls = Landscape(d, kcp_api, ns, skr)
    legacy_ns = f"legacy-{uuid.uuid4().hex[:6]}"
    settings = ls.settings(legacy_secret_namespaces=(legacy_ns,))

    # the victim: a bring-your-own runtime Tether registered, token delivered
    ls.kyma("byo-victim")
    svc, audit = h.make_service(kcp_api, settings)
    try:
        h.run_until(svc, lambda: ls.status("byo-victim").get("state") == "Ready")
        victim = (h.get_mapping(kcp_api, ns, "byo-victim") or {})["metadata"]["labels"][
            apitypes.COMPASS_RUNTIME_ID_LABEL
        ]
        victim_secret = ls.secret("byo-victim")
        assert victim_secret is not None and victim_secret[1]["RUNTIME_ID"] == victim
        victim_labels = dict(next(r.labels for r in d.store.all_runtimes() if r.id == victim))
        # another tenant's registration in this global account no Kyma CR here holds (the
        # Provisioner's, say): nothing but its labels stands between it and a hint
        other = d.store.seed_provisioned(
            ls.tenant, "byo-other-shoot", subaccount="sa-byo-other-shoot"
        )

        # the attacker: its agent Secret, where older runtimes keep it, names the victim
        h.write_agent_secret(
            skr,
            legacy_ns,
            "agent-byo-attacker",
            {
                "CONNECTOR_URL": d.store.connector_url,
                "RUNTIME_ID": victim,
                "TENANT": ls.tenant,
                "TOKEN": "not-a-real-token-0123456789",
            },
        )
        planted = h.write_agent_secret(
            skr,
            ls.secret_ns,
            "agent-byo-attacker2",
            {
                "CONNECTOR_URL": d.store.connector_url,
                "RUNTIME_ID": other.id,
                "TENANT": ls.tenant,
                "TOKEN": "not-a-real-token-0123456789",
            },
        )
        ls.kyma("byo-attacker")
        ls.kyma("byo-attacker2")
        mark, audit_mark = len(d.store.requests), len(audit.events)
        h.run_until(
            svc,
            lambda: (
                "ForeignRuntime" in reasons(ls.status("byo-attacker"))
                and "ForeignRuntime" in reasons(ls.status("byo-attacker2"))
            ),
        )
        svc.job.run()
        svc.job.run(full=True)  # later runs, full resync included: still nothing

        # 1. no mapping: the victim's ID is held once; the attacker's mapping says why
        assert holding(kcp_api, ns, victim) == ["byo-victim"]
        assert holding(kcp_api, ns, other.id) == []
        for name, rid, why in (
            ("byo-attacker", victim, "another Kyma CR's mapping holds"),
            ("byo-attacker2", other.id, "does not name this Kyma CR's shoot"),
        ):
            m = h.get_mapping(kcp_api, ns, name) or {}
            assert apitypes.COMPASS_RUNTIME_ID_LABEL not in m["metadata"]["labels"], name
            st = m["status"]
            assert st["state"] == "Failed" and st["registered"] is False, st
            msg = condition(st, "ForeignRuntime")["message"]
            assert rid in msg and why in msg and "none registered" in msg, msg
            ready = next(c for c in st["conditions"] if c["type"] == "Ready")
            assert (ready["status"], ready["reason"]) == ("False", "ForeignRuntime")
            assert events(kcp_api, ns, name, "ForeignRuntime")[0].type == "Warning"
        assert conflicts(svc, "held_elsewhere") >= 1 and conflicts(svc, "labels_mismatch") >= 1
        # 2. no token, no label, no registration: not one Director write since the attack
        assert writes_since(d.store, mark) == []
        assert ls.secret("byo-attacker") is None  # none written where the agent reads it
        assert (ls.secret("byo-attacker2") or ("", {}))[0] == planted  # left as it was
        assert h.read_secret(skr, legacy_ns, "agent-byo-attacker") is not None  # left as it was
        after = {r.id: r for r in d.store.all_runtimes() if r.tenant == ls.tenant}
        assert after[victim].labels == victim_labels and after[other.id].labels == other.labels
        assert ls.secret("byo-victim") == victim_secret
        assert d.store.token_state(victim_secret[1]["TOKEN"]) == "valid"

        # 3. the attacker's Kyma CR deleted: its mapping goes, the victim stays registered
        h.delete_kyma(kcp_api, ns, "byo-attacker")
        h.delete_kyma(kcp_api, ns, "byo-attacker2")
        h.run_until(
            svc,
            lambda: (
                h.get_mapping(kcp_api, ns, "byo-attacker") is None
                and h.get_mapping(kcp_api, ns, "byo-attacker2") is None
            ),
        )
        svc.job.run(full=True)
        assert writes_since(d.store, mark) == []
        assert {victim, other.id} <= {r.id for r in d.store.all_runtimes()}
        assert ls.status("byo-victim")["state"] == "Ready"
        assert holding(kcp_api, ns, victim) == ["byo-victim"]
        assert ls.secret("byo-victim") == victim_secret
        assert not [
            e for e in audit.events[audit_mark:] if e.get("runtimeId") in (victim, other.id)
        ]
    finally:
        svc.close()


def test_mappings_left_holding_another_runtime_are_released_never_unregistered(
    kcp_api: client.ApiClient,
    kcp_namespace: str,
    mapping_crd: str,
    clean_director: h.Director,
    skr: controlplane.ControlPlane,
) -> None:
    """What the code before the fix left (two mappings with one runtime ID, one of them the
    attacker's, Kyma CR present or already gone): the first Director read of the attacker's
    shows the runtime names another Kyma CR; it is dropped from that mapping (no token) or,
    at teardown, released with a Warning Event, never unregistered."""
    d, ns = clean_director, kcp_namespace
    ls = Landscape(d, kcp_api, ns, skr)
    ls.kyma("byo-victim")
    svc, audit = h.make_service(kcp_api, ls.settings())
    try:
        h.run_until(svc, lambda: ls.status("byo-victim").get("state") == "Ready")
        victim = (h.get_mapping(kcp_api, ns, "byo-victim") or {})["metadata"]["labels"][
            apitypes.COMPASS_RUNTIME_ID_LABEL
        ]
        victim_secret = ls.secret("byo-victim")
        planted = h.write_agent_secret(
            skr,
            ls.secret_ns,
            "agent-old-attacker",
            {
                "CONNECTOR_URL": d.store.connector_url,
                "RUNTIME_ID": victim,
                "TENANT": ls.tenant,
                "TOKEN": "not-a-real-token-0123456789",
            },
        )
        ls.kyma("old-attacker")
        old_mapping(kcp_api, ns, "old-attacker", victim, ls.tenant)
        old_mapping(kcp_api, ns, "gone-attacker", victim, ls.tenant)  # its Kyma CR is gone
        assert holding(kcp_api, ns, victim) == ["byo-victim", "gone-attacker", "old-attacker"]
        mark = len(d.store.requests)
        svc.job.run()
        assert svc.metrics.registry.get_sample_value("tether_compass_duplicate_runtime_ids") == 1
        h.run_until(
            svc,
            lambda: (
                h.get_mapping(kcp_api, ns, "gone-attacker") is None
                and "ForeignRuntime" in reasons(ls.status("old-attacker"))
            ),
        )
        svc.job.run(full=True)
        assert svc.metrics.registry.get_sample_value("tether_compass_duplicate_runtime_ids") == 0
        assert writes_since(d.store, mark) == []  # no unregister, no token, no label
        assert victim in {r.id for r in d.store.all_runtimes()}
        assert holding(kcp_api, ns, victim) == ["byo-victim"]
        assert (
            ls.status("byo-victim")["state"] == "Ready" and ls.secret("byo-victim") == victim_secret
        )
        assert (ls.secret("old-attacker") or ("", {}))[0] == planted  # no token written over it
        for name in ("old-attacker", "gone-attacker"):
            [ev] = events(kcp_api, ns, name, "Released")
            assert (
                ev.type == "Warning" and victim in ev.message and "not unregistered" in ev.message
            )
        assert conflicts(svc, "released") == 2
        released = [e for e in audit.events if e.get("event") == "compass.runtime_released"]
        assert sorted(e["kyma"] for e in released) == [f"{ns}/gone-attacker", f"{ns}/old-attacker"]
        assert not [e for e in audit.events if e.get("event") == "compass.runtime_unregistered"]

        # the victim's own teardown still unregisters its runtime
        h.delete_kyma(kcp_api, ns, "byo-victim")
        h.run_until(svc, lambda: h.get_mapping(kcp_api, ns, "byo-victim") is None)
        assert victim not in {r.id for r in d.store.all_runtimes()}
    finally:
        svc.close()


def test_a_director_answer_of_the_wrong_shape_never_reaches_the_runtime(
    kcp_api: client.ApiClient,
    kcp_namespace: str,
    mapping_crd: str,
    clean_director: h.Director,
    skr: controlplane.ControlPlane,
) -> None:
    d, ns = clean_director, kcp_namespace
    ls = Landscape(d, kcp_api, ns, skr)
    good = d.store.connector_url
    ls.kyma("byo-plain")
    svc, _ = h.make_service(kcp_api, ls.settings())
    try:
        d.store.connector_url = "http://connector.attacker.example/graphql"
        h.run_until(svc, lambda: "DirectorInvalidAnswer" in reasons(ls.status("byo-plain")))
        msg = condition(ls.status("byo-plain"), "DirectorInvalidAnswer")["message"]
        assert "connector URL" in msg and "attacker" not in msg
        assert ls.secret("byo-plain") is None
        d.store.connector_url = good
        h.run_until(svc, lambda: ls.status("byo-plain").get("state") == "Ready")
        sec = ls.secret("byo-plain")
        assert sec is not None and sec[1]["CONNECTOR_URL"] == good
    finally:
        d.store.connector_url = good
        svc.close()
