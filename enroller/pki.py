"""The enroller's certificate decisions: what to issue, when to renew, when a CA rollover
is done. Pure functions on certificates: no Kubernetes, no files, no clock (``now`` is
passed in, timezone-aware). Issuing itself is ``tether.base.certs.CertificateAuthority``.

What is issued (from the *watcher CA*, EC P-256):

* a runtime's **client certificate**: CN = the runtime ID, exactly one DNS SAN = the Kyma
  CR's ``skr-domain``, extended key usage clientAuth only (what the listener checks,
  docs/security.md);
* the webhook's **serving certificate**: DNS SANs = the webhook Service's names
  (``tether-webhook.tether-system.svc``), CN = the first of them, serverAuth only.

Both start 5 minutes before ``now`` (clock skew between KCP and runtime) and end at
``now + lifetime``, but never after the CA itself. Either is renewed from ``renew_at``:
2/3 of its validity after its start (``needs_renewal`` gives the reason).

**The CA Secret** (in the KCP; type ``Opaque`` or ``kubernetes.io/tls``), as
``load_ca_secret`` reads and ``ca_secret_data`` writes its decoded ``data``:

=================  ==========================================================================
``tls.crt``        the current CA certificate, PEM, exactly one certificate, a CA
``tls.key``        its private key, unencrypted PEM (PKCS#8), EC; must match ``tls.crt``
``previous.crt``   optional, only during a rollover: the previous CA certificate (PEM, one).
                   No key: the previous CA never issues again. Absent or empty: no rollover;
                   equal to ``tls.crt``: none either.
=================  ==========================================================================

Other keys are ignored. The trust bundle verifiers need (``trust_bundle``) holds no secret
and is published apart from the Secret (the enroller: a ConfigMap the listener mounts).

**Rollover**: when ``ca_needs_rollover`` says so, a new CA becomes ``tls.crt``/``tls.key``
and the old certificate ``previous.crt``; verifiers trust both (``trust_bundle``). Every
client certificate not from the new CA then needs renewal (``foreign_issuer``); once
``rollover_complete`` holds, ``previous.crt`` is dropped.

Errors are ``PKIError`` (a ``ValueError``) with a message that names the key or field and
never carries key material.
"""

from __future__ import annotations

import datetime
import re
from collections.abc import Mapping, Sequence
from typing import Any, Literal

from cryptography import exceptions as crypto_exceptions
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from tether.base import certs, parsers

Reason = Literal[
    "missing", "unreadable", "foreign_issuer", "subject_changed", "expired", "expiring"
]

RENEW_FRACTION = 2 / 3  # of a certificate's validity, counted from its start
BACKDATE = datetime.timedelta(minutes=5)  # not_before = now - BACKDATE (clock skew)
DEFAULT_CA_LIFETIME = datetime.timedelta(days=365)
DEFAULT_CLIENT_LIFETIME = datetime.timedelta(days=7)  # as TETHER_ENROLLER_CERT_LIFETIME_SECONDS
DEFAULT_SERVING_LIFETIME = datetime.timedelta(days=7)

SECRET_CERT, SECRET_KEY, SECRET_PREVIOUS = "tls.crt", "tls.key", "previous.crt"

_EKU_NAMES = {
    ExtendedKeyUsageOID.CLIENT_AUTH: "clientAuth",
    ExtendedKeyUsageOID.SERVER_AUTH: "serverAuth",
}
_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
_DER_SPKI = serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo


class PKIError(ValueError):
    """A certificate, key or CA Secret that cannot be used (the message says why)."""


# -- issuing ------------------------------------------------------------------------------


