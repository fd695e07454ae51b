"""The gateway's error tree: what the Kubernetes API (or the way to it) answered, as types.

    GatewayError              any other failure (an unexpected status)
    ├── Unavailable           API down, timeouts, connection errors, 5xx, 429: retry later
    │   ├── Forbidden         401/403: the API refuses *our* identity (RBAC, credentials)
    │   └── Bounded           a bound of a call into a runtime stopped it (``bounded``):
    │       ├── DeadlineExceeded    the call's wall-clock deadline passed
    │       ├── TooLarge            the answer is larger than allowed (or compressed)
    │       ├── Redirected          a 3xx answer (redirects are never followed)
    │       └── AddressRefused      the server resolves into a denied network
    ├── Rejected              400/413/422: the API refuses the object itself
    ├── NotFound              404
    ├── Conflict              409: exists already, or a stale resourceVersion/precondition
    └── Gone                  410: a list's continue token expired

``translate`` (pure) maps an exception of the ``kubernetes`` client, of urllib3 or an
``OSError`` to one of these; the gateway raises it ``from`` the original. Messages are
bounded and hold no object data, tokens or kubeconfig content: the operation, the status
and, for ``Rejected`` only, the API's own reason (which names the field it refused).
"""

from __future__ import annotations

import json

import urllib3
from kubernetes.client import exceptions

from tether.base import logs


class GatewayError(Exception):
    """A Kubernetes API call failed. ``status`` is the HTTP status when there was one."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(logs.bounded(message, 300))
        self.status = status


class Unavailable(GatewayError):
    """The API could not be used (down, slow, overloaded); retry later."""


class Forbidden(Unavailable):
    """401/403: the API refuses the caller's identity (missing RBAC, rejected credentials).
    ``by_admission``: the 403 is an admission plugin's refusal (a ValidatingAdmissionPolicy
    or a webhook denied the request), not RBAC."""

    by_admission = False


class Bounded(Unavailable):
    """A bound of a call into a runtime's API server stopped it; ``reason`` names which
    (a condition reason and a metric label: a fixed set)."""

    reason = "Bounded"


class DeadlineExceeded(Bounded):
    reason = "DeadlineExceeded"


class TooLarge(Bounded):
    reason = "ResponseTooLarge"


class Redirected(Bounded):
    reason = "RedirectRefused"


class AddressRefused(Bounded):
    reason = "AddressRefused"


class AddressRefusedError(urllib3.exceptions.NewConnectionError):
    """Raised inside urllib3 by the runtime connection (``bounded``): the server's name
    resolves into a denied network; nothing was sent. ``translate`` makes it
    ``AddressRefused``."""

    def __init__(self, conn: object, detail: str) -> None:
        super().__init__(conn, detail)  # type: ignore[arg-type]
        self.detail = detail


class Rejected(GatewayError):
    """400/413/422: the API refuses the object (invalid, too large); retrying will not help."""


class NotFound(GatewayError):
    """404: the object (or its namespace, or its resource type) does not exist."""


class Conflict(GatewayError):
    """409: the object exists already, or was changed since read (stale resourceVersion)."""


class Gone(GatewayError):
    """410: the snapshot a continue token refers to expired (etcd compacted it)."""


# what a broken exchange raises underneath (urllib3's errors and the socket's), for modules
# that read an answer themselves (``stream``) without importing urllib3
TRANSPORT: tuple[type[BaseException], ...] = (urllib3.exceptions.HTTPError, OSError)


_BY_STATUS: dict[int, type[GatewayError]] = {
    400: Rejected,
    401: Forbidden,
    403: Forbidden,
    404: NotFound,
    409: Conflict,
    410: Gone,
    413: Rejected,
    422: Rejected,
    429: Unavailable,
}


def api_reason(body: object) -> str:
    """The ``message`` of a Kubernetes ``Status`` answer, bounded; "" when there is none."""
    try:
        doc = json.loads(body) if isinstance(body, str | bytes) else None
    except ValueError:
        return ""
    message = doc.get("message") if isinstance(doc, dict) else None
    return logs.bounded(message, 300) if isinstance(message, str) else ""


def for_status(status: int, what: str, body: object = None) -> GatewayError:
    """The error for an HTTP answer ``status`` of the operation ``what``."""
    kind = _BY_STATUS.get(status) or (Unavailable if status >= 500 else GatewayError)
    message = f"{what}: HTTP {status}"
    if kind is Rejected and (reason := api_reason(body)):
        message += f": {reason}"
    error = kind(message, status)
    if isinstance(error, Forbidden) and status == 403:
        reason = api_reason(body)
        error.by_admission = "ValidatingAdmissionPolicy" in reason or "admission webhook" in reason
    return error


def translate(e: BaseException, what: str) -> GatewayError:
    """The gateway error for an exception of a Kubernetes call (raise it ``from e``)."""
    if isinstance(e, GatewayError):
        return e
    if isinstance(e, exceptions.ApiException):
        if e.status is None:
            return Unavailable(f"{what}: no answer ({e.reason or 'unknown'})")
        return for_status(int(e.status), what, e.body)
    if isinstance(e, urllib3.exceptions.MaxRetryError) and e.reason is not None:
        e = e.reason
    if isinstance(e, AddressRefusedError):
        return AddressRefused(f"{what}: {e.detail}")
    if isinstance(e, urllib3.exceptions.HTTPError | OSError):
        return Unavailable(f"{what}: API unreachable ({type(e).__name__})")
    if isinstance(e, ValueError):  # a 2xx answer that is not JSON (a proxy's page...)
        return Unavailable(f"{what}: the answer is not JSON")
    return GatewayError(f"{what}: {type(e).__name__}")
