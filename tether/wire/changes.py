"""The change record: wire format, schema validation, the ordering rule and the one literal.

The JSON Schemas in ``tether/wire/schemas/`` are the single source of the format; the webhook,
the poller, the listener and the OpenAPI document all read them from here. A record is
written in one place (``from_object`` and ``watch_tombstone``: a record of a Watch); the v1
record of the previous version is converted to and from it in ``tether.wire.conversion`` only.

Ordering (pure decision, see ``compare``): a record replaces the stored one only if it is
newer. Epochs first: a runtime's history can go back (etcd restored from a backup, the
cluster rebuilt under the same runtime ID), and its resourceVersions are comparable only
within one epoch, which the KCP starts (``listener.fleet.epochs``); a record of a higher epoch is
newer, one of a lower epoch stale, whatever the resourceVersions. Within an epoch: equal
resourceVersion and equal ``deleted``: duplicate. Otherwise resourceVersions are compared
as integers where both parse (comparable for built-in types since Kubernetes 1.35,
KEP-5504), else ``observedAt``. A tombstone with the same resourceVersion as a stored
live record is newer (the deletion of that version); a live record with the resourceVersion
of a stored tombstone is stale. Senders should give a tombstone the resourceVersion of a
list made after the deletion (a collection resourceVersion), which is never below the
deleted object's own.

``compare`` is total: a stored version that cannot be interpreted (written by an older
version under a looser schema, or by hand: a resourceVersion of ``'²'``, an observedAt of
``2026-13-45...``) never raises; any interpretable incoming record replaces it, so the
KCP converges. ``uninterpretable`` names the field, for the caller to report.
"""

from __future__ import annotations

import functools
import json
import pathlib
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, Literal, NamedTuple, NotRequired, TypedDict

from jsonschema.protocols import Validator
from referencing import Registry, Resource

from tether.base import numbers, times
from tether.wire import schemaaccept, schemacheck, watches

API_VERSION = "tether.kyma-project.io/v1"
KIND = "ConfigMapChange"
LIST_KIND = "ConfigMapChangeList"
# v2: a record of any kind, sent for a Watch (tether.wire.watches); v1 stays served for senders
# of the previous version (a v1 record is of a ConfigMap, its Watch chosen by the listener)
API_VERSION_V2 = "tether.kyma-project.io/v2"
KIND_V2 = "ObjectChange"
LIST_KIND_V2 = "ObjectChangeList"
LIST_KINDS = (LIST_KIND, LIST_KIND_V2)
SCHEMA_DIR = pathlib.Path(__file__).with_name("schemas")

Source = Literal["webhook", "poller"]
Verdict = Literal["newer", "duplicate", "stale"]


class DigestItem(TypedDict):
    """One entry of a runtime's state digest (``GET /v1/runtimes/{id}/state``): what the
    listener holds of an object, without its data."""

    namespace: str
    name: str
    uid: str
    resourceVersion: str
    observedAt: str
    deleted: bool
    epoch: NotRequired[int]  # the stored record's epoch (absent from listeners before epochs)


class ChangeRecord(DigestItem):
    """A change record (v1): the digest's fields of the object, plus where it comes from
    and, unless a tombstone, its content."""

    apiVersion: str
    kind: str
    runtimeId: str
    source: Source
    labels: NotRequired[dict[str, str]]
    annotations: NotRequired[dict[str, str]]
    data: NotRequired[dict[str, str]]
    binaryData: NotRequired[dict[str, str]]
    watch: NotRequired[str]  # v2
    resource: NotRequired[dict[str, str]]  # v2: group, version, kind


class Version(NamedTuple):
    """What the ordering rule needs of a record (stored or incoming)."""

    resource_version: str
    observed_at: str
    deleted: bool
    epoch: int = 0


SchemaViolation = schemacheck.Violation
MAX_VIOLATIONS = 20  # per document
MAX_ITEM_VIOLATIONS = 5  # per item of a batch, so that one bad item does not hide the others
_RV_DIGITS = 64  # the schema's maxLength of resourceVersion
MAX_EPOCH = 2**53 - 1  # the schema's maximum of epoch (exact in every JSON implementation)


def load_schema(name: str) -> dict[str, Any]:
    schema: dict[str, Any] = json.loads((SCHEMA_DIR / name).read_text())
    return schema


class _Validators(NamedTuple):
    record: Validator
    envelope: Validator  # the batch without its items' schema: items are checked one by one
    max_items: int
    fields: Mapping[str, Callable[[object], bool]]  # the record's string properties
    # compiled acceptance (schemaaccept.acceptor): True only for what the validators accept;
    # what they refuse is validated by the validators, for the verdict and the messages
    record_ok: Callable[[object], bool]
    envelope_ok: Callable[[object], bool]


