"""The compiled acceptance check of the record and batch schemas (tether.wire.schemaaccept.acceptor)
against the validators it shortcuts: it must never accept what they refuse, and it must
accept the records senders really send (or the shortcut would never be taken)."""

from __future__ import annotations

import copy
from typing import Any

import hypothesis
import pytest
from hypothesis import strategies as st

from tether.wire import changes, conversion, schemaaccept, schemacheck

V = changes._validators()  # noqa: SLF001 - the pair under test: acceptor and validator

json_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**60), 2**60),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=12),
)
json_values = st.recursive(
    json_scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=6,
)
# texts near the patterns' edges: DNS labels, upper case, dots, newlines, non-ASCII digits
edgy = st.text(alphabet="az09-._AZ/\n \u0663=+", max_size=70)
times = st.one_of(
    st.sampled_from(
        [
            "2026-01-31T23:59:59Z",
            "2026-02-30T00:00:00Z",
            "2026-13-01T00:00:00Z",
            "2026-01-01T00:00:00.123456789Z",
            "2026-01-01T00:00:00.1234567890Z",
            "2026-01-01T24:00:00Z",
            "2026-01-01T00:00:00+00:00",
            "2026-01-01T00:00:00Z\n",
            "2024-02-29T12:00:00Z",
            "2025-02-29T12:00:00Z",
        ]
    ),
    st.text(max_size=30),
)


def record(**over: Any) -> dict[str, Any]:
    base = dict(
        conversion.from_configmap(
            {
                "metadata": {
                    "namespace": "team-a",
                    "name": "cm.v1-x",
                    "uid": "u-1",
                    "resourceVersion": "42",
                    "labels": {"app.kubernetes.io/name": "x"},
                    "annotations": {"a": "b"},
                },
                "data": {"k": "v", "k.2": ""},
                "binaryData": {"b": "AAE="},
            },
            runtime_id="rt-1",
            source="webhook",
        )
    )
    base["epoch"] = 3
    base.update(over)
    return base


FIELDS = [
    "apiVersion",
    "kind",
    "runtimeId",
    "namespace",
    "name",
    "uid",
    "resourceVersion",
    "observedAt",
    "deleted",
    "source",
    "epoch",
    "labels",
    "annotations",
    "data",
    "binaryData",
    "extra",
]


@st.composite
def mutated(draw: st.DrawFn) -> Any:
    doc: Any = record()
    for _ in range(draw(st.integers(1, 3))):
        field = draw(st.sampled_from(FIELDS))
        how = draw(st.sampled_from(["drop", "value", "edgy", "time", "map", "deleted"]))
        if how == "drop":
            doc.pop(field, None)
        elif how == "value":
            doc[field] = draw(json_values)
        elif how == "edgy":
            doc[field] = draw(edgy)
        elif how == "time":
            doc[field] = draw(times)
        elif how == "map":
            doc[field] = draw(st.dictionaries(edgy, st.one_of(edgy, json_scalars), max_size=3))
        else:
            doc["deleted"] = True
    if draw(st.booleans()):
        doc = draw(st.sampled_from([doc, [doc], changes.batch([doc]), "x", 5, None]))
    return doc


def refused(doc: Any) -> bool:
    return bool(schemacheck.violations(V.record, doc, 5))


@hypothesis.settings(max_examples=3000, deadline=None, database=None)
@hypothesis.given(mutated())
def test_the_acceptor_never_accepts_what_the_record_validator_refuses(doc: Any) -> None:
    if V.record_ok(doc):
        assert not refused(doc), doc


@hypothesis.settings(max_examples=500, deadline=None, database=None)
@hypothesis.given(
    st.lists(mutated(), min_size=0, max_size=4),
    st.sampled_from(["tether.kyma-project.io/v1", "v1", 1]),
    st.sampled_from(["ConfigMapChangeList", "x"]),
)
def test_the_acceptor_never_accepts_a_batch_the_validators_refuse(
    items: list[Any], api: Any, kind: Any
) -> None:
    doc = {"apiVersion": api, "kind": kind, "items": items}
    fast = V.envelope_ok(doc) and all(V.record_ok(i) for i in items)
    if fast:
        assert changes.validate_batch(copy.deepcopy(doc)) == []
        assert not schemacheck.violations(V.envelope, doc) and not any(map(refused, items))


@hypothesis.settings(max_examples=500, deadline=None, database=None)
@hypothesis.given(
    ns=st.from_regex(r"\A[a-z0-9]([-a-z0-9]{0,20}[a-z0-9])?\Z"),
    name=st.from_regex(r"\A[a-z0-9]([-a-z0-9]{0,8}[a-z0-9])?(\.[a-z0-9]{1,5}){0,3}\Z"),
    rv=st.integers(1, 10**12).map(str),
    deleted=st.booleans(),
    data=st.dictionaries(
        st.from_regex(r"\A[-._a-zA-Z0-9]{1,20}\Z"), st.text(max_size=20), max_size=5
    ),
    epoch=st.one_of(st.none(), st.integers(0, 2**53 - 1)),
)
def test_what_senders_send_takes_the_shortcut(
    ns: str, name: str, rv: str, deleted: bool, data: dict[str, str], epoch: int | None
) -> None:
    obj = {
        "metadata": {"namespace": ns, "name": name, "uid": "u", "resourceVersion": rv},
        "data": data,
    }
    rec: Any = dict(
        conversion.tombstone(
            runtime_id="rt-1",
            namespace=ns,
            name=name,
            uid="u",
            resource_version=rv,
            source="poller",
        )
        if deleted
        else conversion.from_configmap(obj, runtime_id="rt-1", source="webhook")
    )
    if epoch is not None:
        rec["epoch"] = epoch
    assert not refused(rec)
    assert V.record_ok(rec)


def test_known_refusals_are_refused_by_both() -> None:
    for bad in (
        record(namespace="Team"),
        record(name="a\n"),
        record(resourceVersion=7),
        record(epoch=True),
        record(epoch=-1),
        record(deleted=True),
        record(observedAt="2026-02-30T00:00:00Z"),
        record(data={"k": 1}),
        record(extra=1),
        {k: v for k, v in record().items() if k != "uid"},
        record(source="cron"),
        record(binaryData={"b": "not base64!"}),
    ):
        assert not V.record_ok(bad) and refused(bad), bad
    # stricter than the validator, which is safe: the validator then decides
    lenient = record(epoch=3.0)
    assert not V.record_ok(lenient) and not refused(lenient)
    assert changes.validate_record(lenient) == []


def test_a_keyword_it_does_not_compile_is_refused_at_once() -> None:
    for schema in (
        {"oneOf": [{"type": "string"}]},
        {"type": "object", "if": {"type": "object"}, "then": {}},
        {"$ref": "other.json"},
        {"format": "email"},
        {"const": {"a": 1}},
    ):
        with pytest.raises(ValueError):
            schemaaccept.acceptor(schema, lambda s: s)
