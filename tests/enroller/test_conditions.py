"""A RuntimeEnrollment's conditions with plain data (enroller.conditions): Ready's reason,
quarantine, what a failed pass keeps, lastTransitionTime kept while a status holds."""

from __future__ import annotations

import datetime
from typing import Any

from enroller import conditions

T0 = datetime.datetime(2026, 11, 30, 12, 0, tzinfo=datetime.UTC)
DAY = datetime.timedelta(days=1)
TYPES = ["Ready", "Enrolled", "CertificateValid", "WebhookServing", "Heartbeat", "Quarantined"]


def conds(**kw: Any) -> dict[str, dict[str, Any]]:
    """A runtime enrolled in this pass, serving, heard from a minute ago, with ``kw`` changed."""
    facts: dict[str, Any] = dict(
        now=T0,
        previous={},
        generation=3,
        failure=None,
        not_after=T0 + DAY,
        webhook_serving=True,
        beat=T0 - datetime.timedelta(minutes=1),
        quarantined=False,
    )
    facts.update(kw)
    out = conditions.conditions(conditions.StatusFacts(**facts))
    assert [c["type"] for c in out] == TYPES
    return {c["type"]: c for c in out}


def test_a_connected_runtime_is_ready() -> None:
    c = conds()
    assert {k: v["status"] for k, v in c.items()} == {
        "Ready": "True",
        "Enrolled": "True",
        "CertificateValid": "True",
        "WebhookServing": "True",
        "Heartbeat": "True",
        "Quarantined": "False",
    }
    assert all(v["observedGeneration"] == 3 for v in c.values())


def test_ready_names_the_first_condition_that_is_not_true() -> None:
    assert conds(webhook_serving=False)["Ready"]["reason"] == "NoAvailableReplicas"
    expired = conds(not_after=T0, webhook_serving=False)
    assert expired["CertificateValid"]["reason"] == "Expired"
    assert expired["Ready"]["reason"] == "Expired"  # the certificate before the webhook
    assert conds(beat=None)["Ready"]["status"] == "True"  # the heartbeat is not part of Ready
    assert conds(beat=None)["Heartbeat"]["status"] == "Unknown"
    assert conds(beat=T0 - 11 * datetime.timedelta(minutes=1))["Heartbeat"]["reason"] == "Stale"


def test_a_failed_pass_keeps_what_it_could_not_evaluate() -> None:
    before = conds()
    c = conds(
        previous=before,
        failure=("Unreachable", "no route"),
        not_after=None,
        webhook_serving=None,
        now=T0 + DAY,
    )
    assert c["Enrolled"]["status"] == "False"
    assert c["Ready"]["reason"] == "Unreachable"
    assert c["Ready"]["message"] == "no route"
    assert c["CertificateValid"] == before["CertificateValid"]  # kept as it was, time and all
    assert c["WebhookServing"] == before["WebhookServing"]
    fresh = conds(failure=("Unreachable", "no route"), not_after=None, webhook_serving=None)
    assert fresh["CertificateValid"]["status"] == "Unknown"  # never evaluated


def test_quarantine_makes_ready_false_with_its_reason() -> None:
    c = conds(quarantined=True, failure=("Unreachable", "no route"), not_after=None)
    assert c["Quarantined"]["status"] == "True"
    assert c["Ready"]["reason"] == conditions.QUARANTINED
    assert c["Ready"]["message"].startswith("quarantined: ") and c["Ready"]["message"].endswith(
        "; no route"
    )


def test_the_transition_time_is_kept_while_the_status_holds() -> None:
    before = conds()
    later = conds(previous=before, now=T0 + DAY, not_after=T0 + 2 * DAY)
    assert later["Ready"]["lastTransitionTime"] == before["Ready"]["lastTransitionTime"]
    assert later["CertificateValid"]["message"] != before["CertificateValid"]["message"]
    changed = conds(previous=before, now=T0 + DAY, webhook_serving=False)
    assert changed["Ready"]["lastTransitionTime"] != before["Ready"]["lastTransitionTime"]


def test_the_certificate_is_this_passs_else_the_one_remembered_else_the_recorded() -> None:
    mine, remembered, recorded = (
        {"notAfter": "a"},
        {"certificate": {"notAfter": "b"}},
        {"status": {"certificate": {"notAfter": "c"}}},
    )
    assert conditions.certificate(mine, remembered, recorded) == {"notAfter": "a"}
    assert conditions.certificate(None, remembered, recorded) == {"notAfter": "b"}
    assert conditions.certificate(None, {}, recorded) == {"notAfter": "c"}
    assert conditions.certificate(None, None, None) is None
