"""Who is calling: the client certificate of a request.

Two sources, tried in this order:

1. **Direct mTLS** (default). gunicorn wraps the socket with our ``ssl.SSLContext``
   (``server.ssl_context``: client CA loaded, ``CERT_OPTIONAL``), so OpenSSL has already
   verified the chain (signature, validity, clientAuth purpose) during the handshake when a
   certificate was presented; an invalid one fails the handshake and never reaches Flask.
   gunicorn puts the connection's socket into the WSGI environ as ``gunicorn.socket``;
   ``getpeercert(binary_form=True)`` returns the DER leaf (``None`` when no certificate was
   sent). This is the robust way in gunicorn 27: it needs no custom worker and works with
   keep-alive, since the peer certificate belongs to the connection.
2. **X-Forwarded-Client-Cert** (opt-in, behind Istio/Envoy). Trusted only when the direct
   peer address lies in ``xfcc_trusted_proxies``; the ``Cert`` (URL-encoded PEM) of the last
   element (the one the nearest proxy added) is parsed and its chain verified here against
   the same CA bundle, at the current time, for client authentication.

Pure helpers (``parse_xfcc``, ``verify_chain``) take plain data; ``from_environ`` reads the
environ. Nothing here logs or returns key material.
"""

from __future__ import annotations

import datetime
import ipaddress
import ssl
import urllib.parse
from collections.abc import Mapping, Sequence
from typing import Any, Literal, NamedTuple

from cryptography import x509
from cryptography.x509 import verification

Source = Literal["tls", "xfcc"]
XFCC_ENVIRON = "HTTP_X_FORWARDED_CLIENT_CERT"
MAX_XFCC_LENGTH = 32 * 1024


class Peer(NamedTuple):
    """A verified client certificate and where it came from."""

    cert: x509.Certificate
    source: Source


class NoCertificate(Exception):
    """No usable client certificate; ``reason`` is a short metric-safe code."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def load_ca_bundle(path: str) -> list[x509.Certificate]:
    """The CA certificates of a PEM bundle; raises ``ValueError`` when there are none."""
    with open(path, "rb") as f:
        cas = x509.load_pem_x509_certificates(f.read())
    if not cas:
        raise ValueError(f"no certificate in {path}")
    return cas


def _split_quoted(text: str, sep: str) -> list[str]:
    """Split on ``sep`` outside double quotes (backslash escapes inside quotes)."""
    parts, cur, quoted, escaped = [], [], False, False
    for ch in text:
        if escaped:
            cur.append(ch)
            escaped = False
        elif ch == "\\" and quoted:
            cur.append(ch)
            escaped = True
        elif ch == '"':
            quoted = not quoted
            cur.append(ch)
        elif ch == sep and not quoted:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    parts.append("".join(cur))
    return parts


def _unquote(value: str) -> str:
    value = value.strip()
    if len(value) >= 2 and value[0] == value[-1] == '"':
        value = value[1:-1].replace('\\"', '"').replace("\\\\", "\\")
    return value


def parse_xfcc(header: str) -> dict[str, str]:
    """The key/value pairs of the last element of an XFCC header (keys lower-cased).

    Envoy's format: elements separated by ``,``, pairs by ``;``, values optionally quoted;
    ``Cert`` and ``Chain`` are URL-encoded PEM. Raises ``ValueError`` when malformed."""
    if len(header) > MAX_XFCC_LENGTH:
        raise ValueError("header too long")
    elements = [e for e in _split_quoted(header, ",") if e.strip()]
    if not elements:
        raise ValueError("empty header")
    out: dict[str, str] = {}
    for pair in _split_quoted(elements[-1], ";"):
        if not pair.strip():
            continue
        key, sep, value = pair.partition("=")
        if not sep:
            raise ValueError("pair without '='")
        out[key.strip().lower()] = _unquote(value)
    return out


def xfcc_certificates(fields: Mapping[str, str]) -> tuple[x509.Certificate, list[x509.Certificate]]:
    """The leaf (``Cert``) and intermediates (``Chain`` minus the leaf) of parsed XFCC."""
    if "cert" not in fields:
        raise ValueError("no Cert in header")
    leaf = x509.load_pem_x509_certificate(urllib.parse.unquote(fields["cert"]).encode())
    chain: list[x509.Certificate] = []
    if fields.get("chain"):
        chain = x509.load_pem_x509_certificates(urllib.parse.unquote(fields["chain"]).encode())
    return leaf, [c for c in chain if c != leaf]


def verify_chain(
    leaf: x509.Certificate,
    intermediates: Sequence[x509.Certificate],
    cas: Sequence[x509.Certificate],
    now: datetime.datetime,
) -> None:
    """Verify a client certificate chain (signatures, validity at ``now``, clientAuth
    usage) against ``cas``; raises ``verification.VerificationError``."""
    verifier = (
        verification.PolicyBuilder()
        .store(verification.Store(list(cas)))
        .time(now)
        .build_client_verifier()
    )
    verifier.verify(leaf, list(intermediates))


def trusted_proxy(addr: str, proxies: Sequence[str]) -> bool:
    try:
        ip = ipaddress.ip_address(addr)
    except ValueError:
        return False
    return any(ip in ipaddress.ip_network(p, strict=False) for p in proxies)


def _tls_peer(environ: Mapping[str, Any]) -> x509.Certificate | None:
    sock = environ.get("gunicorn.socket")
    if not isinstance(sock, ssl.SSLSocket):
        return None
    der = sock.getpeercert(binary_form=True)
    return x509.load_der_x509_certificate(der) if der else None


def from_environ(
    environ: Mapping[str, Any],
    *,
    trusted_proxies: Sequence[str],
    cas: Sequence[x509.Certificate],
    now: datetime.datetime,
) -> Peer:
    """The caller's verified certificate, else ``NoCertificate`` with the reason."""
    cert = _tls_peer(environ)
    if cert is not None:
        return Peer(cert, "tls")
    header = environ.get(XFCC_ENVIRON)
    if header is None:
        raise NoCertificate("no_certificate")
    if not trusted_proxies or not trusted_proxy(
        str(environ.get("REMOTE_ADDR", "")), trusted_proxies
    ):
        raise NoCertificate("xfcc_untrusted_peer")
    try:
        leaf, chain = xfcc_certificates(parse_xfcc(str(header)))
    except ValueError:
        raise NoCertificate("xfcc_malformed") from None
    try:
        verify_chain(leaf, chain, cas, now)
    except verification.VerificationError:
        raise NoCertificate("xfcc_chain_invalid") from None
    return Peer(leaf, "xfcc")
