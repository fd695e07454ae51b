"""AdmissionReview (admission.k8s.io/v1) parsing and the forwarding decision (pure).

``parse`` turns a decoded JSON body into a ``Request`` or raises ``ReviewError`` with
details fit for a 400 answer; ``Skip`` is why a change is not handed to the forwarder (a
short constant, the metric's outcome label; ``webhook.scope.decide`` decides). ``response``
builds the answer: always allowed, with the request's uid.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from typing import Any, Literal

from tether.base import tracing
from tether.wire import conversion, watches
from webhook import keyqueue

API_VERSION = "admission.k8s.io/v1"
OPERATIONS = ("CREATE", "UPDATE", "DELETE")

Skip = Literal[
    "dry-run",
    "no-change",
    "other-kind",
    "other-operation",
    "unnamed",
    "not-watched",
    "watches-unknown",
]


class ReviewError(ValueError):
    """The body is not a usable AdmissionReview; ``details`` lists what is wrong."""

    def __init__(self, details: list[str]) -> None:
        super().__init__("; ".join(details))
        self.details = details


@dataclasses.dataclass(frozen=True)
class Request:
    uid: str
    operation: str
    kind: str
    group: str
    namespace: str
    name: str
    dry_run: bool
    obj: Mapping[str, Any] | None
    old: Mapping[str, Any] | None
    version: str = ""  # of the kind (the object is in that version)
    resource: str = ""  # the plural (request.resource.resource)


def meta(obj: Mapping[str, Any] | None) -> Mapping[str, Any]:
    """An object's metadata ({} when missing or not an object)."""
    return _meta(obj)


def _meta(obj: Mapping[str, Any] | None) -> Mapping[str, Any]:
    meta = (obj or {}).get("metadata")
    return meta if isinstance(meta, Mapping) else {}


def parse(doc: Any) -> Request:
    if not isinstance(doc, dict):
        raise ReviewError(["body must be a JSON object (an AdmissionReview)"])
    problems = []
    if doc.get("apiVersion") != API_VERSION:
        problems.append(f"apiVersion must be {API_VERSION}")
    if doc.get("kind") != "AdmissionReview":
        problems.append("kind must be AdmissionReview")
    req = doc.get("request")
    if not isinstance(req, dict):
        raise ReviewError([*problems, "request must be an object"])
    uid = req.get("uid")
    if not isinstance(uid, str) or not uid:
        problems.append("request.uid must be a non-empty string")
    op = req.get("operation")
    if not isinstance(op, str):
        problems.append("request.operation must be a string")
    kind = req.get("kind")
    if not isinstance(kind, dict) or not isinstance(kind.get("kind"), str):
        problems.append("request.kind must be an object with kind")
        kind = {}
    resource = req.get("resource") or {}
    if not isinstance(resource, dict) or not isinstance(resource.get("resource", ""), str):
        problems.append("request.resource must be an object with resource")
        resource = {}
    obj, old = req.get("object"), req.get("oldObject")
    for field, value in (("object", obj), ("oldObject", old)):
        if value is not None and not isinstance(value, dict):
            problems.append(f"request.{field} must be an object or null")
    for field in ("namespace", "name"):
        if not isinstance(req.get(field, ""), str):
            problems.append(f"request.{field} must be a string")
    if not isinstance(req.get("dryRun", False), bool):
        problems.append("request.dryRun must be a boolean")
    if problems:
        raise ReviewError(problems)
    name = req.get("name") or _meta(obj).get("name") or _meta(old).get("name") or ""
    namespace = (
        req.get("namespace") or _meta(obj).get("namespace") or _meta(old).get("namespace") or ""
    )
    return Request(
        uid=str(uid),
        operation=str(op),
        kind=str(kind.get("kind")),
        group=str(kind.get("group") or ""),
        namespace=str(namespace),
        name=str(name),
        dry_run=bool(req.get("dryRun", False)),
        obj=obj,
        old=old,
        version=str(kind.get("version") or ""),
        resource=str(resource.get("resource") or ""),
    )


def item_of(
    req: Request,
    observed_at: float,
    trace: tracing.TraceParent | None = None,
    watch: watches.Watch = conversion.BUILTIN,
) -> keyqueue.Item:
    """The queue entry of a forwarded request (``trace``: its admission span's context;
    ``watch``: the Watch it is forwarded for)."""
    old_rv = "" if req.operation == "CREATE" else str(_meta(req.old).get("resourceVersion") or "")
    uid = str(_meta(req.obj).get("uid") or _meta(req.old).get("uid") or "")
    return keyqueue.Item(
        namespace=req.namespace,
        name=req.name,
        uid=uid,
        operation=req.operation,  # type: ignore[arg-type]  # checked in decide
        old_resource_version=old_rv,
        observed_at=observed_at,
        trace=trace,
        watch=watch,
    )


def response(uid: str) -> dict[str, Any]:
    return {
        "apiVersion": API_VERSION,
        "kind": "AdmissionReview",
        "response": {"uid": uid, "allowed": True},
    }


_HEAD = b'{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","response":{"uid":'


def response_bytes(uid: str) -> bytes:
    """``response(uid)`` serialized (the hot path: no dict, one small dumps)."""
    return _HEAD + json.dumps(uid).encode() + b',"allowed":true}}'
