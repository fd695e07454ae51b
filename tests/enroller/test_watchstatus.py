"""What the enroller renders of the Watches (``enroller.render`` with ``Inputs.watches``) and
the Watch status it writes (``enroller.watchstatus``), with plain data."""

from __future__ import annotations

import base64
import dataclasses
import datetime
import json

from enroller import render, watching, watchstatus
from tether.wire import watches, watchwire

BUNDLE = render.load_bundle(render.BUNDLE_FILE.read_text())
INPUTS = render.Inputs(
    runtime_id="rt-1",
    listener_url="https://l.example.com",
    listener_ca=b"LCA",
    client_cert=b"CERT",
    client_key=b"KEY",
    client_serial="a1",
    serving_cert=b"SCERT",
    serving_key=b"SKEY",
    serving_serial="b2",
    serving_not_after="2027-01-01T00:00:00Z",
    ca_bundle=b"CA",
)
NOW = datetime.datetime(2026, 12, 4, 12, 0, tzinfo=datetime.UTC)


def watch(name: str, kind: str = "ConfigMap", generation: int = 1, **spec: object) -> watches.Watch:
    plural = kind.lower() + "s"
    group = "" if kind in ("ConfigMap", "Secret") else "example.com"
    mode = "metadata" if kind == "Secret" else "full"
    return watches.parse(
        {
            "metadata": {"name": name, "generation": generation},
            "spec": {
                "resource": {"group": group, "version": "v1", "resource": plural, "kind": kind},
                "send": {"mode": mode},
                **spec,
            },
        }
    )


def hooks(objs: list[dict[str, object]]) -> list[dict[str, object]]:
    config = next(o for o in objs if o["kind"] == "ValidatingWebhookConfiguration")
    return config["webhooks"]  # type: ignore[return-value]


def test_before_watches_the_bundle_registration_is_kept_and_no_watch_list() -> None:
    objs = render.render(BUNDLE, INPUTS)
    assert [h["name"] for h in hooks(objs)] == ["configmaps.tether.kyma-project.io"]
    assert not any(o["metadata"]["name"] == watchwire.WIRE_CONFIGMAP for o in objs)


def test_one_webhook_per_watch_from_the_bundle_webhook_and_the_list_before_the_deployments() -> (
    None
):
    ws = (watch("a"), watch("b", "Widget", selector={"matchLabels": {"x": "y"}}))
    objs = render.render(BUNDLE, dataclasses.replace(INPUTS, watches=ws))
    got = hooks(objs)
    assert [h["name"] for h in got] == [watchwire.webhook_name(w) for w in ws]
    template = render.load_bundle(render.BUNDLE_FILE.read_text())[-1]["webhooks"][0]
    for h in got:
        assert base64.b64decode(h["clientConfig"]["caBundle"]) == b"CA"  # type: ignore[index]
        assert h["clientConfig"]["service"] == template["clientConfig"]["service"]  # type: ignore[index]
        assert h["failurePolicy"] == template["failurePolicy"]
    assert got[1]["rules"][0]["apiGroups"] == ["example.com"]  # type: ignore[index]
    kinds = [o["kind"] for o in objs]
    listed = next(
        i for i, o in enumerate(objs) if o["metadata"]["name"] == watchwire.WIRE_CONFIGMAP
    )
    assert listed < kinds.index("Deployment")
    text = objs[listed]["data"][watchwire.WIRE_KEY]
    assert [w.name for w in watchwire.from_wire(text)] == ["a", "b"]
    assert objs[listed]["metadata"]["namespace"] == render.NAMESPACE


def test_no_watch_in_force_is_no_webhook_and_an_empty_list() -> None:
    objs = render.render(BUNDLE, dataclasses.replace(INPUTS, watches=()))
    assert hooks(objs) == []
    listed = next(o for o in objs if o["metadata"]["name"] == watchwire.WIRE_CONFIGMAP)
    assert json.loads(listed["data"][watchwire.WIRE_KEY])["watches"] == []


