"""Reading the persisted object back from the runtime's API (level-triggered forwarding).

``judge`` (pure) decides from what the API returned: a live record when the object's
resourceVersion moved past the admission's old one, a tombstone when it is gone after an
UPDATE/DELETE, ``wait`` while the write is not yet visible, and a drop once the wait is
over (a CREATE that never appeared or a write that never landed was rejected after this
webhook: not a change). ``Reader`` does the GETs through the gateway.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping
from typing import Any, Literal, NamedTuple

from tether.kube import apitypes, gateway
from tether.wire import watches, watchkinds
from webhook import keyqueue

Result = Literal["live", "tombstone", "wait", "rejected", "unchanged"]


class Judgement(NamedTuple):
    result: Result
    obj: Mapping[str, Any] | None = None


class ReadError(RuntimeError):
    """The runtime API could not be read (retried by the caller)."""


class Forbidden(ReadError):
    """This ServiceAccount may not read the resource (RBAC): in Watch mode a kind whose read
    grant nobody gave (docs/webhook.md, "Watch mode"), not retried."""


def error_delay(errors: int, rand: Callable[[], float] = random.random) -> float:
    """Delay before reading a key back again after ``errors`` runtime API errors (pure with
    ``rand``): 0.2 s doubling to 2 s, each drawn in its upper half (jitter). A runtime API
    answering 5xx is not asked for every held key five times a second (before: every
    0.2 s, 15 reads per key in the fault suite's 12 s of 503s)."""
    return min(2.0, 0.2 * (1 << min(errors, 30))) * (0.5 + rand() / 2)


def judge(item: keyqueue.Item, found: Mapping[str, Any] | None, expired: bool) -> Judgement:
    """What to do with ``item`` given the object read back (None: absent).

    An entry of several admissions waits while the object is still at the newest one's old
    version: that write is admitted but not yet persisted, and the version read is one the
    burst already passed (sent, the newest write would reach the KCP only by the poller).
    At the deadline what was read is sent: the newest write was refused after this webhook
    (by another webhook, say), and the object did change since the first admission."""
    if found is not None:
        rv = str((found.get("metadata") or {}).get("resourceVersion") or "")
        newest = item.newest_old_resource_version
        if newest is not None and rv == newest and newest != item.old_resource_version:
            return Judgement("live", found) if expired else Judgement("wait")
        if rv != item.old_resource_version:
            return Judgement("live", found)
        return Judgement("unchanged" if expired else "wait")
    if item.operation == "CREATE":
        return Judgement("rejected" if expired else "wait")
    return Judgement("tombstone")


def resource_of(target: watches.Target | None) -> apitypes.Resource:
    """The API resource of a Watch's target (None: ConfigMaps, without Watches)."""
    if target is None:
        return gateway.CONFIGMAPS
    return apitypes.watched(target.group, target.version, target.resource)


class Reader:
    """GETs objects (ConfigMaps without Watches, a Watch's target in Watch mode) as plain JSON dicts
    (camelCase, as served), through the gateway: the read-back runs in the webhook's worker
    processes, next to the admission handler, so its CPU cost per object matters (the gateway's raw
    calls cost about half a typed one)."""

    def __init__(self, skr: gateway.Kube, timeout: float = 5.0) -> None:
        self._skr = skr
        self._timeout = timeout

    def get(
        self, namespace: str, name: str, target: watches.Target | None = None
    ) -> dict[str, Any] | None:
        res = resource_of(target)
        try:
            return self._skr.get_or_none(res, namespace, name, timeout=self._timeout)
        except gateway.GatewayError as e:
            kind = Forbidden if isinstance(e, gateway.Forbidden) else ReadError
            raise kind(f"GET {res.plural} {namespace}/{name}: {_why(e)}") from e

    def absent_at(
        self, namespace: str, name: str, target: watches.Target | None = None
    ) -> tuple[str, dict[str, Any] | None]:
        """A collection resourceVersion read now, and the object if it exists after all."""
        res = resource_of(target)
        try:
            doc = self._skr.list(
                res, namespace, field_selector=f"metadata.name={name}", timeout=self._timeout
            )
        except gateway.GatewayError as e:
            kind = Forbidden if isinstance(e, gateway.Forbidden) else ReadError
            raise kind(f"LIST {res.plural} {namespace} name={name}: {_why(e)}") from e
        items = watchkinds.stamp_items(doc)  # each with its kind, checked before it is sent
        rv = str((doc.get("metadata") or {}).get("resourceVersion") or "")
        return rv, (items[0] if items else None)


def _why(e: gateway.GatewayError) -> str:
    return f"HTTP {e.status}" if e.status else type(e.__cause__ or e).__name__
