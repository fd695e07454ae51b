"""Validation has bounded memory whatever the body's shape (issue 9, part 2).

Each hostile shape is a body of about 3 MiB (the listener's default cap), parsed first
(parsing is bounded separately, by the parse memory budget around it); then
``listener.edge.validation.records`` must answer the right problem with its own peak memory
(tracemalloc, Python allocations made during validation) far below the body's parsed size.
Once, a 3 MiB batch of empty objects made the validator build millions of errors (23 GB).
"""

from __future__ import annotations

import json
import tracemalloc
from collections.abc import Callable
from typing import Any

import pytest

from listener.edge import validation
from tether.wire import changes, conversion

RID = "rt-1"
BODY = 3 * 1024 * 1024
PEAK_LIMIT = 8 * 1024 * 1024  # bytes: well under the worker's share of its 768 Mi limit
T0 = "2026-11-30T10:00:00.123456Z"


def record(**over: Any) -> dict[str, Any]:
    rec: dict[str, Any] = dict(
        conversion.from_configmap(
            {
                "metadata": {
                    "namespace": "team-a",
                    "name": "c",
                    "uid": "u",
                    "resourceVersion": "1",
                },
                "data": {"k": "v"},
            },
            runtime_id=RID,
            source="poller",
            observed_at=T0,
        )
    )
    rec.update(over)
    return rec


def envelope(items: str) -> bytes:
    return (
        '{"apiVersion":"tether.kyma-project.io/v1","kind":"ConfigMapChangeList","items":'
        + items
        + "}"
    ).encode()


def empty_objects(n: int) -> bytes:
    return envelope("[" + ",".join(["{}"] * n) + "]")


def huge_item_list() -> bytes:
    return empty_objects((BODY - 100) // 3)  # about a million items


def items_that_are_empty_objects() -> bytes:
    return empty_objects(500)  # as many as allowed, each with ten missing properties


def map_with_many_keys() -> bytes:
    data = {f"k{i}": "" for i in range(100_000)}
    return json.dumps(record(data=data)).encode()


def many_unknown_properties() -> bytes:
    rec = record()
    rec.update({f"x{i}": 0 for i in range(200_000)})
    return json.dumps(rec).encode()


def deep_nesting() -> bytes:
    value: Any = "x"
    for _ in range(validation.MAX_DEPTH - 3):  # as deep as parse_json lets through
        value = {"k": value}
    wide = {f"k{i}": value for i in range(9000)}  # within maxProperties
    return json.dumps(record(data=wide)).encode()


def long_strings() -> bytes:
    big = "é" * (BODY // 10)
    return json.dumps(
        record(namespace=big, name=big, uid=big, resourceVersion=big), ensure_ascii=False
    ).encode()


def long_keys_in_error_paths() -> bytes:
    return json.dumps(
        record(data={"ä" * (BODY // 5): 1, "ö" * (BODY // 5): 2}), ensure_ascii=False
    ).encode()


def items_with_bad_maps() -> bytes:
    item = record(data={f"k\n{i}": i for i in range(600)})
    one = json.dumps(item)
    n = BODY // len(one)
    return envelope("[" + ",".join([one] * min(n, 500)) + "]")


SHAPES: list[tuple[Callable[[], bytes], int, str, str]] = [
    # shape, status, reason, a text the first detail must hold
    (huge_item_list, 400, "schema", "at most 500"),
    (items_that_are_empty_objects, 400, "schema", "required property"),
    (map_with_many_keys, 400, "schema", "at most 10000"),
    (many_unknown_properties, 400, "schema", "unknown properties"),
    (deep_nesting, 400, "schema", "is not of type 'string'"),
    (long_strings, 400, "schema", "characters"),
    (long_keys_in_error_paths, 400, "schema", ""),
    (items_with_bad_maps, 400, "schema", ""),
]


def measure(doc: Any) -> tuple[Any, int]:
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        result = validation.records(doc, RID)
        return result, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


@pytest.mark.parametrize(
    ("shape", "status", "reason", "text"), SHAPES, ids=[s[0].__name__ for s in SHAPES]
)
def test_hostile_shape(shape: Callable[[], bytes], status: int, reason: str, text: str) -> None:
    raw = shape()
    assert len(raw) <= BODY, len(raw)
    # validation must hold its bounds on its own, whatever parse_json lets through (its
    # object, array and key caps refuse several of these shapes earlier; see
    # test_listener_validation.test_parse_json)
    doc = json.loads(raw)
    problem, peak = measure(doc)
    print(
        f"{shape.__name__}: body {len(raw) / 2**20:.2f} MiB, validation peak {peak / 2**20:.3f} MiB"
    )
    assert isinstance(problem, validation.Problem)
    assert (problem.status, problem.reason) == (status, reason)
    assert 1 <= len(problem.details) <= changes.MAX_VIOLATIONS
    assert text in problem.details[0]["message"], problem.details[0]
    assert all(len(d["path"]) <= 200 and len(d["message"]) <= 200 for d in problem.details)
    assert peak < PEAK_LIMIT, f"{shape.__name__}: {peak} bytes"


def test_nesting_beyond_the_limit_is_refused_while_parsing() -> None:
    for raw, reason in (
        (b"[" * 100_000 + b"]" * 100_000, "schema"),  # the array cap, unparsed
        (b'{"a":' * 40 + b"1" + b"}" * 40, "invalid_json"),
    ):
        p = validation.parse_json(raw)
        assert isinstance(p, validation.Problem) and (p.status, p.reason) == (400, reason)


def test_a_valid_full_batch_stays_cheap() -> None:
    doc = changes.batch(
        [
            record(name=f"c{i}", data={"k": "v" * 4000})  # type: ignore[misc]
            for i in range(500)
        ]
    )
    recs, peak = measure(json.loads(json.dumps(doc)))
    assert isinstance(recs, list) and len(recs) == 500
    assert peak < PEAK_LIMIT, peak