def test_the_watch_set_has_a_digest_of_its_own_and_only_watches_on_or_off_changes_the_bundle() -> (
    None
):
    def notes(ws: tuple[watches.Watch, ...] | None) -> tuple[str, str | None]:
        objs = render.render(BUNDLE, dataclasses.replace(INPUTS, watches=ws))
        hook = next(o for o in objs if o["kind"] == "ValidatingWebhookConfiguration")["metadata"][
            "annotations"
        ]
        secret = next(o for o in objs if o["metadata"]["name"] == render.CLIENT_SECRET)["metadata"][
            "annotations"
        ]
        assert secret[render.DIGEST] == hook[render.DIGEST] and render.WATCHES_DIGEST not in secret
        return hook[render.DIGEST], hook.get(render.WATCHES_DIGEST)

    bundle, base = notes((watch("a"),))
    assert notes((watch("a"),)) == (
        bundle,
        base,
    )  # deterministic: an unchanged set is not re-applied
    for other in ((watch("a", generation=2),), (watch("a"), watch("b")), ()):
        assert notes(other)[0] == bundle  # the bundle is as it was: only the Watches are applied
        assert notes(other)[1] not in (None, base)
    legacy = notes(None)
    assert legacy[0] != bundle and legacy[1] is None  # Watches on or off: the whole bundle
    assert render.render(BUNDLE, INPUTS)[-1]["metadata"]["annotations"][render.DIGEST] == legacy[0]


def test_a_change_of_the_watches_alone_applies_the_watch_list_then_the_webhook_configuration() -> (
    None
):
    objs = render.render(BUNDLE, dataclasses.replace(INPUTS, watches=(watch("a"),)))
    assert [(o["kind"], o["metadata"]["name"]) for o in render.watch_objects(objs)] == [
        ("ConfigMap", watchwire.WIRE_CONFIGMAP),
        ("ValidatingWebhookConfiguration", render.WEBHOOK_CONFIG),
    ]


def facts(
    *runtimes: watchstatus.RuntimeFacts,
    error: str | None = None,
    previous: dict[str, object] | None = None,
    now: datetime.datetime = NOW,
) -> watchstatus.WatchFacts:
    return watchstatus.WatchFacts(
        now=now, generation=3, previous=previous, error=error, runtimes=runtimes
    )


def cond(status: dict[str, object], kind: str) -> dict[str, object]:
    return next(c for c in status["conditions"] if c["type"] == kind)  # type: ignore[attr-defined]


def test_counts_and_the_runtimes_not_in_force_with_why() -> None:
    s = watchstatus.status(
        facts(
            watchstatus.RuntimeFacts("rt-b", True),
            watchstatus.RuntimeFacts("rt-c", False, "Unreachable: the runtime's API: timeout"),
            watchstatus.RuntimeFacts("rt-a", False),
        )
    )
    assert s["observedGeneration"] == 3
    assert s["runtimes"]["selected"] == 3 and s["runtimes"]["inForce"] == 1
    assert s["runtimes"]["notInForce"] == [
        {"runtimeId": "rt-a", "reason": "not rendered into the runtime yet"},
        {"runtimeId": "rt-c", "reason": "Unreachable: the runtime's API: timeout"},
    ]
    assert cond(s, "Valid")["status"] == "True"
    ready = cond(s, "Ready")
    assert (ready["status"], ready["reason"]) == ("False", "Pending")
    assert "2 of 3" in str(ready["message"])
    assert watchstatus.state(s) == "Pending"


def test_not_in_force_is_bounded() -> None:
    s = watchstatus.status(
        facts(*(watchstatus.RuntimeFacts(f"rt-{i:03}", False, "x" * 5000) for i in range(50)))
    )
    listed = s["runtimes"]["notInForce"]
    assert len(listed) == watchstatus.NOT_IN_FORCE_LISTED and listed[0]["runtimeId"] == "rt-000"
    assert all(len(r["reason"]) <= watchstatus.REASON_MAX for r in listed)
    assert s["runtimes"]["selected"] == 50


