"""What the injector reads of one runtime, bounded (pure: plain data in, a verdict out).

The injector holds no values between reconciles: it reads one runtime's records when it
reconciles that runtime (docs/injector.md, "Memory"). Before it reads their values it lists
their metadata (``Census.of``): how many records, how many bytes the listener counted for
them (its size annotation, ``SIZE_ANNOTATION``), and the highest KCP resourceVersion. Over
``Limits.records`` or ``Limits.bytes`` (the listener's quota: what a runtime may store) the
runtime is refused without reading a value. Then the values, record by record
(``Tally.add``): a live record with more keys than ``Limits.keys_per_record`` (the cap for
Watches that inject), more merged keys than ``Limits.keys`` (one map of one target), or more
bytes than ``Limits.bytes`` (records written before the size annotation existed are counted
by their values) refuses the runtime, and the reading stops there.

A refusal (``Refusal``) names the bound, what was found and the limit: counts only, never a
key or a value; ``Refusal.message`` is the text of the target's condition.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Literal, NamedTuple

SIZE_ANNOTATION = "tether.kyma-project.io/size"  # the listener's (listener.storage.rules)
# a tombstone of a key never stored (listener.storage.records): the listener bounds those
# apart from the records quota, and they carry no value; not counted here either
UNBACKED_LABEL = "tether.kyma-project.io/unbacked"

Bound = Literal["records", "bytes", "keys", "keys_per_record"]
BOUNDS: tuple[Bound, ...] = ("records", "bytes", "keys", "keys_per_record")
SETTING: dict[Bound, str] = {
    "records": "TETHER_INJECTOR_MAX_RECORDS",
    "bytes": "TETHER_INJECTOR_MAX_BYTES",
    "keys": "TETHER_INJECTOR_MAX_KEYS",
    "keys_per_record": "TETHER_INJECTOR_MAX_KEYS_PER_RECORD",
}
_WHAT: dict[Bound, str] = {
    "records": "records",
    "bytes": "bytes of records",
    "keys": "keys merged",
    "keys_per_record": "keys in one record",
}


class Limits(NamedTuple):
    records: int  # records (tombstones included) of one runtime and Watch
    bytes: int  # their JSON size as the listener counts it
    keys: int  # keys merged into the target
    keys_per_record: int  # keys of one live record's data


class Refusal(NamedTuple):
    bound: Bound
    found: int  # at least this many (the reading stops at the first bound exceeded)
    limit: int

    def message(self) -> str:
        return (
            f"refused: {self.found} {_WHAT[self.bound]} over the injector's bound of "
            f"{self.limit} ({SETTING[self.bound]}); nothing is injected until the "
            "runtime's records fit"
        )


def _int(text: object) -> int:
    return (
        int(text)
        if isinstance(text, str) and text.isascii() and text.isdigit() and len(text) <= 18
        else 0
    )


def declared(obj: Mapping[str, Any]) -> int:
    """The bytes the listener counted for a stored object (its size annotation; 0 without)."""
    meta = obj.get("metadata")
    annotations = meta.get("annotations") if isinstance(meta, Mapping) else None
    return _int(annotations.get(SIZE_ANNOTATION)) if isinstance(annotations, Mapping) else 0


def unbacked(obj: Mapping[str, Any]) -> bool:
    """A tombstone of a key never stored (not counted against any bound)."""
    meta = obj.get("metadata")
    labels = meta.get("labels") if isinstance(meta, Mapping) else None
    return isinstance(labels, Mapping) and labels.get(UNBACKED_LABEL) == "true"


class Census(NamedTuple):
    """What the metadata of one runtime's records say."""

    records: int
    bytes: int  # the sum of their size annotations (0 for an object without one)
    revision: int  # the highest resourceVersion (0: none)

    @classmethod
    def of(cls, metas: Iterable[Mapping[str, Any]]) -> Census:
        records = size = high = 0
        for obj in metas:
            meta = obj.get("metadata")
            if unbacked(obj):
                continue
            records += 1
            size += declared(obj)
            if isinstance(meta, Mapping):
                high = max(high, _int(meta.get("resourceVersion")))
        return cls(records, size, high)

    def refusal(self, limits: Limits) -> Refusal | None:
        if self.records > limits.records:
            return Refusal("records", self.records, limits.records)
        if self.bytes > limits.bytes:
            return Refusal("bytes", self.bytes, limits.bytes)
        return None

    def fingerprint(self) -> tuple[int, int]:
        """Changes with every write (a higher resourceVersion) and every removal (fewer
        records): a refused runtime whose fingerprint did not move is refused again
        without reading its values."""
        return self.records, self.revision


class Tally:
    """The values of one runtime's records as they are read, against ``limits``."""

    def __init__(self, limits: Limits) -> None:
        self.limits = limits
        self.records = 0
        self.bytes = 0
        self.keys: set[str] = set()
        self.refusal: Refusal | None = None

    def add(self, data: Mapping[str, str], declared: int, live: bool) -> Refusal | None:
        """One record (``data``: its string values; ``declared``: its size annotation, 0
        when it has none; ``live``: not a tombstone). Returns the refusal, once one bound
        is exceeded (and every later call too)."""
        if self.refusal is not None:
            return self.refusal
        lim = self.limits
        self.records += 1
        self.bytes += max(declared, sum(len(k) + len(v) for k, v in data.items()) if live else 0)
        if self.records > lim.records:
            self.refusal = Refusal("records", self.records, lim.records)
        elif self.bytes > lim.bytes:
            self.refusal = Refusal("bytes", self.bytes, lim.bytes)
        elif live and len(data) > lim.keys_per_record:
            self.refusal = Refusal("keys_per_record", len(data), lim.keys_per_record)
        elif live:
            self.keys.update(data)
            if len(self.keys) > lim.keys:
                self.refusal = Refusal("keys", len(self.keys), lim.keys)
        return self.refusal
