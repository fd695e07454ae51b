"""What the configuration injector writes into a runtime's component CR (pure).

From the live records of one runtime and one Watch (``tether.runtime.consumer.Change.live``):

* ``merged``: the values, the records' ``data`` merged over the objects in (namespace, name)
  order, a later key winning (``binaryData`` is not injected: the target field is a map of
  strings).
* ``digest``: sha256 of the canonical JSON of the merged values; the target's annotation
  ``tether.kyma-project.io/injected-digest`` holds the digest last applied.
* ``apply_body``: the server-side-apply intent of the field manager ``tether-injector``:
  the field ``inject.field`` set to the merged values, the digest and
  ``tether.kyma-project.io/injected-from`` (``<watch>:<highest revision>``) as annotations.
  With no live record the intent holds neither field nor annotations, so the apply removes
  what the injector owned: deleting a ConfigMap removes its values (docs/injector.md).
* ``needed``: whether the target differs from the intent (its annotation, or a value of the
  field someone else changed).
* ``condition`` and ``conditions_with``: the ``ConfigurationInjected`` condition (counts
  only, never values) and the target's conditions list with it replaced by type.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, NamedTuple

A = "tether.kyma-project.io/"
DIGEST_ANNOTATION = A + "injected-digest"
FROM_ANNOTATION = A + "injected-from"
FIELD_MANAGER = "tether-injector"
CONDITION = "ConfigurationInjected"


class Source(NamedTuple):
    """One live record of a runtime, as the injector keeps it."""

    namespace: str
    name: str
    data: Mapping[str, str]
    revision: int


def source_of(record: Mapping[str, Any], revision: int) -> Source:
    """The part of a record the injector keeps (its string values only)."""
    data = record.get("data")
    values = (
        {str(k): v for k, v in data.items() if isinstance(v, str)}
        if isinstance(data, Mapping)
        else {}
    )
    return Source(str(record.get("namespace", "")), str(record.get("name", "")), values, revision)


def merged(sources: Iterable[Source]) -> dict[str, str]:
    """The values of ``sources`` in (namespace, name) order, a later key winning."""
    out: dict[str, str] = {}
    for s in sorted(sources, key=lambda s: (s.namespace, s.name)):
        out.update(s.data)
    return out


def digest(values: Mapping[str, str]) -> str:
    """sha256 over the canonical JSON of ``values`` (sorted keys, no spaces)."""
    text = json.dumps(dict(values), sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return "sha256:" + hashlib.sha256(text.encode()).hexdigest()


class Intent(NamedTuple):
    """What one runtime's target should hold."""

    values: dict[str, str] | None  # None: no live record (the field and annotations go)
    digest: str  # "" when values is None
    origin: str  # "<watch>:<highest revision>", "" when values is None
    records: int  # live records merged


def intent(watch: str, sources: Sequence[Source], revision: int = 0) -> Intent:
    """``revision``: the highest revision seen for the runtime besides its live records'
    (a tombstone's)."""
    if not sources:
        return Intent(None, "", "", 0)
    values = merged(sources)
    high = max(revision, *(s.revision for s in sources))
    return Intent(values, digest(values), f"{watch}:{high}", len(sources))


def _nested(path: Sequence[str], value: Any) -> dict[str, Any]:
    out: dict[str, Any] = {path[-1]: value}
    for part in reversed(path[:-1]):
        out = {part: out}
    return out


def apply_body(target: Mapping[str, Any], field: Sequence[str], want: Intent) -> dict[str, Any]:
    """The server-side-apply body for ``target`` (the object found: its apiVersion, kind,
    name and namespace) setting ``field`` (e.g. ("spec", "configuration")) to the values."""
    meta = target.get("metadata") or {}
    body: dict[str, Any] = {
        "apiVersion": target.get("apiVersion"),
        "kind": target.get("kind"),
        "metadata": {"name": meta.get("name"), "namespace": meta.get("namespace")},
    }
    if want.values is not None:
        body["metadata"]["annotations"] = {
            DIGEST_ANNOTATION: want.digest,
            FROM_ANNOTATION: want.origin,
        }
        body.update(_nested(field, dict(want.values)))
    return body


