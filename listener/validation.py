"""Validation of a POST body (pure): media type, JSON, schema, runtime, record size.

Each check returns either the value or a ``Problem`` carrying the HTTP status, the error
text of the JSON answer, its details and a short reason code (the metric label). The body
size cap itself is enforced while reading (``api``), before anything is parsed.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Mapping
from typing import Any, NamedTuple

from common import changes

# A ConfigMap's data + binaryData may hold at most 1 MiB (the API server's limit).
MAX_CONFIGMAP_BYTES = 1024 * 1024
MAX_DEPTH = 32


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
    if main != "application/json" and not (main.startswith("application/") and main.endswith("+json")):
        return False
    for p in params:
        k, _, v = p.partition("=")
        if k.strip() == "charset" and v.strip().strip('"') not in ("utf-8", "utf8"):
            return False
    return True


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def _depth(doc: Any, limit: int) -> bool:
    """Whether nesting stays within ``limit`` (iterative; no recursion on hostile input)."""
    stack = [(doc, 1)]
    while stack:
        node, d = stack.pop()
        if d > limit:
            return False
        if isinstance(node, dict):
            stack.extend((v, d + 1) for v in node.values())
        elif isinstance(node, list):
            stack.extend((v, d + 1) for v in node)
    return True


def parse_json(raw: bytes) -> Any | Problem:
    try:
        text = raw.decode("utf-8")
        doc = json.loads(text, parse_constant=_reject_constant)
    except UnicodeDecodeError:
        return Problem(400, "invalid JSON", [{"path": "$", "message": "body is not UTF-8"}],
                       "invalid_json")
    except RecursionError:
        return Problem(400, "invalid JSON", [{"path": "$", "message": "nested too deeply"}],
                       "invalid_json")
    except ValueError as e:
        msg = str(e) if isinstance(e, json.JSONDecodeError) else "invalid constant"
        return Problem(400, "invalid JSON", [{"path": "$", "message": msg[:200]}], "invalid_json")
    if not _depth(doc, MAX_DEPTH):
        return Problem(400, "invalid JSON", [{"path": "$", "message": "nested too deeply"}],
                       "invalid_json")
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
        return Problem(400, "schema violation",
                       [{"path": "$", "message": "body must be a JSON object"}], "schema")
    is_batch = doc.get("kind") == changes.LIST_KIND
    violations = changes.validate_batch(doc) if is_batch else changes.validate_record(doc)
    if violations:
        return Problem(400, "schema violation",
                       [{"path": v.path, "message": v.message} for v in violations], "schema")
    recs = list(changes.records_of(doc))
    prefix = "$.items[{}]" if is_batch else "$"
    wrong = [prefix.format(i) + ".runtimeId" for i, r in enumerate(recs)
             if r["runtimeId"] != runtime_id]
    if wrong:
        return Problem(403, "runtimeId mismatch",
                       [{"path": p, "message": "must equal the runtime ID of the URL"}
                        for p in wrong[:20]], "runtime_id_mismatch")
    big = [prefix.format(i) for i, r in enumerate(recs) if content_bytes(r) > MAX_CONFIGMAP_BYTES]
    if big:
        return Problem(413, "record too large",
                       [{"path": p, "message": "data and binaryData exceed 1 MiB"}
                        for p in big[:20]], "record_too_large")
    return recs
