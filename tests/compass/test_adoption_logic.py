"""Adoption decisions with plain data: which registration a lookup finds, when an agent
Secret someone else wrote is kept or a token re-issued, and the modes."""

from __future__ import annotations

import datetime
from typing import Any

import pytest

from compass import adoption, claims, decide, errors, model, queries
from testing.compassfacts import NOW, kyma, mapping

POLICY = decide.Policy()
REF = "kcp-system.k1"


def rt(rid: str, **labels: Any) -> queries.Runtime:
    return queries.Runtime(
        rid, f"name-{rid}", {"gardenerClusterName": "c-4a1f", **labels}, "CONNECTED"
    )


def held(
    rid: str = "r1",
    *,
    age: float = 10,
    complete: bool = True,
    cert: bool = False,
    tenant: str = "ga-1",
) -> model.AgentSecret:
    return model.AgentSecret(
        rid, tenant, complete, NOW - datetime.timedelta(seconds=age), "dig", cert
    )


WHO = claims.Identity(REF, "ga-1", "c-4a1f", "sa-1", "inst-1")


def test_classify_prefers_own_then_the_hinted_runtime_then_one_labelled() -> None:
    own = rt("own", director_connection_managed_by="tether", tether_kyma=REF)
    prov = rt("prov", director_connection_managed_by="provisioner")
    other = rt("other", director_connection_managed_by="tether", tether_kyma="kcp-system.k2")
    assert adoption.classify([prov, own], WHO, "tether", None, {}) == (
        "own",
        True,
        1,
        "CONNECTED",
        "",
        "",
    )
    assert adoption.classify([prov], WHO, "tether", None, {}) == (
        "prov",
        False,
        1,
        "CONNECTED",
        "",
        "",
    )
    # another Kyma CR's registration by Tether is no candidate
    assert adoption.classify([other], WHO, "tether", None, {}) == (None, False, 0, None, "", "")
    # two candidates: ambiguous, unless a hint names one that is this Kyma CR's
    two = [prov, rt("prov2")]
    assert adoption.classify(two, WHO, "tether", None, {}) == (None, False, 2, None, "", "")
    assert adoption.classify(two, WHO, "tether", two[1], {}).runtime_id == "prov2"


def test_a_hint_naming_another_kyma_crs_runtime_is_refused_never_adopted() -> None:
    """The attacker's agent Secret names the victim's runtime ID (issue 38)."""
    victim = rt(
        "victim",
        gardenerClusterName="c-victim",
        director_connection_managed_by="tether",
        tether_kyma="kcp-system.victim",
        global_subaccount_id="sa-v",
    )
    got = adoption.classify([], WHO, "tether", victim, {})
    assert (got.runtime_id, got.refused) == (None, claims.LABELS_MISMATCH)
    assert "victim" in got.why and "another Kyma CR" in got.why and "none registered" in got.why
    # held by another mapping: refused even when its labels would do
    lookalike = rt("victim")
    got = adoption.classify([lookalike], WHO, "tether", lookalike, {"victim": "victim-kyma"})
    assert (got.runtime_id, got.refused, got.candidates) == (None, claims.HELD_ELSEWHERE, 0)
    assert "victim-kyma" not in got.why  # the other Kyma CR is not named to this one
    # a held labelled runtime is no candidate either, and the own one held elsewhere is refused
    assert adoption.classify([lookalike], WHO, "tether", None, {"victim": "v"}).runtime_id is None
    own = rt("own", director_connection_managed_by="tether", tether_kyma=REF)
    assert (
        adoption.classify([own], WHO, "tether", None, {"own": "v"}).refused == claims.HELD_ELSEWHERE
    )


@pytest.mark.parametrize(
    ("labels", "bad"),
    [
        ({}, ""),
        (
            {
                "global_subaccount_id": ["sa-1"],
                "broker_instance_id": "inst-1",
                "global_account_id": "ga-1",
            },
            "",
        ),
        ({"subaccount_id": "sa-1", "tether_kyma": REF}, ""),
        ({"gardenerClusterName": "c-other"}, "gardenerClusterName"),
        ({"gardenerClusterName": None}, "gardenerClusterName"),
        ({"global_subaccount_id": "sa-2"}, "global_subaccount_id"),
        ({"global_subaccount_id": ["sa-2", "sa-3"]}, "global_subaccount_id"),
        ({"subaccount_id": "sa-2"}, "subaccount_id"),
        ({"broker_instance_id": "inst-2"}, "broker_instance_id"),
        ({"global_account_id": "ga-2"}, "global_account_id"),
        ({"tether_kyma": "kcp-system.k2"}, "tether_kyma"),
    ],
)
def test_labels_must_name_this_kyma_cr(labels: dict[str, Any], bad: str) -> None:
    got = claims.mismatch({"gardenerClusterName": "c-4a1f", **labels}, WHO)
    assert (bad in got and bad != "") if bad else got == ""
    # a Kyma CR without an instance ID matches no runtime that has one
    no_instance = WHO._replace(instance="")
    assert claims.mismatch(
        {"gardenerClusterName": "c-4a1f", "broker_instance_id": "inst-1"}, no_instance
    )
    assert claims.names({"tether_kyma": REF}, REF) and not claims.names({}, REF)
    assert not claims.names(None, REF) and not claims.names({"tether_kyma": "x"}, REF)


