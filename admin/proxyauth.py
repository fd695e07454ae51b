"""Who a trusted authenticating proxy says the caller is (pure): the Kubernetes front-proxy
model (kube-apiserver's ``--requestheader-*``), for oauth2-proxy, kube-rbac-proxy or an
ingress that authenticates the user and forwards the request with headers naming them.

Trusted only from the proxy itself: the request came over TLS with a client certificate
that the handshake verified against ``TETHER_ADMIN_PROXY_CA_FILE`` (that CA alone, for client
authentication) and whose common name is in ``TETHER_ADMIN_PROXY_ALLOWED_NAMES``. The caller
(``admin.guard``) passes that CN, or None. ``decide``:

- no identity header (none of the user or group headers present): None, the request is
  judged as any other (session cookie, bearer token);
- identity headers without a client certificate, or from a certificate whose CN is not
  allowed: ``Refused`` (401), never a sign-in, whatever else the request carries;
- else the user (the first user header that is set) and the groups (every group header,
  each value split at commas: repeated headers arrive joined by commas) as an
  ``auth.Identity``, plus ``system:authenticated`` as the API server adds it; the caller
  asks the same SubjectAccessReview as for a token.

Bounded: a user of at most ``MAX_USER`` characters, at most ``MAX_GROUPS`` groups of at most
``MAX_GROUP`` each, printable text without control characters; else ``Refused`` (400). The
header names are settings (defaults X-Remote-User and X-Remote-Group, the Kubernetes
convention; oauth2-proxy's are X-Forwarded-User / X-Forwarded-Groups, or X-Auth-Request-*
behind ingress-nginx). The proxy must set these headers itself and drop any a client sent.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import NamedTuple

from admin import auth

MAX_USER = 1024
MAX_GROUP = 256
MAX_GROUPS = 64
AUTHENTICATED = "system:authenticated"


class Trust(NamedTuple):
    allowed_names: frozenset[str]
    user_headers: tuple[str, ...]
    group_headers: tuple[str, ...]


class Refused(NamedTuple):
    status: int  # 401: not from the proxy; 400: the proxy's headers are out of bounds
    reason: str  # a metric-safe code
    message: str


def _printable(text: str) -> bool:
    return text.isprintable()


def _lowered(headers: Mapping[str, str]) -> dict[str, str]:
    return {k.lower(): v for k, v in headers.items()}


def claimed(headers: Mapping[str, str], trust: Trust) -> bool:
    """Whether the request carries any of the identity headers."""
    present = _lowered(headers)
    return any(h.lower() in present for h in (*trust.user_headers, *trust.group_headers))


def _groups(present: Mapping[str, str], names: Sequence[str]) -> tuple[str, ...] | Refused:
    out: list[str] = []
    for name in names:
        for raw in present.get(name.lower(), "").split(","):
            group = raw.strip()
            if not group or group in out:
                continue
            if len(group) > MAX_GROUP or not _printable(group):
                return Refused(
                    400,
                    "bad_headers",
                    f"a group in {name} is longer than {MAX_GROUP} characters or not printable",
                )
            out.append(group)
            if len(out) > MAX_GROUPS:
                return Refused(
                    400, "bad_headers", f"more than {MAX_GROUPS} groups in the proxy's headers"
                )
    if AUTHENTICATED not in out:
        out.append(AUTHENTICATED)
    return tuple(out)


def decide(
    headers: Mapping[str, str], peer_cn: str | None, trust: Trust
) -> auth.Identity | Refused | None:
    """The proxy's identity, a refusal, or None when no identity header is present."""
    if not claimed(headers, trust):
        return None
    named = "/".join((*trust.user_headers, *trust.group_headers))
    if peer_cn is None:
        return Refused(
            401,
            "no_certificate",
            f"identity headers ({named}) are trusted only from the authenticating proxy, "
            "over TLS with its client certificate; this request had none",
        )
    if peer_cn not in trust.allowed_names:
        return Refused(
            401,
            "name_not_allowed",
            f"identity headers ({named}) came with a client certificate whose common name "
            f"({peer_cn[:64]}) is not an allowed proxy name",
        )
    present = _lowered(headers)
    user = next(
        (v.strip() for h in trust.user_headers if (v := present.get(h.lower(), "")).strip()), ""
    )
    if not user:
        return Refused(
            401, "no_user", f"the proxy named no user ({'/'.join(trust.user_headers)} empty)"
        )
    if len(user) > MAX_USER or not _printable(user):
        return Refused(
            400, "bad_headers", f"the user is longer than {MAX_USER} characters or not printable"
        )
    groups = _groups(present, trust.group_headers)
    if isinstance(groups, Refused):
        return groups
    return auth.Identity(user=user, uid="", groups=groups, extra=())
