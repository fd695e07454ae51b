"""The consumer library's decisions, as plain data (``tether.runtime.consumer`` does the I/O).

* ``parse``: a stored ``RuntimeConfigMap`` object → ``Item`` (its key, Kyma CR name, record,
  revision), or None for an object that is not a record;
* ``Known``: what a ``Consumer`` remembers per key (its revision and Kyma CR name, nothing
  of the record), bounded by ``max_keys``, and the rule that an older revision of a key is
  never delivered after a newer one;
* ``Schedule``: the nudge form's timing per Kyma CR (the first change at once, the rest of an
  interval coalesced into one call at its end).
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Mapping
from typing import Any, NamedTuple

from tether.base import numbers
from tether.kube import apitypes
from tether.wire import watches

Key = tuple[str, str, str]  # runtime ID, namespace, name (one Watch: the Consumer's)


class ConsumerError(Exception):
    """The consumer cannot go on (a bound was exceeded); retrying the same would fail again."""


class TooManyKeys(ConsumerError):
    """More keys than the consumer may remember (``max_keys``)."""


class Item(NamedTuple):
    key: Key
    watch: str
    kyma: str
    record: Mapping[str, Any]
    revision: int


def parse(obj: Any, watch: str) -> Item | None:
    """The record a stored object holds; None when it is not one (no spec with runtimeId,
    namespace and name as strings, or no numeric resourceVersion)."""
    if not isinstance(obj, Mapping):
        return None
    spec, meta = obj.get("spec"), obj.get("metadata")
    if not isinstance(spec, Mapping) or not isinstance(meta, Mapping):
        return None
    parts = (spec.get("runtimeId"), spec.get("namespace"), spec.get("name"))
    revision = numbers.revision_of(meta)
    if revision is None or not all(isinstance(p, str) and p for p in parts):
        return None
    labels = meta.get("labels")
    labels = labels if isinstance(labels, Mapping) else {}
    kyma = labels.get(apitypes.KYMA_NAME_LABEL)
    stored_watch = spec.get("watch") or labels.get(watches.WATCH_LABEL) or watch
    # a runtime's keys share its ID, namespaces and Kyma CR name: one copy each in memory
    return Item(
        (sys.intern(str(parts[0])), sys.intern(str(parts[1])), str(parts[2])),
        str(stored_watch),
        sys.intern(kyma) if isinstance(kyma, str) else "",
        spec,
        revision,
    )


class Known:
    """Per key: the revision last delivered and the Kyma CR name (for a removal)."""

    def __init__(self, max_keys: int, scope: str) -> None:
        self.max_keys = max_keys
        self.scope = scope
        self._keys: dict[Key, tuple[int, str]] = {}

    def __len__(self) -> int:
        return len(self._keys)

    def revision(self, key: Key) -> int | None:
        got = self._keys.get(key)
        return got[0] if got else None

    def kyma(self, key: Key) -> str:
        got = self._keys.get(key)
        return got[1] if got else ""

    def _room(self, key: Key) -> None:
        if key not in self._keys and len(self._keys) >= self.max_keys:
            raise TooManyKeys(
                f"{self.scope}: more than {self.max_keys} keys (max_keys); "
                "narrow the consumer (runtime=...) or raise the bound"
            )

    def event(self, item: Item) -> bool:
        """A watch event's object: True (remembered) when it is newer than what was
        delivered for its key, False (drop it) when it is not."""
        known = self.revision(item.key)
        if known is not None and item.revision <= known:
            return False
        self._room(item.key)
        self._keys[item.key] = (item.revision, item.kyma)
        return True

    def deleted(self, item: Item) -> bool:
        """A deletion: True (forgotten) unless an older one than what was delivered."""
        known = self.revision(item.key)
        if known is not None and item.revision < known:
            return False
        self._keys.pop(item.key, None)
        return True

    def listed(self, item: Item) -> bool:
        """A (re)list's object: delivered unless older than what was delivered."""
        known = self.revision(item.key)
        if known is not None and item.revision < known:
            return False
        self._room(item.key)
        self._keys[item.key] = (item.revision, item.kyma)
        return True

    def missing(self, listed: Iterable[Key]) -> list[tuple[Key, str]]:
        """The keys known and not ``listed`` (with their Kyma CR names), forgotten."""
        keep = set(listed)
        gone = [(k, v[1]) for k, v in self._keys.items() if k not in keep]
        for k, _ in gone:
            del self._keys[k]
        return gone


class Schedule:
    """When to call the nudge handler for each Kyma CR (pure: times are given).

    ``offer(kyma, now)``: a change; ``due(now)``: the Kyma CRs to call now (each marked
    called at ``now``); ``next_at()``: the earliest time something is due (None: nothing
    pending). State per Kyma CR: the last call and whether a change waits; a Kyma CR with
    nothing pending and its last call an interval ago is forgotten (bounded by the CRs
    active within one interval)."""

    def __init__(self, interval: float) -> None:
        self.interval = interval
        self._last: dict[str, float] = {}
        self._pending: dict[str, float] = {}  # Kyma CR → when due

    def offer(self, kyma: str, now: float) -> None:
        if kyma in self._pending:
            return
        last = self._last.get(kyma)
        self._pending[kyma] = (
            now if last is None or now - last >= self.interval else last + self.interval
        )

    def due(self, now: float) -> list[str]:
        out = sorted((at, k) for k, at in self._pending.items() if at <= now)
        for _, k in out:
            del self._pending[k]
            self._last[k] = now
        for k in [
            k
            for k, at in self._last.items()
            if now - at >= self.interval and k not in self._pending
        ]:
            del self._last[k]
        return [k for _, k in out]

    def next_at(self) -> float | None:
        return min(self._pending.values(), default=None)

    def pending(self) -> int:
        return len(self._pending)
