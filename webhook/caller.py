"""Who may call ``/validate``: the runtime's API server, when the landscape lets it present a
client certificate (docs/webhook.md, "Who may call the webhook").

Opt-in (``TETHER_WEBHOOK_CLIENT_CA_FILE``): the serving context then loads that CA bundle with
``CERT_OPTIONAL``, so OpenSSL verifies a presented certificate during the handshake (an
invalid one fails the handshake) and a connection without one still reaches the probes
(``/healthz``, ``/readyz``: the kubelet presents none). ``Check`` (WSGI middleware, outermost)
answers 401 to any request for ``/validate`` on a connection without a verified
certificate, and 403 when ``TETHER_WEBHOOK_CLIENT_NAMES`` is set and the certificate's
common name is not one of them, before its body is read. Without the setting every caller is
served as before (managed clusters often cannot configure the API server's admission client).

``refusal`` decides on plain data; nothing here logs or returns certificate contents.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any, NamedTuple

import orjson
from cryptography import x509

from tether.base import certs

PATH = "/validate"


class Refusal(NamedTuple):
    status: int
    reason: str  # metric label: "no-certificate" or "name"
    message: str


def common_name(der: bytes) -> str | None:
    """The subject's common name of a DER certificate (None when it cannot be read)."""
    try:
        return certs.common_name(x509.load_der_x509_certificate(der))
    except ValueError:
        return None


def refusal(der: bytes | None, names: Sequence[str]) -> Refusal | None:
    """Why a caller with the verified certificate ``der`` (None: it presented none) may not
    call ``/validate``; None when it may (``names`` empty: any certificate of the CA)."""
    if der is None:
        return Refusal(
            401,
            "no-certificate",
            "the admission endpoint requires the API server's client certificate",
        )
    if names and common_name(der) not in names:
        return Refusal(
            403,
            "name",
            "the client certificate's common name is not one of TETHER_WEBHOOK_CLIENT_NAMES",
        )
    return None


def peer_der(environ: dict[str, Any]) -> bytes | None:
    """The verified client certificate of the request's connection (gunicorn's socket)."""
    sock = environ.get("gunicorn.socket")
    getpeercert = getattr(sock, "getpeercert", None)
    if getpeercert is None:
        return None
    der = getpeercert(binary_form=True)
    return der if isinstance(der, bytes) and der else None


WSGIApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]


class Check:
    """WSGI middleware: requests for ``/validate`` only from an authenticated caller."""

    def __init__(
        self,
        app: WSGIApp,
        names: Sequence[str],
        on_refused: Callable[[str], None] = lambda reason: None,
    ) -> None:
        self.app, self.names, self.on_refused = app, tuple(names), on_refused

    def __call__(
        self, environ: dict[str, Any], start_response: Callable[..., Any]
    ) -> Iterable[bytes]:
        if environ.get("PATH_INFO") != PATH:
            return self.app(environ, start_response)
        why = refusal(peer_der(environ), self.names)
        if why is None:
            return self.app(environ, start_response)
        self.on_refused(why.reason)
        body = orjson.dumps(
            {
                "error": "unauthenticated" if why.status == 401 else "forbidden",
                "details": why.message,
            }
        )
        start_response(
            f"{why.status} {'UNAUTHORIZED' if why.status == 401 else 'FORBIDDEN'}",
            [
                ("Content-Type", "application/json"),
                ("Content-Length", str(len(body))),
                ("Connection", "close"),
            ],
        )
        return [body]