BYOC = WHO._replace(shoot="")  # a Kyma CR without kyma-project.io/shoot-name


def test_a_byoc_kyma_cr_matches_only_a_runtime_registered_for_it_and_no_shoot() -> None:
    mine = {"tether_kyma": REF, "global_account_id": "ga-1", "global_subaccount_id": "sa-1"}
    assert claims.mismatch(mine, BYOC) == ""
    # a Gardener shoot's registration is never a BYOC runtime's, even labelled for it
    assert "gardenerClusterName" in claims.mismatch({**mine, "gardenerClusterName": "c"}, BYOC)
    # unlabelled or another Kyma CR's: refused
    assert "tether_kyma" in claims.mismatch({}, BYOC)
    assert "tether_kyma" in claims.mismatch({**mine, "tether_kyma": "kcp-system.k2"}, BYOC)
    assert "global_subaccount_id" in claims.mismatch({**mine, "global_subaccount_id": "x"}, BYOC)
    # a hint (the runtime's agent Secret) naming a shoot's runtime is refused, not adopted
    shoot_rt = rt("shoot-rt", global_account_id="ga-1")
    got = adoption.classify([], BYOC, "tether", shoot_rt, {})
    assert (got.runtime_id, got.refused) == (None, claims.LABELS_MISMATCH)
    # its own registration is found again and adopted as its own
    own = queries.Runtime("own", "byoc.x", {"director_connection_managed_by": "tether", **mine}, "")
    assert adoption.classify([own], BYOC, "tether", None, {}).runtime_id == "own"