def schema_version(doc: object) -> str:
    """``v2`` for a document of the v2 API version, else ``v1`` (whose schema then says
    what is wrong with it)."""
    return "v2" if isinstance(doc, dict) and doc.get("apiVersion") == API_VERSION_V2 else "v1"


@functools.cache
def _validators(version: str = "v1") -> _Validators:
    record = load_schema(f"change-record.{version}.json")
    batch = load_schema(f"change-batch.{version}.json")
    registry: Registry[Any] = Registry().with_resources(
        [
            (f"change-record.{version}.json", Resource.from_contents(record)),
            (record["$id"], Resource.from_contents(record)),
        ]
    )
    items = batch["properties"]["items"]
    envelope = {
        **batch,
        "properties": {
            **batch["properties"],
            "items": {k: v for k, v in items.items() if k != "items"},
        },
    }
    fields = {
        name: schemacheck.string_check(record["properties"][name], times.parse_time)
        for name in ("namespace", "name", "uid", "resourceVersion", "observedAt")
    }
    return _Validators(
        schemacheck.make(record, registry, times.parse_time),
        schemacheck.make(envelope, registry, times.parse_time),
        int(items["maxItems"]),
        fields,
        schemaaccept.acceptor(record, times.parse_time),
        schemaaccept.acceptor(envelope, times.parse_time),
    )


def validate_record(doc: object) -> list[SchemaViolation]:
    """Schema violations of one record (at most ``MAX_VIOLATIONS``), v1 or v2 by its
    ``apiVersion``; empty when valid."""
    v = _validators(schema_version(doc))
    if v.record_ok(doc):
        return []
    return schemacheck.violations(v.record, doc, MAX_VIOLATIONS)


def validate_batch(doc: object) -> list[SchemaViolation]:
    """Schema violations of a batch (``kind: ConfigMapChangeList``); empty when valid.

    The envelope first (an ``items`` list longer than ``maxItems`` is refused before any
    item is looked at), then item by item, at most ``MAX_ITEM_VIOLATIONS`` per item and
    ``MAX_VIOLATIONS`` in all: the cost is bounded by the size of the body, never by the
    number of errors it could produce. v1 or v2 by the batch's ``apiVersion``."""
    v = _validators(schema_version(doc))
    out = [] if v.envelope_ok(doc) else schemacheck.violations(v.envelope, doc, MAX_VIOLATIONS)
    if out or not isinstance(doc, dict):
        return out
    for i, item in enumerate(doc["items"]):
        left = MAX_VIOLATIONS - len(out)
        if left <= 0:
            break
        if v.record_ok(item):
            continue
        out += schemacheck.violations(
            v.record, item, min(left, MAX_ITEM_VIOLATIONS), prefix=f"$.items[{i}]"
        )
    return out


def field_ok(name: str, value: object) -> bool:
    """Whether ``value`` is valid for the record's string property ``name`` (namespace,
    name, uid, resourceVersion, observedAt); the schema decides, by a check compiled from
    its keywords."""
    return _validators().fields[name](value)


def records_of(doc: Mapping[str, Any]) -> Iterator[ChangeRecord]:
    """The records of a validated document: a single record or a batch."""
    if doc.get("kind") in LIST_KINDS:
        yield from doc["items"]
    else:
        yield doc  # type: ignore[misc]


def epoch_of(value: object) -> int:
    """An epoch as stored or sent: a non-negative integer (an annotation's decimal text
    too); anything else is epoch 0, the runtime's first, where records written before
    epochs existed belong."""
    if isinstance(value, str):
        value = numbers.ascii_int(value, 16)
    elif isinstance(value, float) and value.is_integer():  # JSON's 1.0 is an integer too
        value = int(value)
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= MAX_EPOCH:
        return value
    return 0


def version_of(record: Mapping[str, Any]) -> Version:
    """The version of a record, also of a stored one that may hold anything: a field that
    is missing or not of its type becomes ``""`` / False (``uninterpretable`` says so), an
    epoch that is missing or not an integer 0 (``epoch_of``)."""
    rv, ts = record.get("resourceVersion"), record.get("observedAt")
    return Version(
        rv if isinstance(rv, str) else "",
        ts if isinstance(ts, str) else "",
        record.get("deleted") is True,
        epoch_of(record.get("epoch")),
    )


def uninterpretable(v: Version) -> str | None:
    """The field of ``v`` that the ordering rule cannot use (``resourceVersion`` or
    ``observedAt``), or None when both are valid by the schema."""
    if not field_ok("resourceVersion", v.resource_version):
        return "resourceVersion"
    if not field_ok("observedAt", v.observed_at):
        return "observedAt"
    return None


