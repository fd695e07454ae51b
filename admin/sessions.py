"""Sign-in sessions of the admin pages: the cookie holds a random ID, the server who it is.

A session is made after TokenReview accepted a token for the admin pages' audience
(``admin.auth``). It keeps what SubjectAccessReview needs (``auth.Identity``: user, uid,
groups, extra), never the token. The ID is ``secrets.token_urlsafe(32)`` (256 random bits)
and the store is keyed by its SHA-256, so the IDs are not kept either. A session ends at its
expiry (the sign-in lifetime, never past the token's own expiry) or at sign-out, which
deletes it here: a copy of the cookie is worth nothing afterwards. At most ``per_user`` are
kept for one user (``Identity.user``): a further sign-in ends that user's oldest session, never
anyone else's, so one credential signing in again and again cannot sign the other operators
out. At most ``max_sessions`` are kept in all: when full, expired sessions go first, then the
oldest (to end every other operator's session one would need ``max_sessions / per_user``
identities that RBAC lets see a page: ``admin.login`` checks that before a session is made).

Process memory: the admin part runs one gunicorn worker (``admin.server``), so every request
to a replica finds the same store; a restart signs everybody out (they sign in again).
"""

from __future__ import annotations

import hashlib
import secrets
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import NamedTuple

from admin import auth

MAX_ID = 128  # longer cookie values are not looked up


class Session(NamedTuple):
    who: auth.Identity
    expires: float  # on the store's clock


def _key(sid: str) -> str:
    return hashlib.sha256(sid.encode()).hexdigest()


class Store:
    def __init__(
        self, max_sessions: int, per_user: int, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._max, self._per_user, self._clock = max(1, max_sessions), max(1, per_user), clock
        self._lock = threading.Lock()
        self._sessions: OrderedDict[str, Session] = OrderedDict()  # oldest first
        self._by_user: dict[str, OrderedDict[str, None]] = {}  # user -> keys, oldest first

    def create(self, who: auth.Identity, seconds: float) -> str:
        """A new session for ``who`` that lasts ``seconds``; its ID (for the cookie)."""
        sid = secrets.token_urlsafe(32)
        now = self._clock()
        with self._lock:
            mine = self._by_user.get(who.user)
            if mine is not None and len(mine) >= self._per_user:
                for key in [k for k in mine if self._sessions[k].expires <= now]:
                    self._drop(key)
                while len(mine) >= self._per_user:  # this user's oldest, nobody else's
                    self._drop(next(iter(mine)))
            if len(self._sessions) >= self._max:
                for key in [k for k, s in self._sessions.items() if s.expires <= now]:
                    self._drop(key)
            while len(self._sessions) >= self._max:
                self._drop(next(iter(self._sessions)))
            key = _key(sid)
            self._sessions[key] = Session(who, now + seconds)
            self._by_user.setdefault(who.user, OrderedDict())[key] = None
        return sid

    def _drop(self, key: str) -> bool:
        """Ends the session stored under ``key`` (the lock held); whether there was one."""
        found = self._sessions.pop(key, None)
        if found is None:
            return False
        mine = self._by_user.get(found.who.user)
        if mine is not None:
            mine.pop(key, None)
            if not mine:
                del self._by_user[found.who.user]
        return True

    def of(self, user: str) -> int:
        """How many sessions ``user`` holds (expired ones included until they go)."""
        with self._lock:
            return len(self._by_user.get(user, ()))

    def get(self, sid: str) -> auth.Identity | None:
        if not sid or len(sid) > MAX_ID:
            return None
        key = _key(sid)
        with self._lock:
            found = self._sessions.get(key)
            if found is None:
                return None
            if found.expires <= self._clock():
                self._drop(key)
                return None
            return found.who

    def delete(self, sid: str) -> bool:
        if not sid or len(sid) > MAX_ID:
            return False
        with self._lock:
            return self._drop(_key(sid))

    def __len__(self) -> int:
        return len(self._sessions)
