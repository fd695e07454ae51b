"""The listener's HTTP API as its clients write it (pure): the paths of its routes, the body
of a POST of changes, the epoch report of a state listing, the epoch in its answers.

``tether.runtime.sender.ListenerClient`` calls these routes; the listener serves them
(docs/api.md).
"""

from __future__ import annotations

import urllib.parse
from collections.abc import Sequence
from typing import Any, NamedTuple

import orjson

from tether.wire import changes, conversion

# the error of the listener's 403 for records no Watch in force admits (the whole request is
# refused: a sender re-sends a batch's records one by one to keep the admitted ones)
WATCH_REFUSAL = "refused by the watches"


class EpochReport(NamedTuple):
    """What the poller reports with the first page of a state listing (``listener.fleet.epochs``):
    its cluster's identity, and, when it found its history went back, the epoch whose
    digest it read and the collection resourceVersion it listed at afterwards."""

    identity: str = ""
    epoch: int | None = None
    collection_rv: str = ""


def changes_body(records: Sequence[changes.ChangeRecord]) -> bytes:
    """One record alone, several as a list of their version; the records of the built-in
    Watch leave as v1 records (``conversion.on_wire``: the listener may be of the previous
    version)."""
    return joined(records, encoded(records))


def encoded(records: Sequence[changes.ChangeRecord]) -> list[bytes]:
    """Each record as it is sent (``conversion.on_wire``), compact JSON in UTF-8 (orjson):
    encoded once, then measured and joined into bodies (``joined``)."""
    return [orjson.dumps(r) for r in conversion.on_wire(records)]


def joined(records: Sequence[changes.ChangeRecord], parts: Sequence[bytes]) -> bytes:
    """The body of ``records`` (one version) from their ``encoded`` parts, without encoding
    a record again: one alone, several inside a list of their version."""
    if not parts or len(parts) != len(records):
        raise ValueError("no records to send" if not parts else "one part per record")
    if len(parts) == 1:
        return parts[0]
    head: Any = changes.batch(conversion.on_wire(records[:1]))
    head.pop("items")
    return b"".join((orjson.dumps(head)[:-1], b',"items":[', b",".join(parts), b"]}"))


def changes_path(runtime_id: str) -> str:
    return f"/v1/runtimes/{urllib.parse.quote(runtime_id, safe='')}/changes"


def epoch_in(value: object) -> int | None:
    """An epoch in a listener's answer; None when absent or not one."""
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= changes.MAX_EPOCH:
        return value
    return None


def state_path(
    runtime_id: str, limit: int, token: str, report: EpochReport | None = None, watch: str = ""
) -> str:
    """The state listing's path; the report goes with the first page only; ``watch``:
    only that Watch's records (``?watch=NAME``, on every page)."""
    params: dict[str, str | int] = {"limit": limit}
    if watch:
        params["watch"] = watch
    if token:
        params["continue"] = token
    elif report is not None:
        if report.identity:
            params["identity"] = report.identity
        if report.epoch is not None and report.collection_rv:
            params["epoch"] = report.epoch
            params["collectionResourceVersion"] = report.collection_rv
    query = urllib.parse.urlencode(params)
    return f"/v1/runtimes/{urllib.parse.quote(runtime_id, safe='')}/state?{query}"


def summary_path(runtime_id: str, identity: str = "") -> str:
    """The state summary's path; the runtime's identity goes with it (``listener.fleet.epochs``:
    a rebuilt cluster starts a new epoch before its hashes are compared)."""
    path = f"/v1/runtimes/{urllib.parse.quote(runtime_id, safe='')}/state/summary"
    return path + "?" + urllib.parse.urlencode({"identity": identity}) if identity else path


def watch_summary_path(runtime_id: str, watch: str, identity: str = "") -> str:
    """A Watch's state summary's path (``listener.edge.watchstate``); the identity as with
    the runtime's summary."""
    rid, name = urllib.parse.quote(runtime_id, safe=""), urllib.parse.quote(watch, safe="")
    path = f"/v1/runtimes/{rid}/watches/{name}/summary"
    return path + "?" + urllib.parse.urlencode({"identity": identity}) if identity else path


def bucket_path(runtime_id: str, bucket: int) -> str:
    return f"/v1/runtimes/{urllib.parse.quote(runtime_id, safe='')}/state/buckets/{bucket}"
