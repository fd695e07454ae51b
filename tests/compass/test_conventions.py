"""The pure parts of issue 13's conventions: Event bodies, the last-run annotations,
compass's Lease notes, the scrubbing of Director messages and the mapping's conditions."""

from __future__ import annotations

import datetime
import json
from typing import Any, NamedTuple

import pytest

from compass import errors, lease_notes, status
from tether.kube import apitypes, events
from tether.runtime import elected

NOW = datetime.datetime(2026, 11, 30, 10, 0, 0, 123456, tzinfo=datetime.UTC)
REF = events.Ref("tether.kyma-project.io/v1alpha1", "CompassMapping", "kcp-system", "k1", "u-1")


# -- tether.kube.events ---------------------------------------------------------------------------


def test_event_body_is_bounded_and_names_its_object() -> None:
    b = events.body(
        REF,
        "Registered",
        "x" * 5000,
        warning=False,
        component="tether-compass",
        instance="pod-" + "i" * 300,
        now=NOW,
    )
    assert b["metadata"] == {"generateName": "k1.", "namespace": "kcp-system"}
    assert b["involvedObject"] == {
        "apiVersion": REF.api_version,
        "kind": REF.kind,
        "name": "k1",
        "namespace": "kcp-system",
        "uid": "u-1",
    }
    assert len(b["message"]) == events.MESSAGE_LIMIT and b["message"].endswith("...")
    assert b["type"] == "Normal" and b["reason"] == "Registered"
    assert len(b["reportingInstance"]) == 128
    assert b["firstTimestamp"] == b["lastTimestamp"] == "2026-11-30T10:00:00Z"
    w = events.body(
        REF._replace(uid=""), "Failing", "m", warning=True, component="c", instance="i", now=NOW
    )
    assert w["type"] == "Warning" and "uid" not in w["involvedObject"]


@pytest.mark.parametrize("reason", ["registered", "Not CamelCase", "", "A" * 129])
def test_event_reason_must_be_camel_case(reason: str) -> None:
    with pytest.raises(ValueError):
        events.body(REF, reason, "m", warning=False, component="c", instance="i", now=NOW)


# -- tether.runtime.elected: the last run ---------------------------------------------------


class Summary(NamedTuple):
    ok: bool = True
    skipped: bool = False


def test_outcome_of_a_run() -> None:
    assert elected.outcome(Summary(), None) == "ok"
    assert elected.outcome({"Ready": 3}, None) == "ok"  # no ok attribute: it ran
    assert elected.outcome(None, None) == "ok"
    assert elected.outcome(Summary(ok=False), None) == "failed"
    assert elected.outcome(Summary(skipped=True), None) is None
    assert elected.outcome(None, RuntimeError("x")) == "failed"


def test_last_run_annotations() -> None:
    got = elected.last_run(NOW, "ok", 1.23456)
    assert got == {
        apitypes.LAST_RUN_AT_ANNOTATION: "2026-11-30T10:00:00Z",
        apitypes.LAST_RUN_RESULT_ANNOTATION: "ok",
        apitypes.LAST_RUN_SECONDS_ANNOTATION: "1.235",
    }
    assert elected.last_run(NOW, "failed", -1)[apitypes.LAST_RUN_SECONDS_ANNOTATION] == "0.000"


def test_recorded_keeps_the_jobs_result_and_error_and_survives_a_failing_publish() -> None:
    published: list[dict[str, str]] = []
    assert elected.recorded(lambda x: Summary(ok=x), published.append)(False) == Summary(ok=False)
    assert published[-1][apitypes.LAST_RUN_RESULT_ANNOTATION] == "failed"

    def boom() -> None:
        raise KeyError("job")

    with pytest.raises(KeyError):
        elected.recorded(boom, published.append)()
    assert published[-1][apitypes.LAST_RUN_RESULT_ANNOTATION] == "failed"
    elected.recorded(lambda: Summary(skipped=True), published.append)()
    assert len(published) == 2

    def broken(_: dict[str, str]) -> None:
        raise RuntimeError("publish")

    assert elected.recorded(lambda: 7, broken)() == 7


# -- compass: Lease notes ------------------------------------------------------------------


def test_director_errors_newest_first_bounded_distinct() -> None:
    notes: tuple[lease_notes.DirectorErrorNote, ...] = ()
    for i in range(8):
        notes = lease_notes.add_error(
            notes,
            NOW + datetime.timedelta(seconds=i),
            "register_runtime",
            f"error {i} " + "m" * 500,
        )
    assert len(notes) == lease_notes.MAX_ERRORS
    assert notes[0].message.startswith("error 7") and notes[-1].message.startswith("error 3")
    assert all(len(n.message) <= lease_notes.MESSAGE_LIMIT for n in notes)
    again = lease_notes.add_error(
        notes, NOW + datetime.timedelta(seconds=60), "register_runtime", "error 7 " + "m" * 500
    )
    assert len(again) == 5 and again[0].at == "2026-11-30T10:01:00Z" and again[1:] == notes[1:]
    doc = json.loads(lease_notes.errors_value(again))
    assert set(doc[0]) == {"at", "operation", "message"}


