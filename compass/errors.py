"""Compass's error tree: what the Director (or the way to it) answered, as types.

    DirectorError         (``kind``: the error's metric label and its name in statuses)
    ├── NotFound
    ├── InvalidInput
    ├── Unauthorized
    └── Unavailable
        ├── CircuitOpen
        └── InvalidAnswer

Messages are bounded and never hold tokens or credentials: the Director's own text (a
GraphQL error message) is scrubbed (``scrub``) before it is kept, so what reaches a log
line, the mapping status, an Event or the Lease cannot carry the client secret, the access
token, a bearer or JWT-shaped string, or a ``token=...``/``secret: ...`` value.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from tether.base import logs

REDACTED = "[redacted]"
_PATTERNS = (
    re.compile(r"(?i)\b(bearer|basic)\s+[A-Za-z0-9._~+/=-]+"),
    re.compile(r"\beyJ[A-Za-z0-9_-]*\.[A-Za-z0-9_-]*(\.[A-Za-z0-9_-]*)?"),  # JWT
    re.compile(
        r"(?i)\b([a-z_-]*(token|secret|password|passwd|credential|authorization|api[_-]?key)"
        r"[a-z_-]*)([\"']?\s*[:=]\s*[\"']?)[^\s,;&'\"}\[][^\s,;&'\"}]*"
    ),
    re.compile(r"[A-Za-z0-9+/_=-]*[A-Za-z0-9+/_][A-Za-z0-9+/_=]{39,}"),  # long opaque strings
)


def scrub(text: str, secrets: Iterable[str] = ()) -> str:
    """``text`` without the given secret values and without what looks like a credential."""
    for value in sorted((v for v in secrets if v and len(v) >= 4), key=len, reverse=True):
        text = text.replace(value, REDACTED)
    text = _PATTERNS[0].sub(lambda m: f"{m.group(1)} {REDACTED}", text)
    text = _PATTERNS[1].sub(REDACTED, text)
    text = _PATTERNS[2].sub(lambda m: f"{m.group(1)}{m.group(3)}{REDACTED}", text)
    return _PATTERNS[3].sub(REDACTED, text)


class DirectorError(Exception):
    kind = "error"

    def __init_subclass__(cls, *, kind: str, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls.kind = kind

    def __init__(self, message: str, *, secrets: Iterable[str] = ()) -> None:
        super().__init__(logs.bounded(scrub(message, secrets), 300))


class NotFound(DirectorError, kind="not_found"):
    """The Director does not know the object (GraphQL NotFound)."""


class InvalidInput(DirectorError, kind="invalid_input"):
    """The request was refused as invalid (InvalidData, NotUnique, ...)."""


class Unauthorized(DirectorError, kind="unauthorized"):
    """Credentials or scopes refused (HTTP 401/403, Unauthorized)."""


class Unavailable(DirectorError, kind="unavailable"):
    """5xx, 429, timeouts, connection errors, InternalError: retry later."""


class CircuitOpen(Unavailable, kind="circuit_open"):
    """Not even tried: the circuit breaker is open."""


class InvalidAnswer(Unavailable, kind="invalid_answer"):
    """The Director answered something Tether refuses to pass on (a token, connector URL or
    runtime ID of the wrong shape, ``queries``); retried with backoff like an outage."""


class NotLeading(Exception):
    """A Director write refused before it was sent: this process's leadership is not fresh
    (``tether.runtime.leader.LeaderElector.fresh``). Not a Director answer: no metric of the
    Director's, no backoff, nothing written; the Lease holder does the work."""


class RuntimeUnreachable(Exception):
    """The runtime's API (through its kubeconfig Secret) could not be used."""

    def __init__(self, message: str) -> None:
        super().__init__(logs.bounded(message, 300))


# Director apperrors codes (components/director/pkg/apperrors/consts.go)
_BY_CODE: dict[int, type[DirectorError]] = {
    10: Unavailable,  # InternalError
    11: Unavailable,  # UnknownError
    20: NotFound,
    21: InvalidInput,  # NotUnique
    22: InvalidInput,  # InvalidData
    23: Unauthorized,  # InsufficientScopes
    24: InvalidInput,  # TenantRequired
    25: InvalidInput,  # TenantNotFound
    26: Unauthorized,
    27: InvalidInput,  # InvalidOperation
    28: Unavailable,  # OperationTimeout
    29: InvalidInput,  # EmptyData
    30: InvalidInput,  # InconsistentData
}


def from_graphql_error(err: object, secrets: Iterable[str] = ()) -> DirectorError:
    """The error type for one entry of a GraphQL response's ``errors``; ``secrets``: values
    to remove from the Director's message (the access token, the client secret)."""
    if not isinstance(err, dict):
        return InvalidInput("malformed GraphQL error")
    ext = err.get("extensions") or {}
    code = ext.get("error_code") if isinstance(ext, dict) else None
    message = str(err.get("message") or "GraphQL error")[:4096]
    cls = _BY_CODE.get(code, InvalidInput) if isinstance(code, int) else InvalidInput
    return cls(message, secrets=secrets)


def from_http_status(status: int, what: str) -> DirectorError:
    if status in (401, 403):
        return Unauthorized(f"{what}: HTTP {status}")
    if status == 404:
        return Unavailable(f"{what}: HTTP 404 (endpoint missing)")
    if status in (408, 429) or status >= 500:
        return Unavailable(f"{what}: HTTP {status}")
    return InvalidInput(f"{what}: HTTP {status}")
