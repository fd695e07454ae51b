"""The stored form of a change record: the ``RuntimeConfigMap`` custom resource (pure).

One object per (runtime, Watch, namespace, name) in the KCP namespace, named by a hash of
the four (names of runtime objects are up to 253 characters, too long to join), labelled by
runtime ID, Watch (``watches.WATCH_LABEL``) and namespace; ``spec.watch`` and
``spec.resource`` (group, version, kind) say which Watch admitted it and of what kind the
object is. A v1 record is stored under the runtime's compat Watch (``listener.edge.watchcheck``)
as a ConfigMap. Objects written before Watches have no Watch label (legacy records: the
janitor deletes them, ``listener.janitor.sweep``). ``spec`` holds the latest record; annotations
repeat the few fields of the state digest so ``GET .../state`` can list metadata only
(``PartialObjectMetadataList``) instead of every object's data. The record's epoch
(``tether.wire.changes``, ``listener.fleet.epochs``) is ``spec.epoch`` and the annotation
``tether.kyma-project.io/epoch``; an object without them (written before epochs) is of
epoch 0. The annotation ``tether.kyma-project.io/traceparent`` names the trace of the write
(``tether.base.tracing``: the W3C ``traceparent`` of the listener's span, in the change's trace);
a write without one removes an older one.

Where (docs/watches.md, "Where records are stored and who can read them"): a record lives in
its Watch's storage namespace (``spec.storage.namespace``, else the listener's namespace; a
legacy record in the listener's). Every record is labelled with its Kyma CR's name
(``apitypes.KYMA_NAME_LABEL``); one in the Kyma CR's own namespace also has an owner
reference to it (``Owner``), so the API server's garbage collector removes it with the Kyma
CR. A listing across namespaces keeps only objects where their Watch stores (``placed``): a
``RuntimeConfigMap`` someone else created elsewhere does not count.

**Unbacked tombstones.** A tombstone for a key that is not stored (or stored only as such a
tombstone) is written with the label ``UNBACKED_LABEL`` (``listener.storage.rules``,
"Unbacked tombstones"): it keeps the ordering rule for its key, but it is no record of the
runtime's configuration. ``digest_item`` skips it, so it is in no state digest, state
summary or quota count; a later live record of its key drops the label.

CRD: ``manifests/kcp/crds/tether.kyma-project.io_runtimeconfigmaps.yaml``.

Stored objects are read as they are: an object written by an older version (a looser
schema) or by hand may hold values the ordering rule cannot use. ``stored_version`` and
``digest_item`` never raise on them; such a version is replaced by the next valid record
for the key (``tether.wire.changes.compare``), and ``stored_version`` reports it with one
warning naming the object and field (the one side effect here).
"""

from __future__ import annotations

import base64
import hashlib
import json
import logging
from collections.abc import Mapping
from typing import Any, NamedTuple

from listener.storage import rules
from tether.base import logs
from tether.kube import apitypes
from tether.wire import changes, statehash, watches

NAMESPACE_LABEL = "tether.kyma-project.io/namespace"
# the key's bucket of the state summary (tether.wire.statehash), so one bucket is one label-selected
# list (listener.fleet.statesummary); objects written before it have none until their next write
BUCKET_LABEL = "tether.kyma-project.io/bucket"
MANAGED_BY = "tether-listener"
# a tombstone for a key that was never stored (docstring, "Unbacked tombstones")
is_unbacked = rules.is_unbacked
A = "tether.kyma-project.io/"
ANN_NAMESPACE, ANN_NAME, ANN_UID = A + "namespace", A + "name", A + "uid"
ANN_RV, ANN_OBSERVED, ANN_DELETED = A + "resource-version", A + "observed-at", A + "deleted"

_SPEC_FIELDS = (
    "runtimeId",
    "watch",
    "resource",
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
)


log = logging.getLogger(__name__)


class Owner(NamedTuple):
    """The Kyma CR of a runtime (the listener read it to authenticate the runtime)."""

    namespace: str
    name: str
    uid: str

    def reference(self) -> dict[str, Any]:
        return {
            "apiVersion": apitypes.KYMAS.api_version,
            "kind": apitypes.KYMA_KIND,
            "name": self.name,
            "uid": self.uid,
            "controller": False,
        }


