"""Which storage namespaces the listener refuses (``listener.storage.namespaces``), on plain
data: the optional setting ``TETHER_LISTENER_STORAGE_NAMESPACES`` narrows where a Watch may
store, and a write the KCP's admission refuses outside the listener's namespace (an
unlabelled Namespace, manifests/kcp/listener/policy.yaml) is a counted ``RefusedNamespace``
(503) naming the label, while RBAC's refusal, or any in the listener's own namespace, stays
``Forbidden`` (its own RBAC). The KCP's side is tests/listener/test_write_policy.py."""

from __future__ import annotations

import pytest

from listener.storage import namespaces, records
from tether.kube import gateway

HOMES = {"own": "kcp-system", "shared": "tether-configuration", "planted": "team-b-records"}
KEY = records.Key("rt-1", "planted", "team-a", "cm")


def where(allowed: tuple[str, ...] | None, counted: list[str]) -> namespaces.Namespaces:
    return namespaces.Namespaces(
        "kcp-system", lambda: HOMES, allowed, on_refused=lambda: counted.append("refused")
    )


def test_without_the_setting_every_watch_has_its_home() -> None:
    counted: list[str] = []
    w = where(None, counted)
    assert [w.home(n) for n in HOMES] == list(HOMES.values())
    assert counted == []


def test_the_setting_refuses_a_watch_storing_elsewhere_before_any_write() -> None:
    counted: list[str] = []
    w = where(("tether-configuration",), counted)
    assert w.home("own") == "kcp-system" and w.home("shared") == "tether-configuration"
    with pytest.raises(namespaces.RefusedNamespace, match="team-b-records"):
        w.home("planted")
    assert counted == ["refused"]


def admission(message: str) -> gateway.Forbidden:
    body = f'{{"kind": "Status", "message": "x is forbidden: {message}"}}'
    e = gateway.errors.for_status(403, "create runtimeconfigmaps", body)
    assert isinstance(e, gateway.Forbidden)
    return e


def test_a_kcp_refusal_outside_the_own_namespace_is_a_counted_refused_namespace() -> None:
    counted: list[str] = []
    w = where(None, counted)
    e = w.refused_by_kcp(
        KEY,
        "team-b-records",
        admission(
            "ValidatingAdmissionPolicy 'tether-listener-records' with binding "
            "'tether-listener-records' denied request: not in team-b-records"
        ),
    )
    assert isinstance(e, namespaces.RefusedNamespace)
    assert isinstance(e, gateway.Unavailable) and not isinstance(e, gateway.Forbidden)
    assert namespaces.STORAGE_LABEL in str(e) and "team-b-records" in str(e)
    assert counted == ["refused"]


def test_rbac_refusals_and_refusals_in_the_own_namespace_stay_forbidden() -> None:
    """RBAC (a verb removed from the listener's ClusterRole) is the listener's own fault,
    logged as such by the edge (listener.edge.steps.unavailable), not the admins' label."""
    counted: list[str] = []
    w = where(None, counted)
    rbac = admission(
        "User system:serviceaccount:tether-system:tether-listener cannot create "
        "resource runtimeconfigmaps in the namespace team-b-records"
    )
    assert not rbac.by_admission
    assert w.refused_by_kcp(KEY, "team-b-records", rbac) is rbac
    policy = admission("ValidatingAdmissionPolicy 'p' with binding 'p' denied request: no")
    assert policy.by_admission
    assert w.refused_by_kcp(KEY, "kcp-system", policy) is policy
    assert counted == []