def client_certificate(
    ca: certs.CertificateAuthority,
    runtime_id: str,
    domain: str,
    lifetime: datetime.timedelta,
    now: datetime.datetime,
) -> certs.KeyPair:
    """A runtime's client certificate: CN = ``runtime_id``, one DNS SAN = ``domain``
    (the Kyma CR's ``skr-domain``), clientAuth only."""
    try:
        parsers.runtime_id("runtime ID", runtime_id)
    except parsers.SettingError as e:
        raise PKIError(str(e)) from None
    name = dns_name("domain", domain)
    start, validity = _span(ca, lifetime, now)
    return ca.issue(runtime_id, dns_names=[name], client=True, validity=validity, not_before=start)


def serving_certificate(
    ca: certs.CertificateAuthority,
    dns_names: Sequence[str],
    lifetime: datetime.timedelta,
    now: datetime.datetime,
) -> certs.KeyPair:
    """A serving certificate for ``dns_names`` (CN = the first), serverAuth only."""
    if isinstance(dns_names, str) or not dns_names:
        raise PKIError("a serving certificate needs at least one DNS name")
    names = [dns_name("DNS name", n) for n in dns_names]
    start, validity = _span(ca, lifetime, now)
    return ca.issue(names[0], dns_names=names, server=True, validity=validity, not_before=start)


def dns_name(what: str, raw: str) -> str:
    """``raw`` as a certificate's DNS SAN: lower case, no trailing dot, RFC 1123 labels."""
    name = raw.lower().removesuffix(".")
    labels = name.split(".")
    if len(name) > 253 or not all(_DNS_LABEL.fullmatch(label) for label in labels):
        raise PKIError(f"{what} {raw!r} is not a DNS name")
    return name


def _span(
    ca: certs.CertificateAuthority, lifetime: datetime.timedelta, now: datetime.datetime
) -> tuple[datetime.datetime, datetime.timedelta]:
    """(not_before, validity) of a leaf: from ``now - min(BACKDATE, lifetime/10)`` to
    ``now + lifetime``, cut at the CA's own end; a CA that has expired issues nothing."""
    _aware(now)
    if lifetime <= datetime.timedelta(0):
        raise PKIError(f"lifetime must be positive, not {lifetime}")
    ca_end = ca.cert.not_valid_after_utc
    if ca_end <= now:
        raise PKIError(f"the CA {certs.common_name(ca.cert)!r} expired at {_iso(ca_end)}")
    # backdated for clock skew, but by at most a tenth of the lifetime: a short lifetime
    # must not start its life already past renew_at
    start = now - min(BACKDATE, lifetime / 10)
    return start, min(now + lifetime, ca_end) - start


def _aware(now: datetime.datetime) -> None:
    if now.tzinfo is None or now.utcoffset() is None:
        raise PKIError("now must be timezone-aware (UTC)")


# -- renewal ------------------------------------------------------------------------------


def renew_at(cert: x509.Certificate) -> datetime.datetime:
    """When ``cert`` is due for renewal: its start plus 2/3 of its validity."""
    start = cert.not_valid_before_utc
    return start + (cert.not_valid_after_utc - start) * RENEW_FRACTION


def needs_renewal(
    cert_pem: bytes | None,
    ca: certs.CertificateAuthority | x509.Certificate | Sequence[x509.Certificate],
    now: datetime.datetime,
    *,
    runtime_id: str | None = None,
    domain: str | None = None,
) -> Reason | None:
    """None when the certificate (the first in ``cert_pem``) may stay, else why not,
    checked in this order:

    * ``missing``: no or empty PEM; ``unreadable``: not a PEM certificate;
    * ``foreign_issuer``: not signed by ``ca`` (by any of them, for a list). Pass only
      the current CA during a rollover, so that certificates of the previous one are
      replaced;
    * ``subject_changed``: CN is not ``runtime_id``, or the SANs are not exactly
      ``[domain]`` (case and a trailing dot ignored), for those given;
    * ``expired``: at or after its not_after; ``expiring``: at or after ``renew_at``.
    """
    _aware(now)
    if not cert_pem:
        return "missing"
    try:
        cert = x509.load_pem_x509_certificates(cert_pem)[0]
    except ValueError:
        return "unreadable"
    if not issued_by(cert, _trusted(ca)):
        return "foreign_issuer"
    if runtime_id is not None and certs.common_name(cert) != runtime_id:
        return "subject_changed"
    if domain is not None and _sans(cert) != [_normal(domain)]:
        return "subject_changed"
    if now >= cert.not_valid_after_utc:
        return "expired"
    if now >= renew_at(cert):
        return "expiring"
    return None