def compare(stored: Version | None, incoming: Version) -> Verdict:
    """Whether ``incoming`` replaces ``stored`` (pure, total; see the module docstring).

    The higher epoch wins; within one epoch an uninterpretable stored version is replaced
    by any interpretable incoming one, and an uninterpretable incoming version never
    replaces anything stored."""
    if stored is None:
        return "newer"
    if uninterpretable(incoming) is not None:
        return "stale"
    if incoming.epoch != stored.epoch:
        return "newer" if incoming.epoch > stored.epoch else "stale"
    if uninterpretable(stored) is not None:
        return "newer"
    if incoming.resource_version == stored.resource_version:
        if incoming.deleted == stored.deleted:
            return "duplicate"
        return "newer" if incoming.deleted else "stale"
    a = numbers.ascii_int(incoming.resource_version, _RV_DIGITS)
    b = numbers.ascii_int(stored.resource_version, _RV_DIGITS)
    if a is not None and b is not None:
        return "newer" if a > b else "stale"
    ta, tb = times.parse_time(incoming.observed_at), times.parse_time(stored.observed_at)
    if ta is None or tb is None or ta == tb:  # None: not reached (both interpretable)
        return "duplicate"
    return "newer" if ta > tb else "stale"


def high_water(versions: Iterable[tuple[object, int]], epoch: int) -> int | None:
    """The highest resourceVersion (as an integer) among ``(resourceVersion, epoch)`` pairs
    of ``epoch``; None when none parses. With ``went_back``: the test that a runtime's
    history went back (``listener.fleet.epochs``)."""
    best: int | None = None
    for rv, e in versions:
        n = numbers.ascii_int(rv, _RV_DIGITS) if e == epoch else None
        if n is not None and (best is None or n > best):
            best = n
    return best


def went_back(collection_rv: object, mark: int | None) -> bool:
    """Whether a listing at ``collection_rv``, made after reading records of one epoch
    whose highest resourceVersion is ``mark``, shows that the runtime's history went back:
    a runtime going forward never lists below a resourceVersion it wrote before."""
    rv = numbers.ascii_int(collection_rv, _RV_DIGITS)
    return rv is not None and mark is not None and rv < mark


def batch(records: list[ChangeRecord]) -> dict[str, Any]:
    """A batch of records of one version (v2 when the first record is)."""
    if records and records[0].get("apiVersion") == API_VERSION_V2:
        return {"apiVersion": API_VERSION_V2, "kind": LIST_KIND_V2, "items": records}
    return {"apiVersion": API_VERSION, "kind": LIST_KIND, "items": records}


def from_object(
    obj: Mapping[str, Any],
    *,
    watch: watches.Watch,
    runtime_id: str,
    source: Source,
    observed_at: str | None = None,
    epoch: int | None = None,
) -> ChangeRecord:
    """A live record of ``obj`` (as served by the runtime's API, a plain dict) for
    ``watch``: only what the Watch sends (``watches.reduce``) is in it."""
    meta = obj.get("metadata") or {}
    return _record(
        watch,
        runtime_id=runtime_id,
        namespace=meta["namespace"],
        name=meta["name"],
        uid=meta.get("uid") or "",
        resource_version=meta["resourceVersion"],
        source=source,
        observed_at=observed_at,
        epoch=epoch,
        content=watches.reduce(watch, obj),
    )


def watch_tombstone(
    *,
    watch: watches.Watch,
    runtime_id: str,
    namespace: str,
    name: str,
    uid: str,
    resource_version: str,
    source: Source,
    observed_at: str | None = None,
    epoch: int | None = None,
) -> ChangeRecord:
    """A tombstone: the object is gone, or no longer covered by ``watch`` (its labels left
    the Watch's selector). ``resource_version`` should be a collection resourceVersion read
    after the deletion (see the module docstring)."""
    return _record(
        watch,
        runtime_id=runtime_id,
        namespace=namespace,
        name=name,
        uid=uid,
        resource_version=resource_version,
        source=source,
        observed_at=observed_at,
        epoch=epoch,
        content=None,
    )


def _record(
    watch: watches.Watch,
    *,
    runtime_id: str,
    namespace: str,
    name: str,
    uid: str,
    resource_version: str,
    source: Source,
    observed_at: str | None,
    epoch: int | None,
    content: watches.Content | None,
) -> ChangeRecord:
    """The record literal (the one place a record is written): a tombstone without
    ``content``; ``epoch`` None: not sent, the listener's current epoch applies."""
    rec: ChangeRecord = {
        "apiVersion": API_VERSION_V2,
        "kind": KIND_V2,
        "runtimeId": runtime_id,
        "watch": watch.name,
        "resource": watch.target.gvk(),
        "namespace": namespace,
        "name": name,
        "uid": uid,
        "resourceVersion": resource_version,
        "observedAt": observed_at or times.now(),
        "deleted": content is None,
        "source": source,
    }
    if content is not None:
        rec["labels"] = content.labels
        rec["annotations"] = content.annotations
        rec["data"] = content.data
        rec["binaryData"] = content.binary_data
    if epoch is not None:
        rec["epoch"] = epoch
    return rec
