"""Validation of a POST body (pure): media type, JSON, schema, runtime, record size.

Each check returns either the value or a ``Problem`` carrying the HTTP status, the error
text of the JSON answer, its details and a short reason code (the metric label). The body
size cap itself is enforced while reading (``api``), before anything is parsed.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from collections.abc import Mapping
from typing import Any, NamedTuple

from tether.wire import changes

# A ConfigMap's data + binaryData may hold at most 1 MiB (the API server's limit).
MAX_CONFIGMAP_BYTES = 1024 * 1024
MAX_DEPTH = 32
MAX_BATCH_ITEMS = 500  # the batch schema's maxItems
MAX_OBJECTS = 5 * MAX_BATCH_ITEMS + 16
MAX_ARRAYS = 16
MAX_KEYS = 10_000  # the schema's maxProperties of a map


class Problem(NamedTuple):
    status: int
    error: str
    details: Any
    reason: str


def media_type_ok(content_type: str | None) -> bool:
    """``application/json`` or ``application/*+json``, charset absent or UTF-8."""
    if not content_type:
        return False
    main, *params = (p.strip().lower() for p in content_type.split(";"))
    if main != "application/json" and not (
        main.startswith("application/") and main.endswith("+json")
    ):
        return False
    for p in params:
        k, _, v = p.partition("=")
        if k.strip() == "charset" and v.strip().strip('"') not in ("utf-8", "utf8"):
            return False
    return True


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def _depth(doc: Any, limit: int) -> bool:
    """Whether nesting stays within ``limit`` (iterative, one iterator per level: memory
    grows with the depth, never with the number of elements)."""
    stack = [iter((doc,))]
    while stack:
        node = next(stack[-1], _END)
        if node is _END:
            stack.pop()
        elif isinstance(node, dict | list):
            if len(stack) >= limit:
                return False
            stack.append(iter(node.values() if isinstance(node, dict) else node))
    return True


_END = object()
# possessive repeats: a long string is one scan in constant memory (no backtracking state)
_TOKENS = re.compile(rb'"[^"\\]*+(?:\\.[^"\\]*+)*+"|\[')


def _arrays_within(raw: bytes, limit: int) -> bool:
    """Whether the body has at most ``limit`` JSON arrays (a valid body has one: a batch's
    ``items``). Checked on the bytes before parsing: a body of empty arrays would make a
    million lists (~25x its size). Brackets inside strings do not count; the exact scan
    runs only when the plain count of ``[`` is over the limit."""
    if raw.count(b"[") <= limit:
        return True
    arrays = 0
    for m in _TOKENS.finditer(raw):
        if m.group() == b"[":
            arrays += 1
            if arrays > limit:
                return False
    return True


class _TooManyObjects(Exception):
    pass


def _counting_pairs_hook(limit: int) -> Any:
    """An ``object_pairs_hook`` that stops the parse at the ``limit``-th JSON object: a
    valid body holds at most 5 objects per record (record, labels, annotations, data,
    binaryData), while a body of empty objects would make a million dicts (~25x its size)."""
    count = [0]

    def hook(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        count[0] += 1
        if count[0] > limit or len(pairs) > MAX_KEYS:
            raise _TooManyObjects
        return dict(pairs)

    return hook


def parse_json(raw: bytes) -> Any | Problem:
    """The parsed body or a Problem. Memory: the caller reserves ``len(raw)`` times
    ``settings.PARSE_AMPLIFICATION`` first (``listener.edge.budget``); objects are counted while
    parsing (``MAX_OBJECTS``) and nesting is bounded (``MAX_DEPTH``)."""
    if not _arrays_within(raw, MAX_ARRAYS):
        return Problem(
            400,
            "schema violation",
            [
                {
                    "path": "$",
                    "message": f"more than {MAX_ARRAYS} JSON arrays (only a batch's "
                    "items is an array)",
                }
            ],
            "schema",
        )
    try:
        text = raw.decode("utf-8")
        doc = json.loads(
            text,
            parse_constant=_reject_constant,
            object_pairs_hook=_counting_pairs_hook(MAX_OBJECTS),
        )
    except _TooManyObjects:
        return Problem(
            400,
            "schema violation",
            [
                {
                    "path": "$",
                    "message": f"more than {MAX_OBJECTS} JSON objects (a batch holds at "
                    f"most {MAX_BATCH_ITEMS} records) or more than "
                    f"{MAX_KEYS} keys in one",
                }
            ],
            "schema",
        )
    except UnicodeDecodeError:
        return Problem(
            400, "invalid JSON", [{"path": "$", "message": "body is not UTF-8"}], "invalid_json"
        )
    except RecursionError:
        return Problem(
            400, "invalid JSON", [{"path": "$", "message": "nested too deeply"}], "invalid_json"
        )
    except ValueError as e:
        msg = str(e) if isinstance(e, json.JSONDecodeError) else "invalid constant"
        return Problem(400, "invalid JSON", [{"path": "$", "message": msg[:200]}], "invalid_json")
    if not _depth(doc, MAX_DEPTH):
        return Problem(
            400, "invalid JSON", [{"path": "$", "message": "nested too deeply"}], "invalid_json"
        )
    return doc


def content_bytes(record: Mapping[str, Any]) -> int:
    """The size the API server counts for a ConfigMap: keys and values of ``data`` plus keys
    and decoded values of ``binaryData``."""
    total = 0
    for k, v in (record.get("data") or {}).items():
        total += len(k.encode()) + len(v.encode())
    for k, v in (record.get("binaryData") or {}).items():
        try:
            total += len(k.encode()) + len(base64.b64decode(v, validate=True))
        except (binascii.Error, ValueError):
            total += len(k.encode()) + len(v)
    return total


def records(doc: Any, runtime_id: str) -> list[changes.ChangeRecord] | Problem:
    """The records of a parsed body, or the first problem found."""
    if not isinstance(doc, dict):
        return Problem(
            400,
            "schema violation",
            [{"path": "$", "message": "body must be a JSON object"}],
            "schema",
        )
    is_batch = doc.get("kind") in changes.LIST_KINDS  # v1 or v2 (changes.schema_version)
    violations = changes.validate_batch(doc) if is_batch else changes.validate_record(doc)
    if violations:
        return Problem(
            400,
            "schema violation",
            [{"path": v.path, "message": v.message} for v in violations],
            "schema",
        )
    recs = list(changes.records_of(doc))
    prefix = "$.items[{}]" if is_batch else "$"
    wrong = [
        prefix.format(i) + ".runtimeId" for i, r in enumerate(recs) if r["runtimeId"] != runtime_id
    ]
    if wrong:
        return Problem(
            403,
            "runtimeId mismatch",
            [{"path": p, "message": "must equal the runtime ID of the URL"} for p in wrong[:20]],
            "runtime_id_mismatch",
        )
    big = [prefix.format(i) for i, r in enumerate(recs) if content_bytes(r) > MAX_CONFIGMAP_BYTES]
    if big:
        return Problem(
            413,
            "record too large",
            [{"path": p, "message": "data and binaryData exceed 1 MiB"} for p in big[:20]],
            "record_too_large",
        )
    return recs
