"""A bring-your-own cluster (issue 42 item 5): a Kyma CR without
``kyma-project.io/shoot-name`` is registered under a stable name derived from the Kyma CR,
gets its token Secret, and is found again by its own Director labels (a restart that lost
its mapping adopts it, registers no second one); a Gardener shoot's registration with the
same subaccount is never taken. Real KCP and runtime planes, the stand-in Director."""

from __future__ import annotations

from kubernetes import client

from compass import decide, model
from testing import compassenv as h
from testing import controlplane
from testing.compassenv import Landscape, writes_since
from tether.kube import apitypes


def test_a_kyma_cr_without_a_shoot_name_gets_its_registration_and_token(
    kcp_api: client.ApiClient,
    kcp_namespace: str,
    mapping_crd: str,
    clean_director: h.Director,
    skr: controlplane.ControlPlane,
) -> None:
    d, ns = clean_director, kcp_namespace
    ls = Landscape(d, kcp_api, ns, skr)
    # a Gardener shoot of the same subaccount, registered by the Provisioner: not this one's
    shoot = d.store.seed_provisioned(ls.tenant, "byo-shoot", subaccount="sa-byo-shoot")
    labels = h.kyma_labels(ls.tenant, "byo-shoot")
    del labels[apitypes.SHOOT_NAME_LABEL]
    h.create_kubeconfig_secret(kcp_api, ns, "byo", skr)
    h.create_kyma(kcp_api, ns, "byo", labels)
    ref = f"{ns}.byo"

    def ready() -> bool:
        return ls.status("byo").get("state") == "Ready"

    mark = len(d.store.requests)
    svc, _ = h.make_service(kcp_api, ls.settings())
    h.run_until(svc, ready, runs=6)
    mine = [r for r in d.store.all_runtimes() if r.labels.get(model.KYMA_REF) == ref]
    assert len(mine) == 1 and mine[0].id != shoot.id
    rt = mine[0]
    assert rt.name == decide.byoc_name(ref) and rt.name.startswith("byoc.")
    assert model.SHOOT_LABEL not in rt.labels
    assert rt.labels["global_subaccount_id"] == "sa-byo-shoot"
    assert writes_since(d.store, mark).count("registerRuntime") == 1
    held = ls.secret("byo")
    assert held is not None
    sec = held[1]
    assert sec["RUNTIME_ID"] == rt.id and sec["TENANT"] == ls.tenant
    assert d.store.token_state(sec["TOKEN"]) == "valid"
    m = h.get_mapping(kcp_api, ns, "byo") or {}
    assert m["metadata"]["labels"][apitypes.COMPASS_RUNTIME_ID_LABEL] == rt.id
    theirs = next(r for r in d.store.all_runtimes() if r.id == shoot.id)
    assert model.KYMA_REF not in theirs.labels  # the shoot's registration untouched

    # a restart that lost the mapping (and the agent Secret): found again by its own labels
    objs = client.CustomObjectsApi(kcp_api)
    res = apitypes.COMPASS_MAPPINGS
    objs.patch_namespaced_custom_object(
        res.group, res.version, ns, res.plural, "byo", {"metadata": {"finalizers": None}}
    )
    objs.delete_namespaced_custom_object(res.group, res.version, ns, res.plural, "byo")
    client.CoreV1Api(skr.api_client()).delete_namespaced_secret("agent-byo", ls.secret_ns)
    mark = len(d.store.requests)
    svc2, _ = h.make_service(kcp_api, ls.settings())
    h.run_until(svc2, ready, runs=6)
    assert [r.id for r in d.store.all_runtimes() if r.labels.get(model.KYMA_REF) == ref] == [rt.id]
    assert "registerRuntime" not in writes_since(d.store, mark)
    m = h.get_mapping(kcp_api, ns, "byo") or {}
    assert m["metadata"]["labels"][apitypes.COMPASS_RUNTIME_ID_LABEL] == rt.id
    again = ls.secret("byo")
    assert again is not None and again[1]["RUNTIME_ID"] == rt.id


def test_a_byoc_runtime_whose_secret_names_another_byoc_runtime_takes_nothing(
    kcp_api: client.ApiClient,
    kcp_namespace: str,
    mapping_crd: str,
    clean_director: h.Director,
    skr: controlplane.ControlPlane,
) -> None:
    """Hostile: the attacker's agent Secret (which its tenant writes) names the victim's
    runtime ID; both are bring-your-own, so no shoot label tells them apart: the victim's
    ``tether_kyma`` does. Refused: nothing adopted, nothing registered, the victim's
    registration untouched."""
    d, ns = clean_director, kcp_namespace
    ls = Landscape(d, kcp_api, ns, skr)
    for name in ("victim", "att"):
        labels = h.kyma_labels(ls.tenant, f"{name}-x")
        del labels[apitypes.SHOOT_NAME_LABEL]
        labels[apitypes.SUBACCOUNT_LABEL] = "sa-shared"  # one subaccount, two clusters
        del labels[apitypes.INSTANCE_ID_LABEL]
        h.create_kubeconfig_secret(kcp_api, ns, name, skr)
        if name == "att":
            victim_id = ls.secret("victim")[1]["RUNTIME_ID"]  # type: ignore[index]
            h.write_agent_secret(
                skr,
                ls.secret_ns,
                "agent-att",
                {
                    "CONNECTOR_URL": d.store.connector_url,
                    "RUNTIME_ID": victim_id,
                    "TENANT": ls.tenant,
                    "TOKEN": "t" * 40,
                },
            )
        h.create_kyma(kcp_api, ns, name, labels)
        svc, _ = h.make_service(kcp_api, ls.settings())
        if name == "victim":
            h.run_until(svc, lambda: ls.status("victim").get("state") == "Ready", runs=6)
            before = [(r.id, dict(r.labels)) for r in d.store.all_runtimes() if r.id]
            mark = len(d.store.requests)
    h.run_until(svc, lambda: ls.status("att").get("state") == "Failed", runs=6)
    assert "ForeignRuntime" in h.reasons(ls.status("att"))
    assert writes_since(d.store, mark) == []  # no register, label or token for anyone
    assert [(r.id, dict(r.labels)) for r in d.store.all_runtimes() if r.id] == before
    att = h.get_mapping(kcp_api, ns, "att") or {}
    assert apitypes.COMPASS_RUNTIME_ID_LABEL not in att["metadata"]["labels"]
