"""Who may see the admin pages: the KCP decides, as kube-rbac-proxy does.

A bearer token (``Authorization: Bearer ...``, or the one pasted into the sign-in form, after
which the browser holds a session: ``admin.sessions``) is checked by
``Authorizer.identify``: the KCP's TokenReview API, asked with ``spec.audiences`` = the admin
pages' audience (``TETHER_ADMIN_TOKEN_AUDIENCE``, ``tether-admin``), says who it is, and the
answer counts only if its ``status.audiences`` holds that audience. So a token made for the
KCP's API (``kubectl create token`` without ``--audience``, a pod's ServiceAccount token) is
refused, and a token made for the pages (``--audience tether-admin``) is no credential for
the KCP's API (unless its ``--api-audiences`` lists that audience). ``Authorizer.allowed`` asks
SubjectAccessReview whether that user may ``get`` the page, a resource attribute::

    group: tether.kyma-project.io   resource: adminpages   name: fleet|runtime|compass|parts|rollout

so access is whatever RBAC grants (``manifests/kcp/admin/rbac.yaml`` has a ClusterRole
``tether-admin-viewer`` for all pages). Answers are cached ``cache_seconds`` (denials
and unknown tokens for at most 5 s), keyed by a SHA-256 of the token: the token itself is
kept only for the duration of the request, never logged, never in an error.

Bounded: tokens longer than ``MAX_TOKEN`` bytes are refused before the KCP is asked; the
cache holds at most ``MAX_ENTRIES`` answers; a TokenReview that is not answered from the
cache takes one from the caller's source bucket (``admin.throttle``: ``throttle.Throttled``
when it is empty, answered 429), and so does every sign-in (``identify(..., sign_in=True)``),
whatever the token: a token answered from the cache is no way around the budget there.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Any, NamedTuple

from admin import throttle
from tether.kube import apitypes, gateway

PAGES = ("fleet", "runtime", "compass", "parts", "rollout")
MAX_TOKEN = 16 * 1024
MAX_ENTRIES = 4096
NEGATIVE_SECONDS = 5.0


class Identity(NamedTuple):
    user: str
    uid: str
    groups: tuple[str, ...]
    extra: tuple[tuple[str, tuple[str, ...]], ...]


def token_key(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def review_body(token: str, audience: str) -> dict[str, Any]:
    return {
        "apiVersion": "authentication.k8s.io/v1",
        "kind": "TokenReview",
        "spec": {"token": token, "audiences": [audience]},
    }


def identity_of(review: dict[str, Any], audience: str) -> Identity | None:
    """Who the review says, if it authenticated the token for ``audience``."""
    status = review.get("status") or {}
    if not status.get("authenticated"):
        return None
    if audience not in (status.get("audiences") or []):
        return None
    user = status.get("user") or {}
    extra = user.get("extra") or {}
    return Identity(
        user=str(user.get("username", "")),
        uid=str(user.get("uid", "")),
        groups=tuple(str(g) for g in user.get("groups") or []),
        extra=tuple(
            sorted(
                (str(k), tuple(str(x) for x in v)) for k, v in extra.items() if isinstance(v, list)
            )
        ),
    )


def expiry_of(token: str) -> float | None:
    """The ``exp`` claim (seconds since the epoch) of a JWT, None for any other token. Read
    only from a token the KCP has just authenticated (TokenReview checked its signature)."""
    parts = token.split(".")
    if len(parts) != 3:
        return None
    try:
        payload = json.loads(base64.urlsafe_b64decode(parts[1] + "=" * (-len(parts[1]) % 4)))
    except (ValueError, binascii.Error):
        return None
    exp = payload.get("exp") if isinstance(payload, dict) else None
    return float(exp) if isinstance(exp, int | float) and not isinstance(exp, bool) else None


def access_body(who: Identity, page: str) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "user": who.user,
        "groups": list(who.groups),
        "resourceAttributes": {
            "group": apitypes.TETHER_GROUP,
            "resource": apitypes.ADMIN_PAGES,
            "name": page,
            "verb": "get",
        },
    }
    if who.uid:
        spec["uid"] = who.uid
    if who.extra:
        spec["extra"] = {k: list(v) for k, v in who.extra}
    return {"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview", "spec": spec}


class _Cache:
    def __init__(self, clock: Callable[[], float]) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._entries: OrderedDict[tuple[str, str], tuple[float, Any]] = OrderedDict()

    def get(self, key: tuple[str, str]) -> tuple[bool, Any]:
        with self._lock:
            hit = self._entries.get(key)
            if hit is None or hit[0] < self._clock():
                return False, None
            return True, hit[1]

    def put(self, key: tuple[str, str], value: Any, seconds: float) -> None:
        if seconds <= 0:
            return
        with self._lock:
            self._entries[key] = (self._clock() + seconds, value)
            self._entries.move_to_end(key)
            while len(self._entries) > MAX_ENTRIES:
                self._entries.popitem(last=False)


class Authorizer:
    """Raises ``gateway.GatewayError`` when the KCP cannot answer (the page answers 503)."""

    def __init__(
        self,
        kcp: gateway.Kube,
        cache_seconds: float,
        timeout: float,
        audience: str,
        limiter: throttle.Buckets,
        clock: Callable[[], float] = time.monotonic,
        on_review: Callable[[str], None] = lambda kind: None,
    ) -> None:
        self._kcp, self._seconds, self._timeout = kcp, cache_seconds, timeout
        self._audience, self._limiter = audience, limiter
        self._cache = _Cache(clock)
        self._on_review = on_review  # "token" or "access": one review sent to the KCP

    def identify(self, token: str, source: str, *, sign_in: bool = False) -> Identity | None:
        """Who ``token`` is for the admin pages' audience, or None. Raises
        ``throttle.Throttled`` when ``source`` has no review left: a page's bearer token
        answered from the cache is free, a sign-in (``sign_in``) always costs one, cached,
        malformed or not."""
        if sign_in:
            self._limiter.take(throttle.source_of(source))
        if not token or len(token) > MAX_TOKEN or not token.isascii() or not token.isprintable():
            return None
        key = ("id", token_key(token))
        hit, who = self._cache.get(key)
        if hit:
            return who  # type: ignore[no-any-return]
        if not sign_in:
            self._limiter.take(throttle.source_of(source))
        self._on_review("token")
        review = self._kcp.create(
            apitypes.TOKEN_REVIEWS, None, review_body(token, self._audience), timeout=self._timeout
        )
        found = identity_of(review, self._audience)
        self._cache.put(
            key, found, self._seconds if found else min(self._seconds, NEGATIVE_SECONDS)
        )
        return found

    def allowed(self, who: Identity, page: str) -> bool:
        key = ("sar:" + page, repr(who))
        hit, ok = self._cache.get(key)
        if hit:
            return bool(ok)
        self._on_review("access")
        review = self._kcp.create(
            apitypes.SUBJECT_ACCESS_REVIEWS, None, access_body(who, page), timeout=self._timeout
        )
        ok = bool((review.get("status") or {}).get("allowed"))
        self._cache.put(key, ok, self._seconds if ok else min(self._seconds, NEGATIVE_SECONDS))
        return ok
