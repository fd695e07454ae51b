"""The OpenAPI 3.1 document of the listener, generated from the shared JSON Schemas.

The record and batch schemas are read from ``tether/wire/schemas/`` (the single source); their
``$defs`` are hoisted into ``components/schemas`` and every ``$ref`` rewritten to point
there, so OpenAPI tools need not resolve ``$id``. The rest (answers, errors) is defined
here. ``listener/openapi.json`` is this document, committed and served at
``/openapi.json``; a test checks that it is up to date. Regenerate with:

    .venv/bin/python -m listener.edge.openapi > listener/openapi.json
"""

from __future__ import annotations

import json
import pathlib
import sys
from typing import Any

from listener.edge import watchstatedoc
from tether.wire import changes

OPENAPI_FILE = pathlib.Path(__file__).parent.parent / "openapi.json"
RECORD_FILE, BATCH_FILE = "change-record.v1.json", "change-batch.v1.json"
RECORD_FILE_V2, BATCH_FILE_V2 = "change-record.v2.json", "change-batch.v2.json"
REF = "#/components/schemas/"


def _pascal(name: str) -> str:
    return name[:1].upper() + name[1:]


def _rewrite(node: Any, refs: dict[str, str]) -> Any:
    if isinstance(node, dict):
        out = {}
        for k, v in node.items():
            if k in ("$schema", "$id", "$defs"):
                continue
            out[k] = refs[v] if k == "$ref" and v in refs else _rewrite(v, refs)
        return out
    if isinstance(node, list):
        return [_rewrite(v, refs) for v in node]
    return node


def shared_schemas() -> dict[str, Any]:
    """The shared schemas as OpenAPI components (generated, never edited by hand): v1
    (ConfigMapChange) and v2 (ObjectChange), whose ``$defs`` are the same."""
    out: dict[str, Any] = {}
    for record_file, batch_file, kind in (
        (RECORD_FILE, BATCH_FILE, changes.KIND),
        (RECORD_FILE_V2, BATCH_FILE_V2, changes.KIND_V2),
    ):
        record = changes.load_schema(record_file)
        batch = changes.load_schema(batch_file)
        refs = {f"#/$defs/{d}": REF + _pascal(d) for d in record.get("$defs", {})}
        refs[record_file] = refs[record["$id"]] = REF + kind
        out.update({_pascal(d): _rewrite(s, refs) for d, s in record.get("$defs", {}).items()})
        out[kind] = _rewrite(record, refs)
        out[kind + "List"] = _rewrite(batch, refs)
    return out


def _error(description: str, retry_after: bool = False) -> dict[str, Any]:
    resp: dict[str, Any] = {
        "description": description,
        "content": {"application/json": {"schema": {"$ref": REF + "Error"}}},
    }
    if retry_after:
        resp["headers"] = {
            "Retry-After": {
                "description": "Seconds to wait before retrying",
                "schema": {"type": "integer", "minimum": 1},
            }
        }
    return resp


def _epoch(description: str) -> dict[str, Any]:
    return {"type": "integer", "minimum": 0, "description": description}


def _own_schemas() -> dict[str, Any]:
    return {**_record_schemas(), **_summary_schemas(), **watchstatedoc.schemas()}


