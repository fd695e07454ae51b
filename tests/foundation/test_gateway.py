"""The gateway's calls and errors against a real API server: the calls and answers no test
of a part covers (not found, a stale resourceVersion, preconditions, RBAC, invalid objects,
metadata-only pagination, delete-collection, merge and strategic patches)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from kubernetes import client

from testing import controlplane
from tether.kube import apitypes, gateway

KYMAS = apitypes.KYMAS


@pytest.fixture
def kcp_kube(kcp_api: client.ApiClient) -> gateway.Kube:
    return gateway.Kube(kcp_api, timeout=10)


@pytest.fixture
def skr_kube(skr_api: client.ApiClient) -> gateway.Kube:
    return gateway.Kube(skr_api, timeout=10)


def _kyma(ns: str, name: str, labels: dict[str, str] | None = None) -> dict[str, object]:
    return {
        "apiVersion": f"{apitypes.KYMAS.group}/{apitypes.KYMAS.version}",
        "kind": apitypes.KYMA_KIND,
        "metadata": {"name": name, "namespace": ns, "labels": labels or {}},
        "spec": {"channel": "regular"},
    }


def test_not_found_conflict_and_stale_resource_version(
    kcp_kube: gateway.Kube, kyma_crd: str, kcp_namespace: str
) -> None:
    ns = kcp_namespace
    with pytest.raises(gateway.NotFound) as nf:
        kcp_kube.get(KYMAS, ns, "nope")
    assert nf.value.status == 404 and kcp_kube.get_or_none(KYMAS, ns, "nope") is None
    created = kcp_kube.create(KYMAS, ns, _kyma(ns, "k1"))
    assert created["metadata"]["uid"] and created["spec"] == {"channel": "regular"}
    with pytest.raises(gateway.Conflict):
        kcp_kube.create(KYMAS, ns, _kyma(ns, "k1"))
    fresh = kcp_kube.replace(KYMAS, ns, "k1", {**created, "spec": {"channel": "fast"}})
    assert fresh["metadata"]["resourceVersion"] != created["metadata"]["resourceVersion"]
    with pytest.raises(gateway.Conflict) as stale:  # the resourceVersion read before
        kcp_kube.replace(KYMAS, ns, "k1", {**created, "spec": {"channel": "slow"}})
    assert stale.value.status == 409
    assert kcp_kube.get(KYMAS, ns, "k1")["spec"] == {"channel": "fast"}
    with pytest.raises(gateway.Conflict):  # delete only if unchanged since read
        kcp_kube.delete(
            KYMAS,
            ns,
            "k1",
            preconditions={"resourceVersion": created["metadata"]["resourceVersion"]},
        )
    kcp_kube.delete(
        KYMAS,
        ns,
        "k1",
        preconditions={
            "resourceVersion": fresh["metadata"]["resourceVersion"],
            "uid": fresh["metadata"]["uid"],
        },
    )
    with pytest.raises(gateway.NotFound):
        kcp_kube.delete(KYMAS, ns, "k1")


def test_patches_status_and_invalid_objects(
    kcp_kube: gateway.Kube, kyma_crd: str, kcp_namespace: str
) -> None:
    ns = kcp_namespace
    kcp_kube.create(KYMAS, ns, _kyma(ns, "k2", {"a": "1", "b": "2"}))
    out = kcp_kube.patch(KYMAS, ns, "k2", {"metadata": {"labels": {"a": None, "c": "3"}}})
    assert out["metadata"]["labels"] == {"b": "2", "c": "3"}  # merge patch: None removes
    out = kcp_kube.patch(KYMAS, ns, "k2", {"status": {"state": "Ready"}}, subresource="status")
    assert out["status"] == {"state": "Ready"}
    with pytest.raises(gateway.Rejected) as bad:  # not a DNS name
        kcp_kube.create(KYMAS, ns, _kyma(ns, "Not_A_Name"))
    assert bad.value.status == 422 and "Not_A_Name" in str(bad.value)
    with pytest.raises(gateway.NotFound):  # an unknown namespace
        kcp_kube.create(KYMAS, "no-such-ns", _kyma("no-such-ns", "k3"))


def test_metadata_only_pagination_and_delete_collection(
    kcp_kube: gateway.Kube, kyma_crd: str, kcp_namespace: str
) -> None:
    ns = kcp_namespace
    for i in range(7):
        kcp_kube.create(KYMAS, ns, _kyma(ns, f"p{i}", {"set": "x" if i < 5 else "y"}))
    page = kcp_kube.list(KYMAS, ns, label_selector="set=x", limit=2, metadata_only=True)
    assert page["kind"] == "PartialObjectMetadataList" and len(page["items"]) == 2
    assert "spec" not in page["items"][0] and page["metadata"]["continue"]
    metas = list(
        kcp_kube.list_items(KYMAS, ns, label_selector="set=x", page_size=2, metadata_only=True)
    )
    assert sorted(m["metadata"]["name"] for m in metas) == [f"p{i}" for i in range(5)]
    full = list(kcp_kube.list_items(KYMAS, ns, page_size=3))
    assert len(full) == 7 and all(o["spec"] == {"channel": "regular"} for o in full)
    gone = kcp_kube.delete_collection(KYMAS, ns, label_selector="set=x")
    assert len(gone["items"]) == 5
    assert [o["metadata"]["name"] for o in kcp_kube.list_items(KYMAS, ns)] == ["p5", "p6"]


def test_core_types_secrets_leases_configmaps(skr_kube: gateway.Kube, namespace: str) -> None:
    ns = namespace
    sec = {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "Opaque",
        "metadata": {"name": "s1", "namespace": ns},
        "data": {"k": "dg=="},
    }
    skr_kube.create(gateway.SECRETS, ns, sec)
    skr_kube.replace(gateway.SECRETS, ns, "s1", {**sec, "data": {"k": "dzI="}})
    assert skr_kube.get(gateway.SECRETS, ns, "s1")["data"] == {"k": "dzI="}
    skr_kube.delete(gateway.SECRETS, ns, "s1")
    lease = {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": "l1", "namespace": ns, "labels": {"hb": "true"}},
        "spec": {"holderIdentity": "a", "renewTime": "2026-01-02T03:04:05.123456Z"},
    }
    skr_kube.create(gateway.LEASES, ns, lease)
    out = skr_kube.patch(
        gateway.LEASES, ns, "l1", {"spec": {"holderIdentity": "b"}}, strategic=True
    )
    assert out["spec"] == {"holderIdentity": "b", "renewTime": "2026-01-02T03:04:05.123456Z"}
    assert [
        x["metadata"]["name"]
        for x in skr_kube.list_items(gateway.LEASES, ns, label_selector="hb=true")
    ] == ["l1"]
    skr_kube.delete(gateway.LEASES, ns, "l1")
    names = [f"cm-{uuid.uuid4().hex[:6]}" for _ in range(3)]
    for n in names:
        skr_kube.create(gateway.CONFIGMAPS, ns, {"metadata": {"name": n}, "data": {"a": n}})
    page = skr_kube.list(gateway.CONFIGMAPS, ns, limit=2)
    assert len(page["items"]) == 2 and page["metadata"]["resourceVersion"]
    # across all namespaces, field-selected (a page may hold fewer than the limit)
    got = {
        o["metadata"]["name"]
        for o in skr_kube.list_items(
            gateway.CONFIGMAPS, None, field_selector=f"metadata.namespace={ns}", page_size=2
        )
    }
    assert set(names) <= got
    assert skr_kube.get(gateway.CONFIGMAPS, ns, names[0])["data"] == {"a": names[0]}


@pytest.fixture
def stranger(skr: controlplane.ControlPlane) -> Iterator[gateway.Kube]:
    kube = gateway.from_kubeconfig(str(skr.issue_client_cert(f"nobody-{uuid.uuid4().hex[:6]}")))
    yield kube
    kube.close()


def test_forbidden_when_rbac_denies_us(stranger: gateway.Kube, namespace: str) -> None:
    for call in (
        lambda: stranger.get(gateway.CONFIGMAPS, namespace, "x"),
        lambda: stranger.list(gateway.LEASES, namespace),
        lambda: stranger.create(gateway.SECRETS, namespace, {"metadata": {"name": "s"}}),
    ):
        with pytest.raises(gateway.Forbidden) as e:
            call()
        assert e.value.status == 403 and isinstance(e.value, gateway.Unavailable)


def test_gone_when_a_continue_token_is_garbage(skr_kube: gateway.Kube, namespace: str) -> None:
    # an expired token answers 410; a malformed one 400 (both never widen the listing)
    with pytest.raises((gateway.Gone, gateway.Rejected)):
        skr_kube.list(gateway.CONFIGMAPS, namespace, limit=1, continue_token="bm90LWEtdG9rZW4=")


def test_each_part_writes_under_its_own_field_manager(
    skr_api: client.ApiClient, namespace: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``gateway.identify(part)``: the API server records ``tether-<part>`` as the manager of
    every create and patch (not the client library's ``OpenAPI-Generator``)."""
    from tether.kube.gateway import kube  # the process-wide name, restored after the test

    monkeypatch.setitem(kube._AGENT, "name", kube._AGENT["name"])
    gateway.identify("tester")
    k = gateway.Kube(skr_api, timeout=10)
    k.create(gateway.CONFIGMAPS, namespace, {"metadata": {"name": "fm"}, "data": {"a": "1"}})
    k.patch(gateway.CONFIGMAPS, namespace, "fm", {"data": {"b": "2"}})
    managers = {
        (m["manager"], m["operation"])
        for m in k.get(gateway.CONFIGMAPS, namespace, "fm")["metadata"]["managedFields"]
    }
    assert managers == {("tether-tester", "Update")}
