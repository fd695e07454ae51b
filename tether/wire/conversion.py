"""The record of the previous version (v1) and the Watch record: the one conversion (pure).

Inside Tether a record is a Watch record (``tether.wire.changes``: it names its Watch and
the kind of its object). The v1 record of the release before Watches
(``tether.kyma-project.io/v1``, kind ``ConfigMapChange``: a ConfigMap, no Watch) occurs at
two edges only, and is converted here:

* the sender's exit, facing a listener that may be of the previous version: a record of the
  built-in Watch (``BUILTIN``: the environment's ConfigMap scope of a runtime that has no
  Watch list) leaves as a v1 record (``on_wire``), which every listener since v0.1.0 takes;
* the listener's intake from a runtime of the previous version: a v1 record is given the
  runtime's compat Watch and its kind on entry (``upgrade``; which Watch is the compat one is
  ``listener.edge.watchcheck``'s decision).

The built-in Watch is named ``BUILTIN_NAME``, which no Watch in the KCP can be named (a colon
is not allowed in an object's name): a record of it sent as v2 by mistake would be refused as
"not in force", never stored under another Watch. ``from_configmap`` and ``tombstone`` build
a built-in Watch record already converted, for the senders that still build v1 records
themselves (docs/watches.md, "The records").
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Mapping, Sequence
from typing import Any

from tether.wire import changes, filters, watches

BUILTIN_NAME = "tether:environment"  # not a valid object name: no Watch in the KCP has it
BUILTIN = watches.Watch(BUILTIN_NAME, watches.CONFIGMAP, mode="full")
_WATCH_FIELDS = ("watch", "resource")


@functools.cache  # one per filter: its selector is parsed once
def builtin(flt: filters.ConfigMapFilter) -> watches.Watch:
    """The built-in Watch of the environment's scope (``TETHER_IGNORED_NAMESPACES``,
    ``TETHER_LABEL_SELECTOR``): every ConfigMap it selects, in full. Like every Watch it never
    covers what ``watches`` never sends (``ALWAYS_IGNORED_NAMESPACES``, ``NEVER_SENT``), even
    where ``TETHER_IGNORED_NAMESPACES`` is ``-``."""
    return dataclasses.replace(
        BUILTIN,
        ignored_namespaces=tuple(sorted(flt.ignored_namespaces)),
        selector_text=flt.selector_text,
    )


def in_force(
    listed: tuple[watches.Watch, ...] | None, flt: filters.ConfigMapFilter
) -> tuple[watches.Watch, ...]:
    """The Watches a runtime's senders work for: its Watch list (``tether-watches``), or,
    where it has none (a runtime enrolled before Watches), the built-in Watch."""
    return (builtin(flt),) if listed is None else listed


def is_builtin(w: watches.Watch) -> bool:
    """Whether ``w`` is the built-in Watch (its records leave as v1 records)."""
    return w.name == BUILTIN_NAME


def sent_as_v1(record: Mapping[str, Any]) -> bool:
    """Whether ``record`` leaves as a v1 record (``on_wire``): it is of the built-in Watch."""
    return record.get("watch") == BUILTIN_NAME


def is_v1(record: Mapping[str, Any]) -> bool:
    """Whether ``record`` is of the previous version: not v2 and naming no Watch."""
    return record.get("apiVersion") != changes.API_VERSION_V2 and "watch" not in record


def upgrade(record: changes.ChangeRecord, watch: watches.Watch) -> None:
    """A v1 record, taken in by the listener, made the record of ``watch`` (in place, as it
    is stored: its Watch and kind; the v1 record is of a ConfigMap, which ``watch`` covers)."""
    record["watch"] = watch.name
    record["resource"] = watch.target.gvk()


def to_v1(record: Mapping[str, Any]) -> changes.ChangeRecord:
    """A record of the built-in Watch as the previous version writes it (a new dict)."""
    out: changes.ChangeRecord = {k: v for k, v in record.items() if k not in _WATCH_FIELDS}  # type: ignore[assignment]
    out["apiVersion"] = changes.API_VERSION
    out["kind"] = changes.KIND
    return out


def on_wire(records: Sequence[changes.ChangeRecord]) -> list[changes.ChangeRecord]:
    """The records as sent: those of the built-in Watch as v1 records, the others as they
    are."""
    return [to_v1(r) if sent_as_v1(r) else r for r in records]


def from_configmap(
    obj: Mapping[str, Any],
    *,
    runtime_id: str,
    source: changes.Source,
    observed_at: str | None = None,
    epoch: int | None = None,
) -> changes.ChangeRecord:
    """A v1 live record of a ConfigMap (``changes.from_object`` for the built-in Watch,
    converted)."""
    return to_v1(
        changes.from_object(
            obj,
            watch=BUILTIN,
            runtime_id=runtime_id,
            source=source,
            observed_at=observed_at,
            epoch=epoch,
        )
    )


def tombstone(
    *,
    runtime_id: str,
    namespace: str,
    name: str,
    uid: str,
    resource_version: str,
    source: changes.Source,
    observed_at: str | None = None,
    epoch: int | None = None,
) -> changes.ChangeRecord:
    """A v1 tombstone of a ConfigMap (``changes.watch_tombstone`` for the built-in Watch,
    converted)."""
    return to_v1(
        changes.watch_tombstone(
            watch=BUILTIN,
            runtime_id=runtime_id,
            namespace=namespace,
            name=name,
            uid=uid,
            resource_version=resource_version,
            source=source,
            observed_at=observed_at,
            epoch=epoch,
        )
    )