def _record_schemas() -> dict[str, Any]:
    """The changes and the state digest."""
    rv = {"type": "string"}
    return {
        "Error": {
            "type": "object",
            "required": ["error", "details"],
            "properties": {
                "error": {"type": "string", "description": "Short, code-like text"},
                "details": {
                    "description": "Null, a text, an object with reason and message, or "
                    "a list of {path, message} (validation)"
                },
            },
        },
        "ChangeRequest": {
            "oneOf": [
                {"$ref": REF + "ConfigMapChange"},
                {"$ref": REF + "ConfigMapChangeList"},
                {"$ref": REF + "ObjectChange"},
                {"$ref": REF + "ObjectChangeList"},
            ]
        },
        "ChangeResult": {
            "type": "object",
            "required": ["namespace", "name", "resourceVersion", "outcome"],
            "properties": {
                "namespace": {"type": "string"},
                "name": {"type": "string"},
                "resourceVersion": rv,
                "outcome": {"enum": ["persisted", "duplicate", "stale"]},
            },
        },
        "ChangeResults": {
            "type": "object",
            "required": ["results"],
            "properties": {
                "results": {
                    "type": "array",
                    "items": {"$ref": REF + "ChangeResult"},
                    "description": "One per record, in the order of the request",
                },
                "epoch": _epoch(
                    "The runtime's current epoch, as this listener knew it (records "
                    "without an epoch were given it); senders tag later records "
                    "with it"
                ),
            },
        },
        "DigestItem": {
            "type": "object",
            "required": ["namespace", "name", "uid", "resourceVersion", "observedAt", "deleted"],
            "properties": {
                "namespace": {"type": "string"},
                "name": {"type": "string"},
                "uid": {"type": "string"},
                "resourceVersion": rv,
                "observedAt": {"type": "string"},
                "deleted": {"type": "boolean"},
                "epoch": _epoch("The stored record's epoch (0 for records stored before epochs)"),
            },
        },
        "StateDigest": {
            "type": "object",
            "required": ["items", "continue"],
            "properties": {
                "items": {"type": "array", "items": {"$ref": REF + "DigestItem"}},
                "continue": {
                    "type": "string",
                    "description": "Token of the next page; empty at the end",
                },
                "epoch": _epoch(
                    "The runtime's current epoch (after the report of a first page): "
                    "records of a lower epoch lose to any of this one"
                ),
            },
        },
        "Status": {"type": "object", "properties": {"status": {"type": "string"}}},
    }


def _summary_schemas() -> dict[str, Any]:
    """The state summary and its buckets."""
    return {
        "Hash64": {
            "type": "string",
            "pattern": "^[0-9a-f]{16}$",
            "description": "A 64-bit hash as 16 lower-case hex digits (tether/wire/statehash.py)",
        },
        "StateSummary": {
            "type": "object",
            "required": ["bucketCount", "hashes", "counts"],
            "description": "The runtime's stored records folded into buckets: bucket = first 4 "
            "bytes of SHA-256(namespace NUL name) mod bucketCount; a bucket's "
            "hash is the XOR of the first 8 bytes of SHA-256(namespace NUL name "
            "NUL resourceVersion NUL epoch) over its live records (tombstones "
            "count as absent)",
            "properties": {
                "bucketCount": {"type": "integer", "const": 256},
                "epoch": {
                    "type": "integer",
                    "minimum": 0,
                    "description": "The runtime's current epoch, which the poller "
                    "hashes its objects with",
                },
                "hashes": {
                    "type": "array",
                    "items": {"$ref": REF + "Hash64"},
                    "minItems": 256,
                    "maxItems": 256,
                },
                "counts": {
                    "type": "array",
                    "minItems": 256,
                    "maxItems": 256,
                    "items": {"type": "integer", "minimum": -1},
                    "description": "Live records per bucket; -1: not known, list the bucket",
                },
            },
        },
        "StateBucket": {
            "type": "object",
            "required": ["bucket", "hash", "count", "items"],
            "properties": {
                "bucket": {"type": "integer", "minimum": 0, "maximum": 255},
                "hash": {"$ref": REF + "Hash64"},
                "count": {"type": "integer", "minimum": 0},
                "items": {
                    "type": "array",
                    "items": {"$ref": REF + "DigestItem"},
                    "description": "Every stored record of the bucket (tombstones too), "
                    "ordered by (namespace, name)",
                },
            },
        },
    }


def _runtime_param() -> dict[str, Any]:
    return {
        "name": "runtimeId",
        "in": "path",
        "required": True,
        "description": "The runtime ID: the CN of the client certificate and the "
        "kyma-project.io/runtime-id label of the runtime's Kyma CR",
        "schema": {"$ref": REF + "RuntimeId"},
    }


def _refusals() -> dict[str, Any]:
    return {
        "401": _error("No valid client certificate"),
        "403": _error(
            "Certificate CN/SAN does not match the runtime, unknown runtime, Kyma CR "
            "being deleted, or a record's runtimeId differs from the path"
        ),
        "414": {
            "description": "Request line over the server's limit (4094 bytes, gunicorn's "
            "limit_request_line), e.g. a long continue token; a plain "
            "text or HTML answer of the HTTP server",
            "content": {"text/html": {"schema": {"type": "string"}}},
        },
        "431": {
            "description": "Request head over the server's limit (64 KiB, "
            "tether.http.httpworker); an empty answer, then the connection closes"
        },
        "429": _error("Rate limited (per runtime, or too many requests in flight)", True),
        "503": _error(
            "KCP API unavailable, or the listener's parse memory budget is spent; "
            "nothing was acknowledged that is not persisted",
            True,
        ),
    }