def test_in_force_everywhere_or_nowhere_selected_is_ready() -> None:
    s = watchstatus.status(facts(watchstatus.RuntimeFacts("rt-a", True)))
    assert (cond(s, "Ready")["status"], cond(s, "Ready")["reason"]) == ("True", "InForce")
    assert watchstatus.state(s) == "Ready"
    s = watchstatus.status(facts())
    assert (cond(s, "Ready")["status"], cond(s, "Ready")["reason"]) == ("True", "NoRuntimes")
    assert s["runtimes"] == {"selected": 0, "inForce": 0, "notInForce": []}


def test_a_bad_watch_is_not_valid_with_the_field_named() -> None:
    s = watchstatus.status(facts(error="spec.send.mode: a Secret's values never leave the runtime"))
    valid = cond(s, "Valid")
    assert (valid["status"], valid["reason"]) == ("False", "Invalid")
    assert "spec.send.mode" in str(valid["message"])
    assert cond(s, "Ready")["status"] == "False"
    assert watchstatus.state(s) == "Invalid"


def test_an_unchanged_outcome_is_an_equal_status_and_not_written_again() -> None:
    runtimes = (
        watchstatus.RuntimeFacts("rt-a", True),
        watchstatus.RuntimeFacts("rt-b", False, "Forbidden"),
    )
    first = watchstatus.status(facts(*runtimes))
    later = watchstatus.status(
        facts(*runtimes, previous=first, now=NOW + datetime.timedelta(hours=1))
    )
    assert later == first and not watchstatus.changed(first, later)
    # a transition: the time moves for the condition that changed only
    fixed = watchstatus.status(
        facts(runtimes[0], previous=first, now=NOW + datetime.timedelta(hours=2))
    )
    assert watchstatus.changed(first, fixed)
    assert cond(fixed, "Valid")["lastTransitionTime"] == cond(first, "Valid")["lastTransitionTime"]
    assert cond(fixed, "Ready")["lastTransitionTime"] != cond(first, "Ready")["lastTransitionTime"]
    assert watchstatus.changed(None, first)


def kyma_cr(**labels: str) -> dict[str, object]:
    return {"metadata": {"name": "k", "labels": labels}, "spec": {"modules": [{"name": "keda"}]}}


def watch_cr(name: str, **spec: object) -> dict[str, object]:
    return {
        "metadata": {"name": name, "generation": 2},
        "spec": {
            "resource": {"version": "v1", "resource": "configmaps", "kind": "ConfigMap"},
            **spec,
        },
    }


def test_a_run_parses_every_watch_and_keeps_why_the_bad_ones_are_skipped() -> None:
    listed = watching.parse_all(
        [
            watch_cr("good"),
            watch_cr("bad", send={"mode": "keys"}),
            watch_cr("mod", runtimes={"module": "keda"}),
            watch_cr("sel", runtimes={"selector": {"matchLabels": {"tier": "gold"}}}),
        ]
    )
    assert [w.name for w in listed.valid] == ["good", "mod", "sel"]
    assert list(listed.errors) == ["bad"] and "spec.send.keys" in listed.errors["bad"]
    ws, left_out = listed.for_runtime(kyma_cr(tier="silver"))
    assert [w.name for w in ws] == ["good", "mod"] and left_out == ()
    assert [w.name for w in listed.for_runtime(kyma_cr(tier="gold"))[0]] == ["good", "mod", "sel"]


def test_at_most_max_watches_are_rendered_into_one_runtime_the_rest_says_why() -> None:
    listed = watching.parse_all([watch_cr(f"w{i:03}") for i in range(watches.MAX_WATCHES + 3)])
    ws, left_out = listed.for_runtime(kyma_cr())
    assert len(ws) == watches.MAX_WATCHES and ws[0].name == "w000"
    assert left_out == ("w064", "w065", "w066")
    known = watching.Installed(
        "rt-1", frozenset((w.name, w.generation) for w in ws), left_out, None
    )
    assert watching._fact("w000", 2, known).in_force
    assert not watching._fact("w000", 3, known).in_force  # an older generation is not in force
    over = watching._fact("w065", 2, known)
    assert not over.in_force and over.why_not == watching.TOO_MANY
    failing = watching.Installed("rt-2", None, (), "Unreachable: the runtime's API: timed out")
    assert watching._fact("w000", 2, failing).why_not.startswith("Unreachable")
