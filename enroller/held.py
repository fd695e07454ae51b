"""What a runtime holds of Tether's credentials (pure): its client Secret's annotations, data
and certificate (``Held``), the serving certificate to install (``Serving``), which of the KCP
CA's certificates issued one (``issuer``), and whether a Secret's key is its certificate's
(``key_matches``, compared, never logged). ``enroller.install`` reads the Secrets and decides
with these.
"""

from __future__ import annotations

import base64
import dataclasses
import datetime
from collections.abc import Mapping
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import serialization

from enroller import castore, pki, render
from tether.base import certs, times

CA_SERIAL = "tether.kyma-project.io/ca-serial"


def serial_hex(cert: x509.Certificate | None) -> str | None:
    return format(cert.serial_number, "x") if cert is not None else None


@dataclasses.dataclass(frozen=True)
class Held:
    """What the runtime's client Secret holds (None: no Secret)."""

    secret: Mapping[str, Any] | None
    notes: Mapping[
        str, str
    ]  # its annotations: the installed digest, the serials, the serving dates
    data: Mapping[str, str]
    client_pem: bytes | None

    @classmethod
    def of(cls, secret: Mapping[str, Any] | None) -> Held:
        notes = ((secret or {}).get("metadata") or {}).get("annotations") or {}
        data = (secret or {}).get("data") or {}
        pem = base64.b64decode(data["tls.crt"]) if "tls.crt" in data else None
        return cls(secret, notes, data, pem)


@dataclasses.dataclass(frozen=True)
class Serving:
    """The serving certificate to install: a new one, or the runtime's (its pair empty until
    read from its Secret, for an apply)."""

    cert: bytes
    key: bytes
    serial: str
    not_after: datetime.datetime | None
    renew_at: datetime.datetime | None
    ca: str  # serial of the CA that issued it

    @classmethod
    def annotated(cls, notes: Mapping[str, str]) -> Serving:
        return cls(
            b"",
            b"",
            notes.get(render.SERVING_SERIAL, ""),
            times.parse_time(notes.get(render.SERVING_NOT_AFTER, "")),
            times.parse_time(notes.get(render.SERVING_RENEW_AT, "")),
            notes.get(CA_SERIAL, ""),
        )

    @classmethod
    def issued(cls, cert_pem: bytes, key_pem: bytes, ca_serial: str) -> Serving:
        cert = x509.load_pem_x509_certificate(cert_pem)
        return cls(
            cert_pem,
            key_pem,
            format(cert.serial_number, "x"),
            certs.not_after(cert),
            pki.renew_at(cert),
            ca_serial,
        )


def issuer(cert_pem: bytes | None, ca: castore.CA, known: str | None) -> str:
    """The serial of the CA that issued the certificate: the current or the previous one;
    "" for none; for another (a CA dropped since) what was known of it, else "foreign"."""
    if not cert_pem:
        return ""
    try:
        cert = x509.load_pem_x509_certificate(cert_pem)
    except ValueError:
        return "foreign"
    if pki.issued_by(cert, [ca.current.cert]):
        return format(ca.current.cert.serial_number, "x")
    if ca.previous is not None and pki.issued_by(cert, [ca.previous]):
        return format(ca.previous.serial_number, "x")
    if known and known not in (format(ca.current.cert.serial_number, "x"), serial_hex(ca.previous)):
        return known
    return "foreign"


def key_matches(cert_pem: bytes, key_b64: str | None) -> bool:
    """Whether the Secret's key is the certificate's (never logged, only compared)."""
    if not key_b64:
        return False
    try:
        key = serialization.load_pem_private_key(base64.b64decode(key_b64), password=None)
        cert = x509.load_pem_x509_certificate(cert_pem)
    except (ValueError, TypeError):
        return False
    spki = serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    return bool(key.public_key().public_bytes(*spki) == cert.public_key().public_bytes(*spki))
