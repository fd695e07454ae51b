"""The Director client against the stand-in over HTTPS: OAuth, Tenant, typed errors,
timeouts and the circuit breaker; and the stand-in's own checks."""

from __future__ import annotations

import logging
import uuid

import pytest
import requests

from compass import errors, metrics, service
from standins.director import store as store_mod
from testing import compassenv as h


@pytest.fixture
def svc(clean_director: h.Director) -> service.Service:
    s = h.make_settings(
        clean_director, "unused", director_timeout=0.5, breaker_threshold=3, breaker_open_seconds=30
    )
    return service.build(s, None, metrics.Metrics(), logging.getLogger("tether.audit.unit"))  # type: ignore[arg-type]


def reg_input(name: str = "c-1", **labels: str) -> dict[str, object]:
    return {
        "name": name,
        "labels": {
            "director_connection_managed_by": "tether",
            "tether_kyma": f"ns.{uuid.uuid4().hex[:6]}",
            **labels,
        },
    }


def test_register_find_token_unregister_with_one_oauth_token(
    svc: service.Service, clean_director: h.Director
) -> None:
    d, tenant = svc.director, f"ga-{uuid.uuid4().hex[:6]}"
    inp = reg_input()
    rt = d.register(tenant, inp)
    assert rt.condition == "INITIAL" and rt.labels["tether_kyma"] == inp["labels"]["tether_kyma"]  # type: ignore[index]
    found = d.find_runtime(tenant, "tether", inp["labels"]["tether_kyma"])  # type: ignore[index]
    assert found is not None and found.id == rt.id
    assert d.find_runtime(tenant, "someone-else", inp["labels"]["tether_kyma"]) is None  # type: ignore[index]
    assert d.find_runtime("other-tenant", "tether", inp["labels"]["tether_kyma"]) is None  # type: ignore[index]
    assert d.get_runtime("other-tenant", rt.id) is None  # tenants are isolated
    tok = d.request_token(tenant, rt.id)
    assert clean_director.store.token_state(tok.token) == "valid"
    assert d.unregister(tenant, rt.id) is True
    assert d.unregister(tenant, rt.id) is False  # idempotent: the Director no longer knows it
    assert d.get_runtime(tenant, rt.id) is None
    assert svc.tokens.fetches == 1


def test_expired_access_token_is_renewed_once(
    svc: service.Service, clean_director: h.Director
) -> None:
    svc.director.register("ga-renew", reg_input())
    clean_director.store.expire_access_tokens()
    svc.director.register("ga-renew", reg_input())
    assert svc.tokens.fetches == 2


def test_wrong_client_secret_is_unauthorized(clean_director: h.Director) -> None:
    s = h.make_settings(clean_director, "unused", client_secret="wrong")
    bad = service.build(s, None, metrics.Metrics(), logging.getLogger("tether.audit.unit"))  # type: ignore[arg-type]
    with pytest.raises(errors.Unauthorized) as e:
        bad.director.register("ga-x", reg_input())
    assert "wrong" not in str(e.value)


def test_errors_are_typed(svc: service.Service, clean_director: h.Director) -> None:
    store = clean_director.store
    with pytest.raises(errors.InvalidInput, match="Invalid data"):
        svc.director.register("ga-e", reg_input(name="9-not-a-name"))
    store.set_faults(store_mod.Faults(graphql_error="NotFound", remaining=1))
    with pytest.raises(errors.NotFound):
        svc.director.request_token("ga-e", "r-unknown")
    store.set_faults(store_mod.Faults(graphql_error="Unauthorized", remaining=1))
    with pytest.raises(errors.Unauthorized):
        svc.director.register("ga-e", reg_input())
    store.set_faults(store_mod.Faults(hang=1.0, remaining=1))
    with pytest.raises(errors.Unavailable, match="timed out"):
        svc.director.register("ga-e", reg_input())
    assert svc.director.breaker.state == "closed"  # one failure is below the threshold


def test_circuit_breaker_stops_requests_during_an_outage(
    svc: service.Service, clean_director: h.Director
) -> None:
    store = clean_director.store
    store.set_faults(store_mod.Faults(http_status=503))
    mark = len(store.requests)
    kinds = []
    for _ in range(20):
        try:
            svc.director.register("ga-out", reg_input())
        except errors.Unavailable as e:
            kinds.append(type(e).__name__)
    assert kinds == ["Unavailable"] * 3 + ["CircuitOpen"] * 17
    assert len(store.requests) - mark == 3
    assert svc.metrics.circuit._value.get() == 2  # open


def test_standin_enforces_bearer_and_tenant_and_validates(clean_director: h.Director) -> None:
    url, ca = clean_director.graphql_url, str(clean_director.ca_file)
    q = {"query": "query($id: ID!) { runtime(id: $id) { id } }", "variables": {"id": "x"}}
    r = requests.post(url, json=q, verify=ca, timeout=5)
    assert r.status_code == 401 and r.json()["error"] == "unauthorized"
    tok = requests.post(
        clean_director.token_url,
        data={"grant_type": "client_credentials"},
        auth=(clean_director.store.client_id, clean_director.store.client_secret),
        verify=ca,
        timeout=5,
    ).json()["access_token"]
    auth = {"Authorization": f"Bearer {tok}"}
    r = requests.post(url, json=q, headers=auth, verify=ca, timeout=5)
    assert r.json()["errors"][0]["extensions"]["error"] == "TenantRequired"
    bad = {"query": "{ runtime(id: 1) { nope } }"}
    r = requests.post(url, json=bad, headers={**auth, "Tenant": "t"}, verify=ca, timeout=5)
    assert "Cannot query field 'nope'" in r.json()["errors"][0]["message"]
    r = requests.post(url, data="not json", headers={**auth, "Tenant": "t"}, verify=ca, timeout=5)
    assert r.status_code == 400 and r.json()["error"] == "invalid request"
    r = requests.put(
        f"{clean_director.server.url}/admin/faults",
        json={"graphql_error": "Nope"},
        verify=ca,
        timeout=5,
    )
    assert r.status_code == 400
