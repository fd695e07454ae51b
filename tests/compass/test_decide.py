"""The reconcile decision with plain data: every path from a new Kyma CR to Ready and
back to gone, including the crash and outage cases."""

from __future__ import annotations

import datetime
from typing import Any

import pytest

from compass import decide, model
from testing.compassfacts import LABELS, NOW, kyma, mapping
from tether.kube import apitypes

POLICY = decide.Policy()
READY = dict(
    state="Ready",
    registered=True,
    configured=True,
    secretDigest="d",
    tokenExpiresAt="2026-11-30T13:00:00Z",
    failures=0,
)


def d(**kw: Any) -> decide.Action:
    kw.setdefault("now", NOW)
    return decide.decide(decide.Facts(**kw), kw.pop("policy", POLICY) if "policy" in kw else POLICY)


def test_new_kyma_creates_the_mapping_first() -> None:
    assert d(kyma=kyma(), mapping=None).kind == "create_mapping"


def test_fresh_mapping_looks_for_a_registration_then_registers_and_delivers_a_token() -> None:
    m = mapping()
    assert d(kyma=kyma(), mapping=m, created_now=True).kind == "lookup"
    assert d(kyma=kyma(), mapping=m, created_now=True, looked_up=True).kind == "register"
    m2 = mapping(rid="r1", registered=True)
    # just registered: whatever Secret the runtime holds is stale; no read, no status query
    a = d(kyma=kyma(), mapping=m2, registered_now=True, fetched=True, runtime_condition="INITIAL")
    assert (a.kind, a.runtime_id, a.reason) == ("issue_token", "r1", "Registered")


def test_mapping_from_an_earlier_pass_is_looked_up_before_registering() -> None:
    """A crash between registerRuntime and the mapping write leaves this state."""
    m = mapping()
    assert d(kyma=kyma(), mapping=m).kind == "lookup"
    assert d(kyma=kyma(), mapping=m, looked_up=True).kind == "register"
    a = d(kyma=kyma(), mapping=m, looked_up=True, found_runtime_id="r1")
    assert (a.kind, a.runtime_id) == ("adopt", "r1")


def test_mapping_without_registering_mark_gets_it_before_any_register() -> None:
    assert d(kyma=kyma(), mapping=mapping(registering=False)).kind == "mark_registering"


@pytest.mark.parametrize("missing", [apitypes.GLOBAL_ACCOUNT_LABEL, apitypes.SUBACCOUNT_LABEL])
def test_missing_required_label_is_reported_not_skipped(missing: str) -> None:
    labels = {k: v for k, v in LABELS.items() if k != missing}
    a = d(kyma=kyma(labels), mapping=None)
    assert a.kind == "create_mapping" and a.reason == "MissingLabel" and missing in a.message
    a = d(kyma=kyma(labels), mapping=mapping(registering=False))
    assert a.kind == "report_invalid" and a.reason == "MissingLabel"
    # once reported with the same reason and message: nothing more to do
    cond = {"type": "Registered", "status": "False", "reason": a.reason, "message": a.message}
    done = d(
        kyma=kyma(labels), mapping=mapping(registering=False, state="Failed", conditions=[cond])
    )
    assert done.kind == "done"


@pytest.mark.parametrize("shoot", [None, "", "  "])
def test_a_kyma_cr_without_a_shoot_name_is_registered_under_a_stable_byoc_name(
    shoot: str | None,
) -> None:
    """Bring-your-own cluster (issue 42 item 5): no MissingLabel, a name from the Kyma CR."""
    labels = {k: v for k, v in LABELS.items() if k != apitypes.SHOOT_NAME_LABEL}
    if shoot is not None:
        labels[apitypes.SHOOT_NAME_LABEL] = shoot
    k = kyma(labels)
    assert decide.problems(k) is None
    assert d(kyma=k, mapping=mapping(), looked_up=True).kind == "register"
    inp = decide.register_input(k, POLICY)
    name = inp["name"]
    assert name == decide.byoc_name("kcp-system.k1") == decide.runtime_name(k)
    assert decide.NAME_RE.match(name) and name.startswith(model.BYOC_PREFIX)
    assert model.SHOOT_LABEL not in inp["labels"]  # no shoot is claimed
    assert inp["labels"][model.KYMA_REF] == "kcp-system.k1"
    # stable: a function of namespace and name only (labels, restarts change nothing)
    again = model.Kyma("kcp-system", "k1", {**labels, "x": "y"}, ("m",), False)
    assert decide.runtime_name(again) == name
    # one per Kyma CR, and never a Gardener shoot's name (DNS labels have no '.')
    others = {decide.byoc_name(f"kcp-system.k{i}") for i in range(2000)}
    assert len(others) == 2000 and all("." in n for n in others)
    assert decide.byoc_name("ns-a.b") != decide.byoc_name("ns.a-b")


def test_invalid_shoot_name_is_reported() -> None:
    a = d(kyma=kyma({**LABELS, apitypes.SHOOT_NAME_LABEL: "9-starts-with-digit"}), mapping=None)
    assert a.reason == "InvalidLabel"