def test_holders_claim_is_atomic_and_counts_duplicates() -> None:
    h = claims.Holders()
    h.begin(
        [
            mapping(rid="r1"),
            mapping(rid="r2")._replace(name="k2"),
            mapping(rid="r2")._replace(name="k3"),
            mapping(),
        ]
    )
    assert h.duplicates() == 1
    assert h.other("r1", "k1") is None and h.other("r1", "k9") == "k1"
    assert h.claim("r1", "k1") is None  # its own
    assert h.claim("r1", "k9") == "k1"  # never two
    assert h.claim("r7", "k9") is None and h.other("r7", "k1") == "k9"
    h.release("r7", "k9")
    assert h.claim("r7", "k1") is None
    import threading

    won: list[str] = []
    threads = [
        threading.Thread(target=lambda n=n: won.append(n) if h.claim("r8", n) is None else None)
        for n in ("a", "b", "c", "d")
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(won) == 1
    h.end()
    assert h.other("r1", "k9") is None and not h.open


class FakeIndex:
    """The lookup's inputs as plain data: the tenant's labelled runtimes and runtime(id:)."""

    def __init__(self, found: list[queries.Runtime], known: list[queries.Runtime]) -> None:
        self.found, self.known, self.asked = found, {r.id: r for r in known}, []  # type: ignore[var-annotated]
        self.director = self

    def find(self, tenant: str, shoot: str) -> list[queries.Runtime]:
        return self.found

    def get_runtime(self, tenant: str, rid: str) -> queries.Runtime | None:
        self.asked.append(rid)
        return self.known.get(rid)


def test_lookup_checks_the_hint_and_never_asks_the_director_for_a_malformed_one() -> None:
    victim = rt("victim-1", gardenerClusterName="c-victim")
    idx = FakeIndex([], [victim])
    k = kyma()
    hint = adoption.Hint("victim-1", "the runtime's agent Secret")
    got = adoption.lookup(idx, "ga-1", k, POLICY, REF, lambda: hint, lambda rid: None)  # type: ignore[arg-type]
    assert got.refused == claims.LABELS_MISMATCH and idx.asked == ["victim-1"]
    got = adoption.lookup(
        idx,
        "ga-1",
        k,
        POLICY,
        REF,
        lambda: hint,  # type: ignore[arg-type]
        lambda rid: "victim" if rid == "victim-1" else None,
    )
    assert got.refused == claims.HELD_ELSEWHERE
    for bad in ("x" * 64, "a b", "-a", "../x", "a\n"):
        idx.asked.clear()
        got = adoption.lookup(
            idx,
            "ga-1",
            k,
            POLICY,
            REF,
            lambda b=bad: adoption.Hint(b, "s"),  # type: ignore[arg-type, misc]
            lambda rid: None,
        )
        assert idx.asked == [] and got == (None, False, 0, None, "", ""), bad
    # a hint the Director does not know in this tenant is ignored: labelled lookup as before
    got = adoption.lookup(
        FakeIndex([rt("mine")], []),
        "ga-1",
        k,
        POLICY,
        REF,  # type: ignore[arg-type]
        lambda: adoption.Hint("gone", "s"),
        lambda rid: None,
    )
    assert got.runtime_id == "mine"


@pytest.mark.parametrize(
    "url",
    [
        "http://connector.example.com/graphql",
        "https:///graphql",
        "https://u:p@c.example.com/g",
        "https://c.example.com/g?x=1",
        "https://c.example.com/g#f",
        "https://c.example.com:x/g",
        "https://c.example.com/" + "a" * 1100,
        "https://c.example.com/a b",
        "https://c.example.com/\x00",
        "javascript:alert(1)",
    ],
)
def test_a_connector_url_of_the_wrong_shape_never_reaches_a_runtime(url: str) -> None:
    with pytest.raises(errors.InvalidAnswer) as e:
        queries.token_of({"token": "t0k3n-0123456789abcdef", "connectorURL": url})
    assert "t0k3n" not in str(e.value)


@pytest.mark.parametrize(
    "token",
    [
        "short",
        "x" * 513,
        "a b c d e f g h i j",
        "tok\nen-0123456789",
        '{"k": "0123456789"}',
        "ünïcode-0123456789",
    ],
)
def test_a_token_of_the_wrong_shape_never_reaches_a_runtime(token: str) -> None:
    with pytest.raises(errors.InvalidAnswer) as e:
        queries.token_of(
            {"token": token, "connectorURL": "https://c.example.com/connector/graphql"}
        )
    assert token not in str(e.value)
    ok = queries.token_of(
        {
            "token": "A-z_0.9~+/=" * 3,
            "connectorURL": "https://c.example.com:443/g",
            "expiresAt": "x" * 500,
        }
    )
    assert len(ok.expires_at) == 64


def test_runtime_ids_from_the_director_must_be_label_values() -> None:
    for bad in ("a" * 64, "a/b", "", "-a"):
        with pytest.raises(errors.Unavailable):
            queries.runtime_of({"id": bad})
    with pytest.raises(errors.InvalidAnswer):
        queries.runtime_of({"id": 12})
    assert queries.runtime_of({"id": "4a1f-9c2e.x_1"}).id == "4a1f-9c2e.x_1"


def test_lookup_runs_before_every_register_and_ambiguity_is_reported_once() -> None:
    m = mapping()
    f = decide.Facts(kyma=kyma(), mapping=m, now=NOW, created_now=True)
    assert decide.decide(f, POLICY).kind == "lookup"
    a = decide.decide(f._replace(looked_up=True, candidates=2), POLICY)
    assert (a.kind, a.reason) == ("report_invalid", "AmbiguousRegistration")
    cond = {"type": "Registered", "reason": a.reason, "message": a.message}
    reported = mapping(state="Failed", conditions=[cond])
    assert (
        decide.decide(f._replace(mapping=reported, looked_up=True, candidates=2), POLICY).kind
        == "done"
    )  # not written again every run
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


def adopted(
    secret: model.AgentSecret | None, condition: str = "INITIAL", **kw: Any
) -> decide.Action:
    m = mapping(rid="r1", registered=True)
    f = decide.Facts(
        kyma=kyma(),
        mapping=m,
        now=NOW,
        fetched=True,
        runtime_condition=condition,
        secret="missing" if secret is None else "differs",
        found_secret=secret,
        **kw,
    )
    return decide.decide(f, POLICY)


def test_adopted_runtime_keeps_a_working_secret_and_reissues_otherwise() -> None:
    assert adopted(held()).kind == "keep_secret"
    assert adopted(held(), condition="CONNECTED").kind == "mark_connected"  # Secret not read
    for secret, reason in (
        (None, "SecretMissing"),
        (held(cert=True), "TokenUsed"),
        (held(age=301), "TokenExpired"),
        (held("r2"), "SecretForOtherRuntime"),
        (held(complete=False), "SecretForOtherRuntime"),
        (held(tenant="ga-2"), "SecretForOtherRuntime"),
    ):
        a = adopted(secret)
        assert (a.kind, a.reason) == ("issue_token", reason), secret
    # a Secret Tether wrote (digest recorded) follows the usual path, not the verdict
    m = mapping(
        rid="r1",
        registered=True,
        configured=True,
        secretDigest="dig",
        tokenExpiresAt="2026-11-30T13:00:00Z",
        state="Ready",
    )
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
    f = adoption.simulate(
        decide.Action("adopt", runtime_id="r1"), f._replace(looked_up=True), "kcp-system", "ga-1"
    )
    assert f.mapping is not None and f.mapping.runtime_id == "r1" and not f.registered_now
    invalid = adoption.simulate(
        decide.Action("create_mapping", "MissingLabel"),
        decide.Facts(kyma=k, mapping=None, now=NOW),
        "kcp-system",
        "ga-1",
    )
    assert decide.decide(invalid, POLICY).kind == "done"
    plan = adoption.Plan()
    plan.add("k1", "adopt", "", "r1")
    plan.add("k2", "register")
    plan.add("k3", "register")
    assert adoption.counts(plan.take()) == {"adopt": 1, "register": 2} and plan.take() == []
