"""Sign-outs every replica honours: one ConfigMap in Tether's namespace
(``tether-admin-signouts``, shipped empty by the manifests; the admin part may only ``get`` and
``update`` it, by name) lists the sessions that ended before their cookie's expiry.

A cookie (``admin.sessioncookie``) is valid on every replica until it expires; a sign-out
writes an entry here, and every replica reads the ConfigMap at most once per
``cache_seconds`` (only when a request with a cookie comes, so an idle replica reads nothing):
a copy of the cookie is refused by the replica that signed it out at once, by the others
within ``cache_seconds``. A read that fails fails the request (503): a sign-out is never
silently ignored.

The entries (``data``), pure decisions below:

    s.<32 hex of SHA-256(session ID)>: "<cookie expiry> <16 hex of SHA-256(user)>"
    u.<32 hex of SHA-256(user)>:       "<cutoff> <until>"

An ``s.`` entry ends one session; it goes once the cookie would have expired anyway. A
``u.`` entry ends every session of that user issued up to ``cutoff`` (the cookie's issue
time, the replicas' wall clocks), kept until ``until`` (cutoff + the longest session). A
user holds at most ``per_user`` ``s.`` entries: the next sign-out of that user replaces them
by one ``u.`` entry (its other browsers are signed out too), so one operator signing in and
out again and again costs one entry, not thousands; when the whole ConfigMap holds
``max_entries``, a sign-out becomes the ``u.`` entry of its user. Only when ``max_entries``
distinct users have signed out within one session lifetime is a sign-out refused (``Full``,
answered 503). The session IDs and user names are stored as hashes: the ConfigMap names no
one, and an entry is no credential (a cookie needs the key).
"""

from __future__ import annotations

import hashlib
import threading
import time
from collections.abc import Callable, Mapping
from typing import NamedTuple

from tether.kube import apitypes, gateway

NAME = "tether-admin-signouts"
SESSION, USER = "s.", "u."


class Full(Exception):
    """The ConfigMap holds ``max_entries`` users' sign-outs; nothing was written."""


class Missing(Exception):
    """The ConfigMap does not exist (the manifests ship it); nothing was written."""


class Bounds(NamedTuple):
    per_user: int
    max_entries: int
    lifetime: float  # the longest session, seconds


class Signout(NamedTuple):
    sid: str
    user: str
    expires: float  # the cookie's expiry, seconds since the epoch


def _hash(text: str, n: int) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:n]


def session_key(sid: str) -> str:
    return SESSION + _hash(sid, 32)


def user_key(user: str) -> str:
    return USER + _hash(user, 32)


def _numbers(value: str) -> tuple[float, str] | None:
    first, _, second = value.partition(" ")
    try:
        return float(first), second
    except ValueError:
        return None


def ended(data: Mapping[str, str], sid: str, user: str, issued: float) -> bool:
    """Whether the session ``sid`` of ``user`` issued at ``issued`` was signed out. An entry
    that does not parse (edited by hand) ends what it names: fail closed."""
    if session_key(sid) in data:
        return True
    cut = data.get(user_key(user))
    if cut is None:
        return False
    parsed = _numbers(cut)
    return parsed is None or issued <= parsed[0]


def _alive(key: str, value: str, now: float) -> bool:
    parsed = _numbers(value)
    if parsed is None:  # edited by hand: kept (it ends what it names) until edited again
        return True
    if key.startswith(SESSION):
        return parsed[0] > now
    try:
        return float(parsed[1]) > now
    except ValueError:
        return True


def record(data: Mapping[str, str], s: Signout, now: float, b: Bounds) -> dict[str, str]:
    """The entries after the sign-out ``s`` at ``now``: expired entries dropped, then ``s``
    as an ``s.`` entry, or as its user's ``u.`` entry when the user holds ``per_user`` or
    the whole map ``max_entries``. ``Full`` when even that does not fit."""
    out = {k: v for k, v in data.items() if _alive(k, v, now)}
    owner = _hash(s.user, 16)
    mine = [
        k
        for k, v in out.items()
        if k.startswith(SESSION) and v.partition(" ")[2] == owner and k != session_key(s.sid)
    ]
    if len(mine) < b.per_user and len(out) < b.max_entries:
        out[session_key(s.sid)] = f"{s.expires:.3f} {owner}"
        return out
    for k in mine:
        del out[k]
    out.pop(session_key(s.sid), None)
    out[user_key(s.user)] = f"{now:.3f} {now + b.lifetime:.3f}"
    if len(out) > b.max_entries:
        raise Full(f"{len(out) - 1} sign-outs recorded, at most {b.max_entries}")
    return out


class Ledger:
    """The ConfigMap, read through a cache of ``cache_seconds`` and written by sign-outs.
    Raises ``gateway.GatewayError`` when the KCP cannot answer."""

    def __init__(
        self,
        kcp: gateway.Kube,
        namespace: str,
        cache_seconds: float,
        timeout: float,
        bounds: Bounds,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self._kcp, self._ns, self._seconds, self._timeout = kcp, namespace, cache_seconds, timeout
        self.bounds = bounds
        self._clock, self._wall = clock, wall
        self._lock = threading.Lock()
        self._data: dict[str, str] = {}
        self._read = float("-inf")
        self.reads = 0

    def _get(self) -> dict[str, object] | None:
        self.reads += 1
        return self._kcp.get_or_none(apitypes.CONFIGMAPS, self._ns, NAME, timeout=self._timeout)

    def data(self) -> Mapping[str, str]:
        """The entries, read again when the last read is older than ``cache_seconds`` (one
        reader at a time; the others wait for its answer). A missing ConfigMap: none."""
        with self._lock:
            if self._clock() - self._read >= self._seconds:
                obj = self._get()
                self._data = _entries(obj)
                self._read = self._clock()
            return self._data

    def __len__(self) -> int:
        return len(self._data)

    def record(self, s: Signout) -> None:
        """Writes the sign-out ``s`` (optimistic concurrency: read, decide, replace with
        the read's resourceVersion, again on a conflict, at most 5 times)."""
        with self._lock:
            for attempt in range(5):
                obj = self._get()
                if obj is None:
                    raise Missing(f"ConfigMap {self._ns}/{NAME} does not exist")
                data = record(_entries(obj), s, self._wall(), self.bounds)
                body = dict(obj)
                body["data"] = data
                try:
                    self._kcp.replace(
                        apitypes.CONFIGMAPS, self._ns, NAME, body, timeout=self._timeout
                    )
                except gateway.Conflict:
                    if attempt == 4:
                        raise
                    continue
                self._data, self._read = data, self._clock()
                return


def _entries(obj: Mapping[str, object] | None) -> dict[str, str]:
    data = (obj or {}).get("data")
    if not isinstance(data, dict):
        return {}
    return {str(k): str(v) for k, v in data.items()}