def test_ready_and_secret_intact_is_done_without_director() -> None:
    m = mapping(rid="r1", **READY)
    assert d(kyma=kyma(), mapping=m).kind == "read_secret"
    assert d(kyma=kyma(), mapping=m, secret="matches").kind == "done"


@pytest.mark.parametrize(
    "secret,reason", [("missing", "SecretMissing"), ("differs", "SecretAltered")]
)
def test_missing_or_altered_secret_asks_director_then_new_token(secret: str, reason: str) -> None:
    m = mapping(rid="r1", **READY)
    assert d(kyma=kyma(), mapping=m, secret=secret).kind == "fetch_runtime"
    a = d(kyma=kyma(), mapping=m, secret=secret, fetched=True, runtime_condition="INITIAL")
    assert (a.kind, a.reason) == ("issue_token", reason)
    # the agent connected meanwhile: no new token
    a = d(kyma=kyma(), mapping=m, secret=secret, fetched=True, runtime_condition="CONNECTED")
    assert a.kind == "mark_connected"


def test_expired_unused_token_is_replaced() -> None:
    m = mapping(rid="r1", **{**READY, "tokenExpiresAt": "2026-11-30T11:59:59Z"})
    assert d(kyma=kyma(), mapping=m, secret="matches").kind == "fetch_runtime"
    a = d(kyma=kyma(), mapping=m, secret="matches", fetched=True, runtime_condition="INITIAL")
    assert (a.kind, a.reason) == ("issue_token", "TokenExpired")


def test_connected_runtime_needs_no_secret_check_and_only_full_resync_asks_director() -> None:
    m = mapping(rid="r1", runtimeConnected=True, **READY)
    assert d(kyma=kyma(), mapping=m).kind == "done"
    assert d(kyma=kyma(), mapping=m, full=True).kind == "fetch_runtime"
    assert (
        d(kyma=kyma(), mapping=m, full=True, fetched=True, runtime_condition="CONNECTED").kind
        == "done"
    )


def test_runtime_lost_in_director_is_registered_again() -> None:
    m = mapping(rid="r1", **READY)
    a = d(kyma=kyma(), mapping=m, secret="missing", fetched=True, runtime_condition=None)
    assert (a.kind, a.reason) == ("forget_runtime", "RuntimeNotFound")


def test_backoff_waits_until_next_attempt() -> None:
    m = mapping(rid="r1", failures=3, nextAttemptAt="2026-11-30T12:00:30Z")
    assert d(kyma=kyma(), mapping=m).kind == "wait"
    assert d(kyma=kyma(), mapping=m, now=NOW + datetime.timedelta(seconds=31)).kind == "read_secret"
    # deletion waits too (the Director is being spared), then proceeds
    assert d(kyma=None, mapping=m).kind == "wait"


OURS = {model.KYMA_REF: "kcp-system.k1", model.SHOOT_LABEL: "c-4a1f"}


def test_teardown_unregisters_then_deletes_then_releases() -> None:
    m = mapping(rid="r1", **READY)
    a = d(kyma=None, mapping=m)
    assert (a.kind, a.runtime_id) == ("fetch_runtime", "r1")  # only this Kyma CR's is unregistered
    a = d(kyma=None, mapping=m, fetched=True, runtime_condition="CONNECTED", runtime_labels=OURS)
    assert (a.kind, a.runtime_id) == ("unregister", "r1")
    # the Director does not know it any more: unregister is idempotent, as before
    assert d(kyma=None, mapping=m, fetched=True, runtime_labels={}).kind == "unregister"
    assert d(kyma=None, mapping=m, unregistered=True).kind == "delete_mapping"
    gone = mapping(rid="r1", deleting=True)
    assert d(kyma=None, mapping=gone, unregistered=True).kind == "remove_finalizer"
    assert (
        d(
            kyma=None, mapping=mapping(rid="r1", deleting=True, finalizers=()), unregistered=True
        ).kind
        == "done"
    )
    assert (
        d(
            kyma=kyma(deleting=True),
            mapping=m,
            fetched=True,
            runtime_condition="INITIAL",
            runtime_labels=OURS,
        ).kind
        == "unregister"
    )
    assert d(kyma=None, mapping=None).kind == "done"


def test_teardown_releases_a_runtime_whose_labels_name_another_kyma_cr() -> None:
    m = mapping(rid="victim", **READY)
    for labels in ({**OURS, model.KYMA_REF: "kcp-system.k2"}, {model.SHOOT_LABEL: "c-4a1f"}):
        a = d(
            kyma=None, mapping=m, fetched=True, runtime_condition="CONNECTED", runtime_labels=labels
        )
        assert (a.kind, a.reason, a.runtime_id) == ("release", decide.FOREIGN, "victim")
        assert "not unregistered" in a.message
    released = d(
        kyma=None,
        mapping=m,
        fetched=True,
        runtime_condition="CONNECTED",
        runtime_labels={},
        unregistered=True,
    )
    assert released.kind == "delete_mapping"