def _changes_path() -> dict[str, Any]:
    """POST changes."""
    return {
        "/v1/runtimes/{runtimeId}/changes": {
            "post": {
                "operationId": "postChanges",
                "summary": "Persist one change record or a batch (each applied only if newer)",
                "parameters": [
                    _runtime_param(),
                    {
                        "name": "traceparent",
                        "in": "header",
                        "required": False,
                        "description": "W3C trace context of the request "
                        "(tether.base.tracing): the "
                        "listener starts its own trace and links this one (its trace "
                        "ID is logged as runtime_trace_id with each record); absent "
                        "or malformed: no link, never a refusal",
                        "schema": {"type": "string", "maxLength": 512},
                    },
                ],
                "requestBody": {
                    "required": True,
                    "content": {"application/json": {"schema": {"$ref": REF + "ChangeRequest"}}},
                },
                "responses": {
                    "200": {
                        "description": "Every record persisted, or already stored "
                        "(duplicate), or older than the stored one (stale)",
                        "content": {
                            "application/json": {"schema": {"$ref": REF + "ChangeResults"}}
                        },
                        "links": {
                            "GetState": {
                                "operationId": "getState",
                                "parameters": {"runtimeId": "$request.path.runtimeId"},
                                "description": "The runtime's state digest now holds these "
                                "records (or newer ones)",
                            }
                        },
                    },
                    "400": _error(
                        "Invalid JSON or schema violation (details: list of {path, message})"
                    ),
                    **_refusals(),
                    "408": _error("The body did not arrive within the body deadline"),
                    "413": _error(
                        "Body over the size cap (default 3 MiB), a record's data "
                        "over 1 MiB, or a new record over the runtime's storage "
                        "quota (error 'exceeded quota')"
                    ),
                    "409": _error(
                        "A record names an epoch above the runtime's current one "
                        "(details: reason 'future_epoch', message, epoch: the "
                        "current one); only the listener starts epochs"
                    ),
                    "415": _error("Content-Type is not application/json"),
                    "403": _error(
                        "Certificate CN/SAN does not match the runtime, unknown runtime, "
                        "Kyma CR being deleted, a record's runtimeId differs from the "
                        "path, or a record no Watch in force for the runtime admits "
                        "(error 'refused by the watches'; details: reason and message "
                        "of the first, records: a list of {path, reason, message}; "
                        "reasons watch_not_in_force, no_compat_watch, watch_violation); "
                        "nothing of the request is stored"
                    ),
                },
            }
        },
    }


def _state_path() -> dict[str, Any]:
    """GET state: the digest, by pages."""
    return {
        "/v1/runtimes/{runtimeId}/state": {
            "get": {
                "operationId": "getState",
                "summary": "The stored state digest of the runtime, ordered by (namespace, "
                "name); every call counts as the runtime's heartbeat",
                "parameters": [
                    _runtime_param(),
                    {
                        "name": "watch",
                        "in": "query",
                        "required": False,
                        "description": "The Watch whose records are listed (in force for the "
                        "runtime); absent: the runtime's compat Watch (the first by "
                        "name that covers ConfigMap v1 in mode full)",
                        "schema": {"type": "string", "maxLength": 63},
                    },
                    {
                        "name": "limit",
                        "in": "query",
                        "required": False,
                        "schema": {
                            "type": "integer",
                            "minimum": 1,
                            "maximum": 5000,
                            "default": 500,
                        },
                    },
                    {
                        "name": "continue",
                        "in": "query",
                        "required": False,
                        "schema": {"type": "string", "maxLength": 1024},
                    },
                    {
                        "name": "identity",
                        "in": "query",
                        "required": False,
                        "description": "First page only: the runtime's identity (the UID of its "
                        "kube-system Namespace). A different one than recorded "
                        "starts a new epoch (the cluster was rebuilt)",
                        "schema": {"type": "string", "maxLength": 128, "pattern": "^[!-~]*$"},
                    },
                    {
                        "name": "epoch",
                        "in": "query",
                        "required": False,
                        "description": "First page only, with collectionResourceVersion: the "
                        "claim that the runtime's history went back (after reading "
                        "this epoch's digest, a listing came below the highest "
                        "resourceVersion of its records); starts the next epoch "
                        "if this is the current one and the claim holds",
                        "schema": {"type": "integer", "minimum": 0},
                    },
                    {
                        "name": "collectionResourceVersion",
                        "in": "query",
                        "required": False,
                        "description": "The collection resourceVersion of that listing",
                        "schema": {"type": "string", "maxLength": 64, "pattern": "^[0-9]+$"},
                    },
                ],
                "responses": {
                    "200": {
                        "description": "One page of the digest",
                        "content": {"application/json": {"schema": {"$ref": REF + "StateDigest"}}},
                    },
                    "400": _error(
                        "Invalid limit, continue token, identity, epoch or "
                        "collectionResourceVersion"
                    ),
                    **_refusals(),
                    "404": _error(
                        "The Watch named is not in force for the runtime, or (no "
                        "watch named) the runtime has no compat Watch (details: "
                        "reason watch_not_in_force or no_compat_watch, message)"
                    ),
                },
            }
        },
    }