def issued_by(cert: x509.Certificate, cas: Sequence[x509.Certificate]) -> bool:
    """Whether one of ``cas`` signed ``cert`` (issuer name and signature, not validity)."""
    for ca_cert in cas:
        try:
            cert.verify_directly_issued_by(ca_cert)
        except (ValueError, TypeError, crypto_exceptions.InvalidSignature):
            continue
        return True
    return False


def _trusted(
    ca: certs.CertificateAuthority | x509.Certificate | Sequence[x509.Certificate],
) -> list[x509.Certificate]:
    if isinstance(ca, certs.CertificateAuthority):
        return [ca.cert]
    if isinstance(ca, x509.Certificate):
        return [ca]
    return list(ca)


def _normal(name: str) -> str:
    return name.lower().removesuffix(".")


def _sans(cert: x509.Certificate) -> list[str]:
    """Every SAN as text (DNS names normalized, IP addresses as written), in order."""
    try:
        ext = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return []
    return [_normal(n.value) if isinstance(n, x509.DNSName) else str(n.value) for n in ext]


# -- CA rollover --------------------------------------------------------------------------


def ca_needs_rollover(
    ca_cert: x509.Certificate, now: datetime.datetime, fraction: float = RENEW_FRACTION
) -> bool:
    """Whether the CA has used up ``fraction`` of its validity (time to start a rollover)."""
    _aware(now)
    if not 0 < fraction <= 1:
        raise PKIError(f"fraction must be in (0, 1], not {fraction}")
    start = ca_cert.not_valid_before_utc
    return now >= start + (ca_cert.not_valid_after_utc - start) * fraction


def trust_bundle(current: x509.Certificate, previous: x509.Certificate | None) -> bytes:
    """The CA certificates a verifier trusts, PEM: the current one first, then the
    previous one during a rollover (once only, should they be the same)."""
    pem = current.public_bytes(serialization.Encoding.PEM)
    if previous is not None and previous != current:
        pem += previous.public_bytes(serialization.Encoding.PEM)
    return pem


def rollover_complete(
    holders: Mapping[str, bytes | None], current_ca: certs.CertificateAuthority | x509.Certificate
) -> bool:
    """Whether the previous CA may be dropped: every runtime's client certificate
    (``holders``: runtime ID -> its PEM) is from the current CA. A runtime without one,
    or with an unreadable one, does not block: no CA would accept it anyway."""
    trusted = _trusted(current_ca)
    for pem in holders.values():
        if not pem:
            continue
        try:
            cert = x509.load_pem_x509_certificates(pem)[0]
        except ValueError:
            continue
        if not issued_by(cert, trusted):
            return False
    return True


# -- display ------------------------------------------------------------------------------


def describe(cert: bytes | x509.Certificate, now: datetime.datetime) -> dict[str, Any]:
    """What an operator wants to see of a certificate (the first, for PEM bytes): names,
    issuer, validity, usages. Public parts only: never key material."""
    _aware(now)
    if not isinstance(cert, x509.Certificate):
        cert = load_certificates(cert)[0]
    try:
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        ips = [str(i) for i in san.get_values_for_type(x509.IPAddress)]
    except x509.ExtensionNotFound:
        ips = []
    try:
        ekus = [
            _EKU_NAMES.get(o, o.dotted_string)
            for o in cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
        ]
    except x509.ExtensionNotFound:
        ekus = []
    try:
        is_ca = cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    except x509.ExtensionNotFound:
        is_ca = False
    issuer = cert.issuer.get_attributes_for_oid(NameOID.COMMON_NAME)
    end = cert.not_valid_after_utc
    return {
        "subject_cn": certs.common_name(cert),
        "dns_names": certs.dns_sans(cert),
        "ip_addresses": ips,
        "issuer_cn": str(issuer[0].value) if issuer else None,
        "serial": format(cert.serial_number, "x"),
        "not_before": _iso(cert.not_valid_before_utc),
        "not_after": _iso(end),
        "renew_at": _iso(renew_at(cert)),
        "days_left": round((end - now).total_seconds() / 86400, 2),
        "extended_key_usages": ekus,
        "is_ca": is_ca,
        "sha256": cert.fingerprint(hashes.SHA256()).hex(),
    }