def test_a_registered_runtime_the_director_shows_as_another_kyma_crs_is_forgotten() -> None:
    """A mapping holding another Kyma CR's runtime (left by an earlier hijack): the first
    fetch drops it from the mapping instead of issuing a token; its own is kept."""
    m = mapping(rid="victim", registered=True)
    theirs = {**OURS, model.KYMA_REF: "kcp-system.k2"}
    a = d(
        kyma=kyma(),
        mapping=m,
        fetched=True,
        runtime_condition="INITIAL",
        runtime_labels=theirs,
        secret="missing",
    )
    assert (a.kind, a.reason, a.runtime_id) == ("forget_runtime", decide.FOREIGN, "victim")
    ok = d(
        kyma=kyma(),
        mapping=m,
        fetched=True,
        runtime_condition="INITIAL",
        runtime_labels=OURS,
        secret="missing",
    )
    assert (ok.kind, ok.reason) == ("issue_token", "SecretMissing")
    full = d(
        kyma=kyma(),
        mapping=mapping(rid="victim", runtimeConnected=True, **READY),
        full=True,
        fetched=True,
        runtime_condition="CONNECTED",
        runtime_labels=theirs,
    )
    assert full.kind == "forget_runtime"


def test_a_refused_lookup_is_reported_once_and_nothing_is_adopted_or_registered() -> None:
    f = decide.Facts(
        kyma=kyma(),
        mapping=mapping(),
        now=NOW,
        looked_up=True,
        refusal=("held_elsewhere", "the runtime's agent Secret names r9 ..."),
    )
    a = decide.decide(f, POLICY)
    assert (a.kind, a.reason) == ("report_invalid", decide.FOREIGN)
    cond = {"type": "Registered", "reason": a.reason, "message": a.message}
    assert (
        decide.decide(f._replace(mapping=mapping(state="Failed", conditions=[cond])), POLICY).kind
        == "done"
    )
    # even with a candidate found: never adopted past a refusal
    assert decide.decide(f._replace(found_runtime_id="r9"), POLICY).kind == "report_invalid"


def test_teardown_after_crash_looks_the_runtime_up_first() -> None:
    m = mapping()
    assert d(kyma=None, mapping=m).kind == "lookup"
    a = d(kyma=None, mapping=m, looked_up=True, found_runtime_id="r9", found_own=True)
    assert (a.kind, a.runtime_id) == ("unregister", "r9")
    # one registered by someone else (the Provisioner) is never unregistered by a lookup
    assert d(kyma=None, mapping=m, looked_up=True, found_runtime_id="r9").kind == "delete_mapping"
    assert d(kyma=None, mapping=m, looked_up=True).kind == "delete_mapping"
    # never registered (invalid Kyma CR): nothing to ask the Director
    assert d(kyma=None, mapping=mapping(registering=False)).kind == "delete_mapping"


def test_application_connector_setting() -> None:
    pol = decide.Policy(only_app_connector=True)
    assert decide.decide(decide.Facts(kyma(), None, NOW), pol).kind == "skip"
    with_module = kyma(modules=("application-connector",))
    assert decide.decide(decide.Facts(with_module, None, NOW), pol).kind == "create_mapping"


def test_register_input_carries_the_director_labels() -> None:
    inp = decide.register_input(kyma(), decide.Policy(managed_by="kcp-eu1"))
    assert inp["name"] == "c-4a1f"
    assert inp["labels"] == {
        "director_connection_managed_by": "kcp-eu1",
        "tether_kyma": "kcp-system.k1",
        "gardenerClusterName": "c-4a1f",
        "global_subaccount_id": "sa-1",
        "global_account_id": "ga-1",
        "broker_instance_id": "inst-1",
        "broker_plan_id": "p-1",
        "broker_plan_name": "azure",
    }
    # optional labels are left out when the Kyma CR lacks them (e.g. bring-your-own clusters)
    bare = {k: v for k, v in LABELS.items() if k in model.REQUIRED_LABELS}
    assert "broker_instance_id" not in decide.register_input(kyma(bare), POLICY)["labels"]


def test_every_path_converges_within_the_step_budget() -> None:
    """Simulate a pass as the reconciler does it, with the Director answering well."""
    f = decide.Facts(kyma=kyma(), mapping=None, now=NOW)
    kinds = []
    for _ in range(16):
        a = decide.decide(f, POLICY)
        kinds.append(a.kind)
        if a.kind == "done":
            break
        if a.kind == "create_mapping":
            f = f._replace(mapping=mapping(), created_now=True)
        elif a.kind == "lookup":
            f = f._replace(looked_up=True)
        elif a.kind == "register":
            f = f._replace(
                mapping=mapping(rid="r1", registered=True),
                registered_now=True,
                fetched=True,
                runtime_condition="INITIAL",
            )
        elif a.kind == "issue_token":
            f = f._replace(
                mapping=mapping(rid="r1", **READY), secret="matches", registered_now=False
            )
    assert kinds == ["create_mapping", "lookup", "register", "issue_token", "done"]
