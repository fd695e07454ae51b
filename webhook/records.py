"""The record the forwarder sends for a queue entry, from what it read back (pure).

A record for the entry's Watch (the built-in one, the environment's scope, in a runtime
without a Watch list: it leaves as a v1 record, ``tether.wire.conversion.on_wire``),
reduced in the runtime to what the Watch sends (``tether.wire.changes.from_object``: a
metadata Watch sends no value, a digest Watch a hash per value), once the object is known
to be of the Watch's kind (its own apiVersion and kind; an object of another kind is not
sent at all); when the object read back is no longer admitted by the Watch (its labels
left the selector) a tombstone of that Watch (``changes.watch_tombstone``) at the object's
own resourceVersion, so the KCP forgets it. An object is read back and reduced at once: a
large object of any kind is never held in a queue, only its key.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from tether.wire import changes, conversion, watches
from webhook import keyqueue


def current(item: keyqueue.Item, in_force: Sequence[watches.Watch]) -> keyqueue.Item | None:
    """The entry as it is sent now: with the current version of its Watch (its mode or
    selector may have changed since the admission); None when it is no longer to be sent
    (its Watch is gone; the built-in Watch too, when the runtime got its Watch list since,
    or lost it)."""
    now = next((w for w in in_force if w.name == item.watch.name), None)
    if now is None or now.target != item.watch.target:  # another kind: not this object
        return None
    return item if now == item.watch else dataclasses.replace(item, watch=now)


def live(
    item: keyqueue.Item,
    obj: Mapping[str, Any],
    *,
    runtime_id: str,
    observed_at: str,
    epoch: int | None,
) -> changes.ChangeRecord | None:
    """The record of an object that exists (as served by the runtime's API); None when the
    object is not of its Watch's kind (``watches.foreign``: its own apiVersion and kind),
    which is never reduced nor sent."""
    w = item.watch
    if watches.foreign(w, obj) is not None:
        return None
    meta = obj.get("metadata") or {}
    if watches.admits(w, item.namespace, item.name, meta.get("labels") or {}):
        return changes.from_object(
            obj,
            watch=w,
            runtime_id=runtime_id,
            source="webhook",
            observed_at=observed_at,
            epoch=epoch,
        )
    return changes.watch_tombstone(
        watch=w,
        runtime_id=runtime_id,
        namespace=item.namespace,
        name=item.name,
        uid=str(meta.get("uid") or item.uid),
        resource_version=str(meta.get("resourceVersion")),
        source="webhook",
        observed_at=observed_at,
        epoch=epoch,
    )


def gone(
    item: keyqueue.Item,
    resource_version: str,
    *,
    runtime_id: str,
    observed_at: str,
    epoch: int | None,
    uid: str | None = None,
) -> changes.ChangeRecord:
    """The tombstone of an object that is gone (``resource_version``: a collection
    resourceVersion read after the deletion)."""
    return changes.watch_tombstone(
        watch=item.watch,
        runtime_id=runtime_id,
        namespace=item.namespace,
        name=item.name,
        uid=item.uid if uid is None else uid,
        resource_version=resource_version,
        source="webhook",
        observed_at=observed_at,
        epoch=epoch,
    )


def key_of(record: Mapping[str, Any]) -> keyqueue.Key:
    """The queue key a record was sent for (its Watch's)."""
    return keyqueue.key_of(str(record["namespace"]), str(record["name"]), str(record["watch"]))


def by_version(records: Sequence[changes.ChangeRecord]) -> list[list[changes.ChangeRecord]]:
    """The records grouped by the version they leave as (``conversion.sent_as_v1``), in
    order: a batch is of one version; both occur only while a runtime gets its Watch list."""
    groups: dict[bool, list[changes.ChangeRecord]] = {}
    for rec in records:
        groups.setdefault(conversion.sent_as_v1(rec), []).append(rec)
    return list(groups.values())


def stale_by_epoch(
    records: Sequence[changes.ChangeRecord], results: Sequence[Mapping[str, object]], epoch: int
) -> list[changes.ChangeRecord]:
    """The records the listener found stale that were of an older epoch than ``epoch``
    (results are in the order of the records)."""
    return [
        rec
        for rec, r in zip(records, results, strict=False)
        if r.get("outcome") == "stale" and rec.get("epoch", epoch) < epoch
    ]


def result_key(result: Mapping[str, object], rec: changes.ChangeRecord | None) -> keyqueue.Key:
    """The key a listener's result is of: its record's (results are in the records' order;
    the record names its Watch), else the result's namespace and name."""
    ns, name = str(result.get("namespace")), str(result.get("name"))
    if rec is not None and (rec["namespace"], rec["name"]) == (ns, name):
        return key_of(rec)
    return keyqueue.key_of(ns, name)


def tombstone_version(list_rv: str, own_rv: str) -> str:
    """A tombstone's resourceVersion: the collection resourceVersion the API server gave for
    a list read after the deletion (an etcd revision, never below the deleted object's own),
    else the object's own from the AdmissionReview. The review's never raises it: anyone who
    reaches the webhook can write a review, and a tombstone at a forged, huge
    resourceVersion would make every later record of its key stale (issue 38)."""
    return list_rv or own_rv or "0"
