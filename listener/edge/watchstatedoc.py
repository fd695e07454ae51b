"""The OpenAPI paths of the per-Watch state API (``listener.edge.watchstate``), for
``listener.edge.openapi`` (pure data)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

REF = "#/components/schemas/"


def _watch_param() -> dict[str, Any]:
    return {
        "name": "watch",
        "in": "path",
        "required": True,
        "description": "A Watch in force for the runtime",
        "schema": {"type": "string", "maxLength": 63},
    }


def schemas() -> dict[str, Any]:
    """The per-Watch summary and bucket: the runtime's ones with the Watch's name."""
    return {
        "WatchStateSummary": {
            "allOf": [
                {"$ref": REF + "StateSummary"},
                {
                    "type": "object",
                    "required": ["watch"],
                    "properties": {"watch": {"type": "string"}},
                },
            ],
            "description": "The StateSummary of the runtime's records of one Watch",
        },
        "WatchStateBucket": {
            "allOf": [
                {"$ref": REF + "StateBucket"},
                {
                    "type": "object",
                    "required": ["watch"],
                    "properties": {"watch": {"type": "string"}},
                },
            ],
            "description": "The StateBucket of the runtime's records of one Watch",
        },
    }


def paths(
    runtime_param: Callable[[], dict[str, Any]],
    refusals: Callable[[], dict[str, Any]],
    error: Callable[[str], dict[str, Any]],
) -> dict[str, Any]:
    """GET a Watch's summary and one of its buckets."""
    not_in_force = error(
        "The Watch is not in force for the runtime (details: reason watch_not_in_force); "
        "a listener before per-Watch summaries answers 404 too"
    )
    return {
        "/v1/runtimes/{runtimeId}/watches/{watch}/summary": {
            "get": {
                "operationId": "getWatchStateSummary",
                "summary": "The runtime's stored records of one Watch as 256 bucket hashes "
                "(from the listener pod's watch-fed view: no KCP read); counts as the "
                "runtime's heartbeat",
                "parameters": [
                    runtime_param(),
                    _watch_param(),
                    {
                        "name": "identity",
                        "in": "query",
                        "required": False,
                        "description": "The runtime's identity (the UID of its kube-system "
                        "Namespace); a different one than recorded starts a new epoch",
                        "schema": {"type": "string", "maxLength": 128, "pattern": "^[!-~]*$"},
                    },
                ],
                "responses": {
                    "200": {
                        "description": "The Watch's summary",
                        "content": {
                            "application/json": {"schema": {"$ref": REF + "WatchStateSummary"}}
                        },
                    },
                    "400": error("Invalid identity, or an epoch claim (it goes with the state)"),
                    **refusals(),
                    "404": not_in_force,
                },
            }
        },
        "/v1/runtimes/{runtimeId}/watches/{watch}/buckets/{bucket}": {
            "get": {
                "operationId": "getWatchStateBucket",
                "summary": "The digest of one bucket of the runtime's records of one Watch; "
                "counts as the runtime's heartbeat",
                "parameters": [
                    runtime_param(),
                    _watch_param(),
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
                        "content": {
                            "application/json": {"schema": {"$ref": REF + "WatchStateBucket"}}
                        },
                    },
                    "400": error("Not a bucket number"),
                    **refusals(),
                    "404": not_in_force,
                },
            }
        },
    }
