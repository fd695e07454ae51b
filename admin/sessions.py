"""Sign-in sessions of the admin pages that survive a restart and work on every replica.

A session is made after TokenReview accepted a token for the admin pages' audience and
SubjectAccessReview allowed the page the sign-in leads to (``admin.login``). Its cookie value
is the session itself, sealed (``admin.sessioncookie``: AES-256-GCM under the key the
replicas share): what SubjectAccessReview needs (``auth.Identity``), its issue and expiry
times and a random session ID (``secrets.token_urlsafe(16)``, 128 bits), never the token.
Any replica, and the same one after a restart, opens it: a sign-in costs the KCP no write.

A session ends at its expiry (the sign-in lifetime, never past the token's own expiry) or
at sign-out, which records it in the sign-out ledger (``admin.signouts``: one ConfigMap,
bounded, read by every replica at most every ``SIGNOUT_CACHE_SECONDS``): a copy of the
cookie is then worthless on this replica at once and on every other within that delay.

What each request costs: opening the cookie (AES-GCM, microseconds) and a look-up in the
ledger's cached copy; the KCP is read once per ``SIGNOUT_CACHE_SECONDS`` per replica at most.
A sign-out costs one read and one write (more only on a conflict with another sign-out).

Bounds: the server holds no state per session, so signing in again and again fills nothing
and evicts nobody (what the old per-user and total session caps were for); the ledger is
bounded per user and in all (``admin.signouts``).
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable, Sequence

from admin import auth, sessioncookie, signouts

MAX_ID = sessioncookie.MAX_VALUE  # longer cookie values are not opened


class Sessions:
    def __init__(
        self,
        keys: Callable[[], Sequence[bytes]],
        ledger: signouts.Ledger,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self._keys, self.ledger, self._wall = keys, ledger, wall

    def create(self, who: auth.Identity, seconds: float) -> str:
        """The cookie value of a new session of ``who`` that lasts ``seconds``;
        ``sessioncookie.TooLarge`` when the identity does not fit a cookie."""
        now = self._wall()
        claims = sessioncookie.Claims(secrets.token_urlsafe(16), who, now, now + seconds)
        return sessioncookie.seal(self._keys()[0], claims)

    def _open(self, value: str) -> sessioncookie.Claims | None:
        if not value or len(value) > MAX_ID:
            return None
        return sessioncookie.open_(self._keys(), value, self._wall())

    def get(self, value: str) -> auth.Identity | None:
        """Who the cookie ``value`` is, None when it is no session (forged, expired, signed
        out). Raises ``gateway.GatewayError`` when the ledger cannot be read."""
        claims = self._open(value)
        if claims is None:
            return None
        if signouts.ended(self.ledger.data(), claims.sid, claims.who.user, claims.issued):
            return None
        return claims.who

    def end(self, value: str) -> auth.Identity | None:
        """Signs the session of ``value`` out on every replica; who it was, None when it
        was no session. Raises ``signouts.Full``, ``signouts.Missing`` or
        ``gateway.GatewayError`` when the sign-out could not be recorded."""
        claims = self._open(value)
        if claims is None:
            return None
        if signouts.ended(self.ledger.data(), claims.sid, claims.who.user, claims.issued):
            return None
        self.ledger.record(signouts.Signout(claims.sid, claims.who.user, claims.expires))
        return claims.who
