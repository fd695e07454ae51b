"""Adoption decisions with plain data: which registration a lookup finds, when an agent
Secret someone else wrote is kept or a token re-issued, and the modes."""

from __future__ import annotations

import datetime
from typing import Any

from compass import adoption, decide, model, queries
from tests.compass.test_decide import NOW, kyma, mapping

POLICY = decide.Policy()
REF = "kcp-system.k1"


def rt(rid: str, **labels: Any) -> queries.Runtime:
    return queries.Runtime(rid, f"name-{rid}", {"gardenerClusterName": "c-4a1f", **labels},
                           "CONNECTED")


def held(rid: str = "r1", *, age: float = 10, complete: bool = True, cert: bool = False,
         tenant: str = "ga-1") -> model.AgentSecret:
    return model.AgentSecret(rid, tenant, complete, NOW - datetime.timedelta(seconds=age),
                             "dig", cert)


def test_classify_prefers_own_then_the_secrets_runtime_then_one_labelled() -> None:
    own = rt("own", director_connection_managed_by="tether", tether_kyma=REF)
    prov = rt("prov", director_connection_managed_by="provisioner")
    other = rt("other", director_connection_managed_by="tether", tether_kyma="kcp-system.k2")
    assert adoption.classify([prov, own], "tether", REF, None) == ("own", True, 1, "CONNECTED")
    assert adoption.classify([prov], "tether", REF, None) == ("prov", False, 1, "CONNECTED")
    # another Kyma CR's registration by Tether is no candidate
    assert adoption.classify([other], "tether", REF, None) == (None, False, 0, None)
    # two candidates: ambiguous, unless the agent Secret names the one it uses
    two = [prov, rt("prov2")]
    assert adoption.classify(two, "tether", REF, None) == (None, False, 2, None)
    assert adoption.classify(two, "tether", REF, two[1]).runtime_id == "prov2"


def test_lookup_runs_before_every_register_and_ambiguity_is_reported_once() -> None:
    m = mapping()
    f = decide.Facts(kyma=kyma(), mapping=m, now=NOW, created_now=True)
    assert decide.decide(f, POLICY).kind == "lookup"
    a = decide.decide(f._replace(looked_up=True, candidates=2), POLICY)
    assert (a.kind, a.reason) == ("report_invalid", "AmbiguousRegistration")
    cond = {"type": "Registered", "reason": a.reason, "message": a.message}
    reported = mapping(state="Failed", conditions=[cond])
    assert decide.decide(f._replace(mapping=reported, looked_up=True, candidates=2),
                         POLICY).kind == "done"  # not written again every run
    a = decide.decide(f._replace(looked_up=True, candidates=1, found_runtime_id="r1"), POLICY)
    assert (a.kind, a.runtime_id) == ("adopt", "r1")


def test_registration_off_never_registers() -> None:
    off = decide.Policy(mode="registration-off")
    f = decide.Facts(kyma=kyma(), mapping=mapping(), now=NOW, looked_up=True)
    a = decide.decide(f, off)
    assert (a.kind, a.reason) == ("report_pending", "RegistrationOff")
    assert decide.decide(f, POLICY).kind == "register"
    # an existing registration is still adopted
    assert decide.decide(f._replace(found_runtime_id="r1"), off).kind == "adopt"


def adopted(secret: model.AgentSecret | None, condition: str = "INITIAL",
            **kw: Any) -> decide.Action:
    m = mapping(rid="r1", registered=True)
    f = decide.Facts(kyma=kyma(), mapping=m, now=NOW, fetched=True, runtime_condition=condition,
                     secret="missing" if secret is None else "differs", found_secret=secret, **kw)
    return decide.decide(f, POLICY)


def test_adopted_runtime_keeps_a_working_secret_and_reissues_otherwise() -> None:
    assert adopted(held()).kind == "keep_secret"
    assert adopted(held(), condition="CONNECTED").kind == "mark_connected"  # Secret not read
    for secret, reason in ((None, "SecretMissing"), (held(cert=True), "TokenUsed"),
                           (held(age=301), "TokenExpired"), (held("r2"), "SecretForOtherRuntime"),
                           (held(complete=False), "SecretForOtherRuntime"),
                           (held(tenant="ga-2"), "SecretForOtherRuntime")):
        a = adopted(secret)
        assert (a.kind, a.reason) == ("issue_token", reason), secret
    # a Secret Tether wrote (digest recorded) follows the usual path, not the verdict
    m = mapping(rid="r1", registered=True, configured=True, secretDigest="dig",
                tokenExpiresAt="2026-11-30T13:00:00Z", state="Ready")
    f = decide.Facts(kyma=kyma(), mapping=m, now=NOW, secret="matches", found_secret=held(age=999))
    assert decide.decide(f, POLICY).kind == "done"


def test_secret_verdict_edges() -> None:
    assert decide.secret_verdict(held(age=299), "r1", "ga-1", NOW, 300) == ""
    assert decide.secret_verdict(held(age=300), "r1", "ga-1", NOW, 300) == "TokenExpired"
    no_time = held()._replace(written_at=None)
    assert decide.secret_verdict(no_time, "r1", "ga-1", NOW, 300) == "TokenExpired"


def test_dry_run_simulates_only_mapping_and_adoption_and_halts_elsewhere() -> None:
    k = kyma()
    f = decide.Facts(kyma=k, mapping=None, now=NOW)
    f = adoption.simulate(decide.Action("create_mapping"), f, "kcp-system", "ga-1")
    assert f.mapping is not None and f.mapping.registering and f.created_now
    f = adoption.simulate(decide.Action("adopt", runtime_id="r1"), f._replace(looked_up=True),
                          "kcp-system", "ga-1")
    assert f.mapping is not None and f.mapping.runtime_id == "r1" and not f.registered_now
    invalid = adoption.simulate(decide.Action("create_mapping", "MissingLabel"),
                                decide.Facts(kyma=k, mapping=None, now=NOW), "kcp-system", "ga-1")
    assert decide.decide(invalid, POLICY).kind == "done"
    plan = adoption.Plan()
    plan.add("k1", "adopt", "", "r1")
    plan.add("k2", "register")
    plan.add("k3", "register")
    assert adoption.counts(plan.take()) == {"adopt": 1, "register": 2} and plan.take() == []
