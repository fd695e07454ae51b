"""``tether explain``'s decision (``admin.explain``, plain data): for one object of a runtime,
which Watches take it and, for each that does not, the first reason."""

from __future__ import annotations

import datetime
from typing import Any

import pytest

from admin import explain
from tether.wire import delivery

NOW = datetime.datetime(2026, 12, 7, 12, 0, tzinfo=datetime.UTC)
CM = {"group": "", "version": "v1", "resource": "configmaps", "kind": "ConfigMap"}
CONFIG = ("v1", "ConfigMap")
RUNTIME_ID = "kyma-project.io/runtime-id"


def watch(name: str, **spec: Any) -> dict[str, Any]:
    return {"metadata": {"name": name}, "spec": {"resource": CM, **spec}}


def kyma(labels: dict[str, str] | None = None, modules: tuple[str, ...] = ()) -> dict[str, Any]:
    return {
        "metadata": {
            "name": "k",
            "labels": {"kyma-project.io/runtime-id": "rt-1", **(labels or {})},
        },
        "spec": {"modules": [{"name": m} for m in modules]},
    }


LABELLED = watch("config", selector={"matchLabels": {"tether.example/sync": "true"}})
TEAM = watch("team-a", namespaces=["team-a"])


def one(*ws: dict[str, Any], ns: str = "team-a", name: str = "app", **kw: Any) -> Any:
    labels = kw.pop("labels", {})
    target = kw.pop("target", CONFIG)
    return explain.explain(ws, kyma(), target, ns, name, labels, kw.pop("summary", None))


def test_an_unlabelled_configmap_fails_the_selector() -> None:
    got = one(LABELLED, labels={})
    assert got.verdicts == [
        explain.Verdict(
            "config", False, "its labels do not match its selector 'tether.example/sync=true'"
        )
    ]
    taken = one(LABELLED, labels={"tether.example/sync": "true"})
    assert taken.verdicts[0].takes is True and taken.verdicts[0].why == "sends it (full)"


def test_unknown_labels_leave_the_selector_deciding() -> None:
    got = explain.explain([LABELLED], kyma(), CONFIG, "team-a", "app", None, None)
    assert got.verdicts[0].takes is None and "--labels" in got.verdicts[0].why


def test_a_namespace_outside_the_watch() -> None:
    assert one(TEAM, ns="team-b").verdicts[0].why == "namespace team-b is not among ['team-a']"
    assert one(TEAM, ns="kube-system").verdicts[0].why == "namespace kube-system is never watched"
    ignoring = watch("most", ignoredNamespaces=["noisy"])
    assert one(ignoring, ns="noisy").verdicts[0].why == "it ignores namespace noisy"


def test_a_kind_no_watch_takes() -> None:
    got = one(TEAM, target=("v1", "Secret"))
    assert got.verdicts == [explain.Verdict("team-a", False, "it watches ConfigMap (v1)")]


def test_a_name_never_sent() -> None:
    got = one(TEAM, name="kube-root-ca.crt")
    assert got.verdicts[0].why == "ConfigMap kube-root-ca.crt is never sent"


def test_watches_not_in_force_and_unusable_ones_are_named() -> None:
    module = watch("serverless", runtimes={"module": "serverless"})
    prod = watch("prod", runtimes={"selector": {"matchLabels": {"env": "prod"}}})
    broken = {"metadata": {"name": "broken"}, "spec": {"resource": CM, "send": {"mode": "nope"}}}
    got = one(TEAM, module, prod, broken)
    assert [v.watch for v in got.verdicts] == ["team-a"]
    assert got.not_in_force == [
        explain.NotInForce(
            "prod", "the Kyma CR's labels do not match its runtime selector 'env=prod'"
        ),
        explain.NotInForce("serverless", "module serverless is not enabled in the Kyma CR"),
    ]
    assert list(got.invalid) == ["broken"] and "spec.send.mode" in got.invalid["broken"]


def test_a_runtime_at_its_quota_and_the_objects_deliveries() -> None:
    d = delivery.Delta()
    d.record(NOW, "webhook", NOW, "refused", "team-a", "app")
    d.refuse(NOW, "quota_records", 413, "team-a", "app")
    d.record(NOW, "poller", NOW, "persisted", "team-a", "other")
    status = delivery.merge(None, d, "rt-1", NOW)
    status["stored"] = {"records": 200, "recordLimit": 200, "bytes": 1, "byteLimit": 10}
    summary = delivery.summarize(status, NOW)
    got = one(TEAM, summary=summary)
    assert got.quota == (
        "at its quota: 200 of 200 records stored; 1 refused for quota_records in the last hour"
    )
    assert [(r["source"], r["outcome"]) for r in got.deliveries] == [("webhook", "refused")]
    assert [r for r, _ in got.refused] == ["quota_records"]
    assert one(TEAM, summary=delivery.summarize(None, NOW)).quota == ""


@pytest.mark.parametrize(
    ("text", "labels"),
    [("", {}), ("app=shop, tier=web", {"app": "shop", "tier": "web"}), ("a.b/c=", {"a.b/c": ""})],
)
def test_labels_are_parsed(text: str, labels: dict[str, str]) -> None:
    assert explain.parse_labels(text) == labels


@pytest.mark.parametrize("text", ["app", "a=b c", "=x", "a=" + "x" * 64])
def test_bad_labels_are_refused_by_item(text: str) -> None:
    with pytest.raises(ValueError, match="not a label key=value"):
        explain.parse_labels(text)