def _summary_paths() -> dict[str, Any]:
    """GET the state summary and one bucket."""
    return {
        "/v1/runtimes/{runtimeId}/state/summary": {
            "get": {
                "operationId": "getStateSummary",
                "summary": "The runtime's stored state as 256 bucket hashes (one KCP read); "
                "counts as the runtime's heartbeat",
                "parameters": [_runtime_param()],
                "responses": {
                    "200": {
                        "description": "The summary",
                        "content": {"application/json": {"schema": {"$ref": REF + "StateSummary"}}},
                    },
                    **_refusals(),
                },
            }
        },
        "/v1/runtimes/{runtimeId}/state/buckets/{bucket}": {
            "get": {
                "operationId": "getStateBucket",
                "summary": "The state digest of one bucket, listed from the KCP (a summary "
                "that disagrees is corrected); counts as the runtime's heartbeat",
                "parameters": [
                    _runtime_param(),
                    {
                        "name": "bucket",
                        "in": "path",
                        "required": True,
                        "schema": {"type": "integer", "minimum": 0, "maximum": 255},
                    },
                ],
                "responses": {
                    "200": {
                        "description": "The bucket's digest",
                        "content": {"application/json": {"schema": {"$ref": REF + "StateBucket"}}},
                    },
                    "400": _error("Not a bucket number"),
                    **_refusals(),
                },
            }
        },
    }


def _operations_paths() -> dict[str, Any]:
    """Liveness and this document."""
    return {
        "/healthz": {
            "get": {
                "operationId": "healthz",
                "security": [],
                "summary": "Liveness",
                "responses": {"200": {"description": "The process serves"}},
            }
        },
        "/openapi.json": {
            "get": {
                "operationId": "openapi",
                "security": [],
                "summary": "This document",
                "responses": {"200": {"description": "OpenAPI 3.1 document"}},
            }
        },
    }


def document() -> dict[str, Any]:
    schemas = {**shared_schemas(), **_own_schemas()}
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "Tether listener",
            "version": "1.0.0",
            "description": "Receives ConfigMap change records from runtimes (SKR) over "
            "mutual TLS and persists them in the KCP. Generated by "
            "listener/edge/openapi.py from tether/wire/schemas/.",
        },
        "security": [{"runtimeCertificate": []}],
        "paths": {
            **_changes_path(),
            **_state_path(),
            **_summary_paths(),
            **watchstatedoc.paths(_runtime_param, _refusals, _error),
            **_operations_paths(),
        },
        "components": {
            "securitySchemes": {
                "runtimeCertificate": {
                    "type": "mutualTLS",
                    "description": "A client certificate issued by the KCP runtime CA: "
                    "CN = runtime ID, a DNS SAN = the skr-domain annotation of the Kyma CR",
                }
            },
            "schemas": schemas,
        },
    }


def render() -> str:
    return json.dumps(document(), indent=2, sort_keys=True) + "\n"


if __name__ == "__main__":
    sys.stdout.write(render())
