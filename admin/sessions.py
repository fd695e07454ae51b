"""Sign-in sessions of the admin pages: the cookie holds a random ID, the server who it is.

A session is made after TokenReview accepted a token for the admin pages' audience
(``admin.auth``). It keeps what SubjectAccessReview needs (``auth.Identity``: user, uid,
groups, extra), never the token. The ID is ``secrets.token_urlsafe(32)`` (256 random bits)
and the store is keyed by its SHA-256, so the IDs are not kept either. A session ends at its
expiry (the sign-in lifetime, never past the token's own expiry) or at sign-out, which
deletes it here: a copy of the cookie is worth nothing afterwards. At most ``max_sessions``
are kept: when full, expired sessions go first, then the oldest.

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
    def __init__(self, max_sessions: int, clock: Callable[[], float] = time.monotonic) -> None:
        self._max, self._clock = max(1, max_sessions), clock
        self._lock = threading.Lock()
        self._sessions: OrderedDict[str, Session] = OrderedDict()  # oldest first

    def create(self, who: auth.Identity, seconds: float) -> str:
        """A new session for ``who`` that lasts ``seconds``; its ID (for the cookie)."""
        sid = secrets.token_urlsafe(32)
        now = self._clock()
        with self._lock:
            if len(self._sessions) >= self._max:
                for key in [k for k, s in self._sessions.items() if s.expires <= now]:
                    del self._sessions[key]
            while len(self._sessions) >= self._max:
                self._sessions.popitem(last=False)
            self._sessions[_key(sid)] = Session(who, now + seconds)
        return sid

    def get(self, sid: str) -> auth.Identity | None:
        if not sid or len(sid) > MAX_ID:
            return None
        key = _key(sid)
        with self._lock:
            found = self._sessions.get(key)
            if found is None:
                return None
            if found.expires <= self._clock():
                del self._sessions[key]
                return None
            return found.who

    def delete(self, sid: str) -> bool:
        if not sid or len(sid) > MAX_ID:
            return False
        with self._lock:
            return self._sessions.pop(_key(sid), None) is not None

    def __len__(self) -> int:
        return len(self._sessions)