def _iso(t: datetime.datetime) -> str:
    return t.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


# -- parsing: certificates, keys, the CA Secret -------------------------------------------


def load_certificates(pem: bytes, what: str = "data") -> list[x509.Certificate]:
    """Every certificate of a PEM bundle (other PEM blocks, keys too, are skipped)."""
    try:
        return x509.load_pem_x509_certificates(pem)
    except ValueError:
        raise PKIError(f"{what} holds no PEM certificate") from None


def load_ca(
    cert_pem: bytes, key_pem: bytes, cert_what: str = "tls.crt", key_what: str = "tls.key"
) -> certs.CertificateAuthority:
    """A CA from its certificate (exactly one, a CA) and its matching EC key."""
    found = load_certificates(cert_pem, cert_what)
    if len(found) != 1:
        raise PKIError(f"{cert_what} holds {len(found)} certificates, not one")
    _is_ca(found[0], cert_what)
    try:
        ca = certs.CertificateAuthority.load(
            found[0].public_bytes(serialization.Encoding.PEM), key_pem
        )
    except (ValueError, TypeError, crypto_exceptions.UnsupportedAlgorithm) as e:
        raise PKIError(
            f"{key_what} is not an unencrypted PEM EC private key ({type(e).__name__})"
        ) from None
    if ca.key.public_key().public_bytes(*_DER_SPKI) != ca.cert.public_key().public_bytes(
        *_DER_SPKI
    ):
        raise PKIError(f"{key_what} does not match the certificate in {cert_what}")
    return ca


def _is_ca(cert: x509.Certificate, what: str) -> None:
    try:
        if cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca:
            return
    except x509.ExtensionNotFound:
        pass
    raise PKIError(f"{what} is not a CA certificate (basicConstraints CA:TRUE)")


def load_ca_secret(
    data: Mapping[str, bytes],
) -> tuple[certs.CertificateAuthority, x509.Certificate | None]:
    """The current CA and the previous CA certificate (None outside a rollover) from the
    CA Secret's decoded ``data`` (layout: the module docstring)."""
    for key in (SECRET_CERT, SECRET_KEY):
        if not data.get(key):
            raise PKIError(f"CA Secret: {key} is missing or empty")
    current = load_ca(
        data[SECRET_CERT], data[SECRET_KEY], f"CA Secret: {SECRET_CERT}", f"CA Secret: {SECRET_KEY}"
    )
    raw = data.get(SECRET_PREVIOUS)
    if not raw:
        return current, None
    what = f"CA Secret: {SECRET_PREVIOUS}"
    found = load_certificates(raw, what)
    if len(found) != 1:
        raise PKIError(f"{what} holds {len(found)} certificates, not one")
    _is_ca(found[0], what)
    return current, (None if found[0] == current.cert else found[0])


def ca_secret_data(
    current: certs.CertificateAuthority, previous_cert: x509.Certificate | None
) -> dict[str, bytes]:
    """The CA Secret's ``data`` (decoded) for this CA and, during a rollover, the
    previous CA certificate."""
    data = {SECRET_CERT: current.cert_pem, SECRET_KEY: current.key_pem}
    if previous_cert is not None and previous_cert != current.cert:
        data[SECRET_PREVIOUS] = previous_cert.public_bytes(serialization.Encoding.PEM)
    return data
