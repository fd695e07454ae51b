"""OAuth2 client credentials for the Director: one cached access token, renewed before
``expires_in`` runs out (or at once after a 401). Thread-safe; the token never reaches
a log line or an error message."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import requests

from compass import errors


def renew_at(issued: float, expires_in: float) -> float:
    """When to renew a token: 80% of its lifetime, at least 5 s before it expires."""
    margin = max(5.0, expires_in * 0.2)
    return issued + max(0.0, expires_in - margin)


class TokenSource:
    def __init__(
        self,
        session: requests.Session,
        token_url: str,
        client_id: str,
        client_secret: str,
        *,
        verify: str | bool,
        timeout: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._session = session
        self._url = token_url
        self._auth = (client_id, client_secret)
        self._verify = verify
        self._timeout = timeout
        self._clock = clock
        self._lock = threading.Lock()
        self._token: str | None = None
        self._renew_at = 0.0
        self.fetches = 0

    def get(self) -> str:
        with self._lock:
            if self._token is not None and self._clock() < self._renew_at:
                return self._token
            return self._fetch()

    def secrets(self) -> tuple[str, ...]:
        """The values no message may show (``errors.scrub``): client secret, access token."""
        with self._lock:
            return tuple(v for v in (self._auth[1], self._token) if v)

    def invalidate(self) -> None:
        with self._lock:
            self._token = None

    def _fetch(self) -> str:
        self.fetches += 1
        t0 = self._clock()
        try:
            resp = self._session.post(
                self._url,
                data={"grant_type": "client_credentials"},
                auth=self._auth,
                verify=self._verify,
                timeout=self._timeout,
            )
        except requests.RequestException as e:
            raise errors.Unavailable(f"OAuth token endpoint: {type(e).__name__}") from None
        if resp.status_code != 200:
            raise errors.from_http_status(resp.status_code, "OAuth token endpoint")
        try:
            doc = resp.json()
            token = str(doc["access_token"])
            expires_in = float(doc.get("expires_in") or 300)
        except (ValueError, KeyError, TypeError):
            raise errors.Unavailable("OAuth token endpoint: malformed response") from None
        self._token = token
        self._renew_at = renew_at(t0, expires_in)
        return token
