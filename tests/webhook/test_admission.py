"""AdmissionReview parsing, and the forwarding decision for the built-in Watch of the
environment's scope (pure)."""

from __future__ import annotations

from typing import Any

import pytest

from testing.webhookapp import review
from tether.wire import conversion, filters
from webhook import admission, scope

FLT = filters.ConfigMapFilter()


def decide(doc: dict[str, Any], flt: filters.ConfigMapFilter = FLT) -> admission.Skip | None:
    """The decision of a runtime without a Watch list: the built-in Watch alone in force."""
    skip, chosen = scope.decide(admission.parse(doc), conversion.in_force(None, flt))
    assert (skip is None) == (chosen == (conversion.builtin(flt),))
    return skip


def test_forward_update_create_delete() -> None:
    for op in ("CREATE", "UPDATE", "DELETE"):
        assert decide(review(op)) is None


def test_queue_item_carries_the_old_resource_version() -> None:
    item = admission.item_of(admission.parse(review("UPDATE")), 1.5)
    assert (item.namespace, item.name, item.uid, item.operation) == (
        "team-a",
        "cfg",
        "u-1",
        "UPDATE",
    )
    assert item.old_resource_version == "41"
    assert admission.item_of(admission.parse(review("CREATE")), 0.0).old_resource_version == ""
    assert admission.item_of(admission.parse(review("DELETE")), 0.0).old_resource_version == "41"


@pytest.mark.parametrize(
    ("doc", "reason"),
    [
        (review(dry_run=True), "dry-run"),
        (review(ns="kube-system"), "not-watched"),
        (review(ns="tether-system"), "not-watched"),
        (review(kind="Secret"), "other-kind"),
        (review("CONNECT"), "other-operation"),
        (review(name=""), "unnamed"),
    ],
)
def test_skips(doc: dict[str, Any], reason: str) -> None:
    assert decide(doc) == reason


def _cm(
    data: dict[str, str] | None = None,
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    binary: dict[str, str] | None = None,
    rv: str = "1",
) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "name": "cfg",
        "namespace": "team-a",
        "resourceVersion": rv,
        "managedFields": [{"time": rv}],
    }
    if labels is not None:
        meta["labels"] = labels
    if annotations is not None:
        meta["annotations"] = annotations
    out: dict[str, Any] = {"metadata": meta}
    if data is not None:
        out["data"] = data
    if binary is not None:
        out["binaryData"] = binary
    return out


def test_no_op_updates_are_not_forwarded() -> None:
    same = review("UPDATE", old=_cm({"k": "v"}, rv="1"), new=_cm({"k": "v"}, rv="1"))
    assert decide(same) == "no-change"
    # absent and empty maps are the same content; other metadata does not count
    assert not scope.object_changed(_cm(None, None), _cm({}, {}, {}, {}, rv="9"))
    assert scope.object_changed(_cm({"k": "v"}), _cm({"k": "w"}))
    assert scope.object_changed(_cm(binary={"b": "AA=="}), _cm(binary={"b": "AQ=="}))
    assert scope.object_changed(_cm(labels={"a": "1"}), _cm(labels={"a": "2"}))
    assert scope.object_changed(_cm(annotations={}), _cm(annotations={"x": "y"}))


def test_label_selector_uses_old_or_new_labels() -> None:
    flt = filters.ConfigMapFilter.build(selector_text="watch=true")
    leaving = review("UPDATE", old=_cm({"k": "v"}, {"watch": "true"}), new=_cm({"k": "v"}, {}))
    assert decide(leaving, flt) is None
    never = review("UPDATE", old=_cm({"k": "1"}, {}), new=_cm({"k": "2"}, {}))
    assert decide(never, flt) == "not-watched"


@pytest.mark.parametrize(
    ("doc", "needle"),
    [
        ([], "JSON object"),
        ({"apiVersion": "v1", "kind": "AdmissionReview", "request": {}}, "apiVersion must be"),
        (
            {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"},
            "request must be an object",
        ),
        (
            {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {"uid": 5}},
            "request.uid",
        ),
        (
            {
                "apiVersion": "admission.k8s.io/v1",
                "kind": "AdmissionReview",
                "request": {
                    "uid": "x",
                    "operation": "CREATE",
                    "kind": {"kind": "ConfigMap"},
                    "object": "str",
                },
            },
            "request.object",
        ),
        (
            {
                "apiVersion": "admission.k8s.io/v1",
                "kind": "AdmissionReview",
                "request": {
                    "uid": "x",
                    "operation": "CREATE",
                    "kind": {"kind": "ConfigMap"},
                    "dryRun": "yes",
                },
            },
            "request.dryRun",
        ),
    ],
)
def test_malformed_reviews_name_the_problem(doc: Any, needle: str) -> None:
    with pytest.raises(admission.ReviewError) as err:
        admission.parse(doc)
    assert any(needle in d for d in err.value.details)


def test_response_allows_with_the_uid() -> None:
    assert admission.response("abc") == {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "response": {"uid": "abc", "allowed": True},
    }


def test_response_bytes_is_the_serialized_response() -> None:
    import json

    for uid in ("abc", 'we"ird\\uid', "ünï"):
        assert json.loads(admission.response_bytes(uid)) == admission.response(uid)