def _owned(meta: dict[str, Any], owner: Owner | None) -> None:
    """Set the Kyma CR's label, and its owner reference when ``meta`` is in its namespace;
    owner references to other Kyma CRs (a Kyma CR recreated) go, others' are kept."""
    if owner is None:
        return
    meta["labels"][apitypes.KYMA_NAME_LABEL] = owner.name
    refs = [
        r
        for r in meta.get("ownerReferences") or []
        if not (
            isinstance(r, dict)
            and r.get("kind") == apitypes.KYMA_KIND
            and str(r.get("apiVersion", "")).startswith(apitypes.KYMAS.group + "/")
        )
    ]
    if owner.namespace == meta.get("namespace") and owner.uid:
        refs.append(owner.reference())
    if refs:
        meta["ownerReferences"] = refs
    else:
        meta.pop("ownerReferences", None)


def placed(meta: Mapping[str, Any], homes: Mapping[str, str], default: str) -> bool:
    """Whether a stored object is in the namespace its Watch stores in (``homes``: Watch
    name -> storage namespace); a legacy record's and an unknown Watch's is ``default``."""
    watch = watch_of(meta)
    return meta.get("namespace") == (default if watch is None else homes.get(watch, default))


class Key(NamedTuple):
    runtime_id: str
    watch: str  # "" only for a legacy record (stored before Watches)
    namespace: str
    name: str


def key_of(record: Mapping[str, Any]) -> Key:
    """The key of a record; its ``watch`` is set (a v1 record's by the listener)."""
    return Key(
        str(record["runtimeId"]),
        str(record.get("watch", "")),
        str(record["namespace"]),
        str(record["name"]),
    )


def object_name(key: Key) -> str:
    """``rcm-`` + 40 hex digits of SHA-256 over the key (a valid DNS subdomain; the parts
    are joined by NUL, which none of them can hold, so the key is unique)."""
    digest = hashlib.sha256("\x00".join(key).encode()).hexdigest()
    return f"rcm-{digest[:40]}"


def body(
    record: Mapping[str, Any],
    namespace: str,
    trace: str = "",
    owner: Owner | None = None,
    unbacked: bool = False,
) -> dict[str, Any]:
    """A new custom resource holding ``record`` (``trace``: the write's ``traceparent``;
    ``owner``: the runtime's Kyma CR; ``unbacked``: a tombstone of a key never stored)."""
    key = key_of(record)
    meta: dict[str, Any] = {
        "name": object_name(key),
        "namespace": namespace,
        "labels": {
            apitypes.RUNTIME_ID_LABEL: key.runtime_id,
            NAMESPACE_LABEL: key.namespace,
            apitypes.MANAGED_BY_LABEL: MANAGED_BY,
            watches.WATCH_LABEL: key.watch,
            BUCKET_LABEL: str(statehash.bucket_of(key.namespace, key.name)),
        },
        "annotations": {
            ANN_NAMESPACE: key.namespace,
            ANN_NAME: key.name,
            ANN_UID: str(record.get("uid", "")),
            ANN_RV: str(record["resourceVersion"]),
            ANN_OBSERVED: str(record["observedAt"]),
            ANN_DELETED: "true" if record["deleted"] else "false",
            apitypes.EPOCH_ANNOTATION: str(changes.epoch_of(record.get("epoch"))),
        },
    }
    if trace:
        meta["annotations"][apitypes.TRACEPARENT_ANNOTATION] = trace
    if unbacked:
        meta["labels"][rules.UNBACKED_LABEL] = "true"
    _owned(meta, owner)
    spec = {f: record[f] for f in _SPEC_FIELDS if f in record}
    return {
        "apiVersion": apitypes.RUNTIME_CONFIGMAPS.api_version,
        "kind": apitypes.RUNTIME_CONFIGMAP_KIND,
        "metadata": meta,
        "spec": spec,
    }


def updated(
    stored: Mapping[str, Any],
    record: Mapping[str, Any],
    trace: str = "",
    owner: Owner | None = None,
    unbacked: bool = False,
) -> dict[str, Any]:
    """The stored object with ``record`` in place of its spec. Its metadata is kept
    (resourceVersion for optimistic concurrency, finalizers, owner references, labels and
    annotations of others); our labels, annotations and Kyma CR reference are set over it
    (the unbacked label only when ``unbacked``)."""
    new = body(
        record, str((stored.get("metadata") or {}).get("namespace", "")), trace, unbacked=unbacked
    )
    meta = dict(stored.get("metadata") or {})
    meta.pop("managedFields", None)
    meta["labels"] = {
        k: v
        for k, v in {**(meta.get("labels") or {}), **new["metadata"]["labels"]}.items()
        if k != rules.UNBACKED_LABEL or unbacked
    }
    kept = {
        k: v
        for k, v in (meta.get("annotations") or {}).items()
        if k != apitypes.TRACEPARENT_ANNOTATION
    }  # an earlier write's trace
    meta["annotations"] = {**kept, **new["metadata"]["annotations"]}
    _owned(meta, owner)
    return {**new, "metadata": meta}


