"""JSON answers: every error is ``{"error": <short text>, "details": <any>}``."""

from __future__ import annotations

from typing import Any

from flask import Response, jsonify


def error(status: int, text: str, details: Any = None, *,
          retry_after: int | None = None) -> Response:
    resp = jsonify({"error": text, "details": details})
    resp.status_code = status
    if retry_after is not None:
        resp.headers["Retry-After"] = str(retry_after)
    return resp


def ok(body: Any) -> Response:
    resp = jsonify(body)
    resp.status_code = 200
    return resp