def field_of(obj: Mapping[str, Any], field: Sequence[str]) -> Any:
    """The value at ``field`` in ``obj`` (None when a step is missing)."""
    cur: Any = obj
    for part in field:
        if not isinstance(cur, Mapping):
            return None
        cur = cur.get(part)
    return cur


def needed(target: Mapping[str, Any], field: Sequence[str], want: Intent) -> bool:
    """Whether ``target`` must be applied to: its digest annotation is not ``want``'s, or a
    value ``want`` sets differs in the field (an edit by someone else), or, with nothing to
    inject, it still carries the injector's annotation."""
    annotations = (target.get("metadata") or {}).get("annotations") or {}
    if want.values is None:
        return DIGEST_ANNOTATION in annotations or FROM_ANNOTATION in annotations
    if annotations.get(DIGEST_ANNOTATION) != want.digest:
        return True
    current = field_of(target, field)
    if not isinstance(current, Mapping):
        return True
    return any(current.get(k) != v for k, v in want.values.items())


def condition(
    want: Intent | None, generation: int, now: str, *, reason: str = "", message: str = ""
) -> dict[str, Any]:
    """``ConfigurationInjected``: True with the counts of what was applied (``want``), or
    False with ``reason`` and ``message`` (which must hold no value)."""
    if want is not None:
        if want.values is None:
            status, reason, message = "True", "NoRecords", "no live record: nothing injected"
        else:
            status, reason = "True", "Injected"
            message = (
                f"{len(want.values)} keys from {want.records} ConfigMaps "
                f"({want.origin}, {want.digest[:19]})"
            )
    else:
        status = "False"
    return {
        "type": CONDITION,
        "status": status,
        "reason": reason,
        "message": message,
        "observedGeneration": generation,
        "lastTransitionTime": now,
    }


def conditions_with(existing: object, new: Mapping[str, Any]) -> list[dict[str, Any]]:
    """``existing`` (the target's ``status.conditions``) with ``new`` in place of the one of
    its type; its lastTransitionTime kept when the status did not change."""
    items = (
        [dict(c) for c in existing if isinstance(c, Mapping)] if isinstance(existing, list) else []
    )
    out: list[dict[str, Any]] = []
    placed = False
    for c in items:
        if c.get("type") != new["type"]:
            out.append(c)
            continue
        cond = dict(new)
        if c.get("status") == new["status"] and c.get("lastTransitionTime"):
            cond["lastTransitionTime"] = c["lastTransitionTime"]
        if not placed:
            out.append(cond)
        placed = True
    if not placed:
        out.append(dict(new))
    return out


def condition_current(target: Mapping[str, Any], want: Intent) -> bool:
    """Whether the target's condition already records ``want`` at its generation."""
    generation = (target.get("metadata") or {}).get("generation")
    conds = (target.get("status") or {}).get("conditions")
    if not isinstance(conds, list):
        return False
    expected = condition(want, generation if isinstance(generation, int) else 0, "")
    for c in conds:
        if isinstance(c, Mapping) and c.get("type") == CONDITION:
            return all(
                c.get(k) == expected[k]
                for k in ("status", "reason", "message", "observedGeneration")
            )
    return False


def same_condition(target: Mapping[str, Any], cond: Mapping[str, Any]) -> bool:
    """Whether the target's condition of ``cond``'s type already says what ``cond`` says
    (status, reason, message, observedGeneration)."""
    conds = (target.get("status") or {}).get("conditions")
    for c in conds if isinstance(conds, list) else []:
        if isinstance(c, Mapping) and c.get("type") == cond["type"]:
            return all(
                c.get(k) == cond[k] for k in ("status", "reason", "message", "observedGeneration")
            )
    return False