def matches(obj: Mapping[str, Any], key: Key) -> bool:
    """Whether a stored object holds ``key`` (guards against a hash collision)."""
    spec = obj.get("spec") or {}
    return (
        spec.get("runtimeId"),
        spec.get("watch", ""),
        spec.get("namespace"),
        spec.get("name"),
    ) == tuple(key)


def watch_of(meta: Mapping[str, Any]) -> str | None:
    """The Watch a stored object's metadata names (None: a legacy record)."""
    labels = meta.get("labels")
    value = labels.get(watches.WATCH_LABEL) if isinstance(labels, dict) else None
    return value if isinstance(value, str) and value else None


def stored_version(obj: Mapping[str, Any]) -> changes.Version:
    """The version of a stored object, whatever it holds (never raises). When the ordering
    rule cannot use it, a warning names the object and the field: the next valid record
    replaces it."""
    spec = obj.get("spec")
    version = changes.version_of(spec if isinstance(spec, dict) else {})
    field = changes.uninterpretable(version)
    if field is not None:
        meta = obj.get("metadata")
        name = meta.get("name") if isinstance(meta, dict) else None
        log.warning(
            "stored record %s has an uninterpretable %s (%s); the next valid record "
            "for its key replaces it",
            logs.bounded(name, 80),
            field,
            logs.bounded(repr(getattr(version, _ATTR[field])), 80),
        )
    return version


_ATTR = {"resourceVersion": "resource_version", "observedAt": "observed_at"}


def digest_item(meta: Mapping[str, Any]) -> changes.DigestItem | None:
    """A state digest entry from an object's metadata; None if it is not ours or an unbacked
    tombstone (no record of the runtime's). Values are passed on as stored (also ones the
    ordering rule cannot use: the poller treats those as differences to repair); a value
    that is not a string becomes ``""``."""
    ann = meta.get("annotations")
    if not isinstance(ann, dict) or ANN_NAMESPACE not in ann or ANN_NAME not in ann:
        return None
    if is_unbacked(meta):
        return None

    def text(key: str) -> str:
        value = ann.get(key, "")
        return value if isinstance(value, str) else ""

    return changes.DigestItem(
        namespace=text(ANN_NAMESPACE),
        name=text(ANN_NAME),
        uid=text(ANN_UID),
        resourceVersion=text(ANN_RV),
        observedAt=text(ANN_OBSERVED),
        deleted=ann.get(ANN_DELETED) == "true",
        epoch=changes.epoch_of(ann.get(apitypes.EPOCH_ANNOTATION)),
    )


def page(
    items: list[changes.DigestItem], after: tuple[str, str] | None, limit: int
) -> tuple[list[changes.DigestItem], tuple[str, str] | None]:
    """One page of the digest ordered by (namespace, name), starting after ``after``;
    returns the page and the position to continue from (None at the end)."""
    ordered = sorted(items, key=lambda i: (i["namespace"], i["name"]))
    if after is not None:
        ordered = [i for i in ordered if (i["namespace"], i["name"]) > after]
    chunk = ordered[:limit]
    more = len(ordered) > limit
    return chunk, ((chunk[-1]["namespace"], chunk[-1]["name"]) if more and chunk else None)


def encode_continue(position: tuple[str, str] | None) -> str:
    if position is None:
        return ""
    raw = json.dumps(list(position), separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_continue(token: str) -> tuple[str, str] | None:
    """The position of a continue token; raises ``ValueError`` when it is not one of ours."""
    if not token:
        return None
    if len(token) > 1024:
        raise ValueError("continue token too long")
    try:
        raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
        value = json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        raise ValueError("continue token is malformed") from None
    if not isinstance(value, list) or len(value) != 2 or not all(isinstance(v, str) for v in value):
        raise ValueError("continue token is malformed")
    return value[0], value[1]