def test_breaker_events_on_open_and_close_only() -> None:
    assert lease_notes.breaker_event("closed", "open") is not None
    assert lease_notes.breaker_event("closed", "open")[0] == "CircuitOpened"  # type: ignore[index]
    assert lease_notes.breaker_event("half_open", "closed")[0] == "CircuitClosed"  # type: ignore[index]
    assert lease_notes.breaker_event("open", "half_open") is None
    assert lease_notes.breaker_event("half_open", "open") is None  # a failed probe


def test_lease_notes_publish_changes_only() -> None:
    got: list[tuple[dict[str, str], bool]] = []
    n = lease_notes.LeaseNotes(now=lambda: NOW)
    n.breaker_changed("open")  # not attached yet: nothing published
    n.attach(lambda values, keep=False: got.append((dict(values), keep)))
    assert got == [({apitypes.BREAKER_ANNOTATION: "open"}, True)]
    n.breaker_changed("open")
    n.breaker_changed("half_open")
    assert got[-1] == ({apitypes.BREAKER_ANNOTATION: "half-open"}, True) and len(got) == 2
    n.director_error("request_token", errors.Unavailable("Director request_token: HTTP 503"))
    assert (
        json.loads(got[-1][0][apitypes.DIRECTOR_ERRORS_ANNOTATION])[0]["operation"]
        == "request_token"
    )
    n.director_error("request_token", errors.Unavailable("Director request_token: HTTP 503"))
    assert len(got) == 3  # same error, same second: no change


# -- compass: scrubbing the Director's messages ---------------------------------------------

SECRET = "s3cr3t-value-42"
TOKEN = "Qm9vbXNoYWthbGFrYS1hY2Nlc3MtdG9rZW4tdmFsdWU"


@pytest.mark.parametrize(
    "text",
    [
        f"failed for client_secret={SECRET}",
        f"bad header Authorization: Bearer {TOKEN}",
        f'{{"access_token": "{TOKEN}"}}',
        f"plain {SECRET} in the middle",
        f"the raw {TOKEN} token",
        "jwt eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.c2lnbmF0dXJl here",
        "password: hunter2hunter2",
    ],
)
def test_scrub_removes_credentials(text: str) -> None:
    out = errors.scrub(text, [SECRET, TOKEN])
    for bad in (SECRET, TOKEN, "hunter2", "eyJhbGci"):
        assert bad not in out
    assert errors.REDACTED in out


def test_scrub_keeps_useful_text_and_errors_are_scrubbed_before_bounding() -> None:
    keep = 'runtime 4a1f0c2e-1234-4bcd-8def-0123456789ab: name "my-shoot" is not unique'
    assert errors.scrub(keep) == keep
    e = errors.from_graphql_error(
        {"message": "x" * 290 + SECRET, "extensions": {"error_code": 22}}, [SECRET]
    )
    assert isinstance(e, errors.InvalidInput) and SECRET[:6] not in str(e)


# -- compass: the mapping's conditions -------------------------------------------------------


def conds(st: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["type"]: c for c in st["conditions"]}


def test_finish_sets_ready_and_generations_and_keeps_transition_times() -> None:
    st = status.finish(status.processing({}, NOW, "Registering", "registering"), 3, NOW)
    assert st["observedGeneration"] == 3
    c = conds(st)
    assert c["Ready"]["status"] == "False" and c["Ready"]["reason"] == "Registering"
    assert all(x["observedGeneration"] == 3 for x in c.values())
    for x in c.values():
        assert set(x) == {
            "type",
            "status",
            "observedGeneration",
            "lastTransitionTime",
            "reason",
            "message",
        }
    later = NOW + datetime.timedelta(minutes=5)
    st = status.finish(status.registered(st, later, "rt-1", adopted=False), 3, later)
    assert conds(st)["Ready"]["reason"] == "Configuring"
    assert conds(st)["Ready"]["lastTransitionTime"] == "2026-11-30T10:00:00Z"  # still False
    st = status.finish(
        status.configured(st, later, token_expires_at="x", secret_digest="d", reason="Registered"),
        4,
        later,
    )
    ready = conds(st)["Ready"]
    assert (ready["status"], ready["reason"], ready["lastTransitionTime"]) == (
        "True",
        "Ready",
        "2026-11-30T10:05:00Z",
    )
    assert (
        st["state"] == "Ready" and st["registered"] and st["configured"]
    )  # compass-manager's fields
    much_later = later + datetime.timedelta(hours=1)
    failed = status.finish(
        status.failure(
            st,
            much_later,
            ctype=status.CONFIGURED,
            reason="DirectorUnavailable",
            message="m",
            permanent=False,
            delay=5,
        ),
        4,
        much_later,
    )
    assert conds(failed)["Ready"]["reason"] == "DirectorUnavailable"
    assert conds(failed)["Ready"]["lastTransitionTime"] == "2026-11-30T11:05:00Z"
    assert status.finish(failed, 4, much_later) == failed  # idempotent
