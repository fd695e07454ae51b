"""The change record (v1): wire format, schema validation and the ordering rule.

The JSON Schemas in ``common/schemas/`` are the single source of the format; the webhook,
the poller, the listener and the OpenAPI document all read them from here.

Ordering (pure decision, see ``compare``): a record replaces the stored one only if it is
newer. Equal resourceVersion and equal ``deleted``: duplicate. Otherwise resourceVersions
are compared as integers where both parse (comparable for built-in types since Kubernetes
1.35, KEP-5504), else ``observedAt``. A tombstone with the same resourceVersion as a stored
live record is newer (the deletion of that version); a live record with the resourceVersion
of a stored tombstone is stale. Senders should give a tombstone the resourceVersion of a
list made after the deletion (a collection resourceVersion), which is never below the
deleted object's own.
"""

from __future__ import annotations

import datetime
import functools
import json
import pathlib
from collections.abc import Iterator, Mapping
from typing import Any, Literal, NamedTuple, NotRequired, TypedDict

import jsonschema
from jsonschema import Draft202012Validator
from referencing import Registry, Resource

API_VERSION = "tether.kyma-project.io/v1"
KIND = "ConfigMapChange"
LIST_KIND = "ConfigMapChangeList"
SCHEMA_DIR = pathlib.Path(__file__).with_name("schemas")

Source = Literal["webhook", "poller"]
Verdict = Literal["newer", "duplicate", "stale"]


class ChangeRecord(TypedDict):
    apiVersion: str
    kind: str
    runtimeId: str
    namespace: str
    name: str
    uid: str
    resourceVersion: str
    observedAt: str
    deleted: bool
    source: Source
    labels: NotRequired[dict[str, str]]
    annotations: NotRequired[dict[str, str]]
    data: NotRequired[dict[str, str]]
    binaryData: NotRequired[dict[str, str]]


class DigestItem(TypedDict):
    """One entry of a runtime's state digest (``GET /v1/runtimes/{id}/state``): what the
    listener holds of an object, without its data."""

    namespace: str
    name: str
    uid: str
    resourceVersion: str
    observedAt: str
    deleted: bool


class Version(NamedTuple):
    """What the ordering rule needs of a record (stored or incoming)."""

    resource_version: str
    observed_at: str
    deleted: bool


class SchemaViolation(NamedTuple):
    """One failure: a JSON path into the document and the reason."""

    path: str
    message: str


def load_schema(name: str) -> dict[str, Any]:
    schema: dict[str, Any] = json.loads((SCHEMA_DIR / name).read_text())
    return schema


@functools.cache
def _validators() -> tuple[Draft202012Validator, Draft202012Validator]:
    record = load_schema("change-record.v1.json")
    batch = load_schema("change-batch.v1.json")
    registry: Registry[Any] = Registry().with_resources(
        [
            ("change-record.v1.json", Resource.from_contents(record)),
            (record["$id"], Resource.from_contents(record)),
        ]
    )
    return (
        Draft202012Validator(record, registry=registry),
        Draft202012Validator(batch, registry=registry),
    )


def _violations(validator: Draft202012Validator, doc: object) -> list[SchemaViolation]:
    out = []
    for err in sorted(validator.iter_errors(doc), key=lambda e: list(e.absolute_path)):
        out.append(SchemaViolation(err.json_path, _short(err)))
        if len(out) >= 20:
            break
    return out


def _short(err: jsonschema.ValidationError) -> str:
    # Messages quote the offending instance; keep them bounded (values may be large
    # and must not echo ConfigMap data at length).
    msg = err.message
    return msg if len(msg) <= 200 else msg[:197] + "..."


def validate_record(doc: object) -> list[SchemaViolation]:
    """Schema violations of one record; empty when valid."""
    return _violations(_validators()[0], doc)


def validate_batch(doc: object) -> list[SchemaViolation]:
    """Schema violations of a batch (``kind: ConfigMapChangeList``); empty when valid."""
    return _violations(_validators()[1], doc)


def records_of(doc: Mapping[str, Any]) -> Iterator[ChangeRecord]:
    """The records of a validated document: a single record or a batch."""
    if doc.get("kind") == LIST_KIND:
        yield from doc["items"]
    else:
        yield doc  # type: ignore[misc]


def version_of(record: Mapping[str, Any]) -> Version:
    return Version(str(record["resourceVersion"]), str(record["observedAt"]), bool(record["deleted"]))


def _as_int(rv: str) -> int | None:
    return int(rv) if rv.isdigit() else None


def _parse_time(ts: str) -> datetime.datetime:
    # fromisoformat accepts up to 6 fractional digits; cut nanoseconds if any
    if "." in ts:
        head, frac = ts[:-1].split(".", 1)
        ts = f"{head}.{frac[:6].ljust(6, '0')}Z"
    return datetime.datetime.fromisoformat(ts.replace("Z", "+00:00"))


def compare(stored: Version | None, incoming: Version) -> Verdict:
    """Whether ``incoming`` replaces ``stored`` (pure; see the module docstring)."""
    if stored is None:
        return "newer"
    if incoming.resource_version == stored.resource_version:
        if incoming.deleted == stored.deleted:
            return "duplicate"
        return "newer" if incoming.deleted else "stale"
    a, b = _as_int(incoming.resource_version), _as_int(stored.resource_version)
    if a is not None and b is not None:
        return "newer" if a > b else "stale"
    ta, tb = _parse_time(incoming.observed_at), _parse_time(stored.observed_at)
    if ta == tb:
        return "duplicate"
    return "newer" if ta > tb else "stale"


def format_time(ts: datetime.datetime) -> str:
    """observedAt format: UTC, microseconds, 'Z'."""
    return ts.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def now() -> str:
    return format_time(datetime.datetime.now(datetime.UTC))


def from_configmap(
    obj: Mapping[str, Any], *, runtime_id: str, source: Source, observed_at: str | None = None
) -> ChangeRecord:
    """A live record from a ConfigMap as served by the API (a plain dict, camelCase keys,
    e.g. ``ApiClient.sanitize_for_serialization(cm)`` or a raw JSON response)."""
    meta = obj.get("metadata") or {}
    rec: ChangeRecord = {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "runtimeId": runtime_id,
        "namespace": meta["namespace"],
        "name": meta["name"],
        "uid": meta.get("uid") or "",
        "resourceVersion": meta["resourceVersion"],
        "observedAt": observed_at or now(),
        "deleted": False,
        "source": source,
        "labels": dict(meta.get("labels") or {}),
        "annotations": dict(meta.get("annotations") or {}),
        "data": dict(obj.get("data") or {}),
        "binaryData": dict(obj.get("binaryData") or {}),
    }
    return rec


def tombstone(
    *, runtime_id: str, namespace: str, name: str, uid: str, resource_version: str,
    source: Source, observed_at: str | None = None,
) -> ChangeRecord:
    """A record for an object that is gone. ``resource_version`` should be a collection
    resourceVersion read after the deletion (see the module docstring)."""
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "runtimeId": runtime_id,
        "namespace": namespace,
        "name": name,
        "uid": uid,
        "resourceVersion": resource_version,
        "observedAt": observed_at or now(),
        "deleted": True,
        "source": source,
    }


def batch(records: list[ChangeRecord]) -> dict[str, Any]:
    return {"apiVersion": API_VERSION, "kind": LIST_KIND, "items": records}
