"""X.509 certificates: a small CA that issues serving and client certificates.

Used by the local control plane, the tests and the demo, and by the parts that manage
their own certificates. Keys are ECDSA P-256 (fast to generate, accepted everywhere).
Nothing here logs; key material never leaves the returned objects unless written to a
file with mode 0600.
"""

from __future__ import annotations

import dataclasses
import datetime
import ipaddress
import os
import pathlib
import ssl
from collections.abc import Sequence

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

DEFAULT_VALIDITY = datetime.timedelta(days=365)


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


def _name(common_name: str, organizations: Sequence[str] = ()) -> x509.Name:
    attrs = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, o) for o in organizations]
    attrs.append(x509.NameAttribute(NameOID.COMMON_NAME, common_name))
    return x509.Name(attrs)


@dataclasses.dataclass(frozen=True)
class KeyPair:
    """A certificate and its private key."""

    cert: x509.Certificate
    key: ec.EllipticCurvePrivateKey

    @property
    def cert_pem(self) -> bytes:
        return self.cert.public_bytes(serialization.Encoding.PEM)

    @property
    def key_pem(self) -> bytes:
        return self.key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )

    def write(self, cert_path: pathlib.Path, key_path: pathlib.Path) -> None:
        """Write PEM files; the key file is created with mode 0600."""
        cert_path.write_bytes(self.cert_pem)
        fd = os.open(key_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(self.key_pem)


@dataclasses.dataclass(frozen=True)
class CertificateAuthority(KeyPair):
    """A self-signed CA able to issue leaf certificates."""

    @classmethod
    def create(
        cls,
        common_name: str,
        validity: datetime.timedelta = DEFAULT_VALIDITY,
        now: datetime.datetime | None = None,
    ) -> CertificateAuthority:
        key = ec.generate_private_key(ec.SECP256R1())
        now = now or _now()
        name = _name(common_name)
        cert = (
            x509.CertificateBuilder()
            .subject_name(name)
            .issuer_name(name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + validity)
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    key_cert_sign=True,
                    crl_sign=True,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), False)
            .sign(key, hashes.SHA256())
        )
        return cls(cert=cert, key=key)

    @classmethod
    def load(cls, cert_pem: bytes, key_pem: bytes) -> CertificateAuthority:
        key = serialization.load_pem_private_key(key_pem, password=None)
        if not isinstance(key, ec.EllipticCurvePrivateKey):
            raise ValueError("CA key must be an EC private key")
        return cls(cert=x509.load_pem_x509_certificate(cert_pem), key=key)

    def _authority_key_identifier(self) -> x509.AuthorityKeyIdentifier:
        """The issuer's own SubjectKeyIdentifier (RFC 5280 4.2.1.1), whatever method made it
        (Go >= 1.25 uses a truncated SHA-256, e.g. cert-manager's CAs: a SHA-1 of the key
        named no issuer OpenSSL could find); else the key's SHA-1."""
        try:
            ski = self.cert.extensions.get_extension_for_class(x509.SubjectKeyIdentifier).value
        except x509.ExtensionNotFound:
            return x509.AuthorityKeyIdentifier.from_issuer_public_key(self.key.public_key())
        return x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ski)

    def issue(
        self,
        common_name: str,
        *,
        dns_names: Sequence[str] = (),
        ip_addresses: Sequence[str] = (),
        organizations: Sequence[str] = (),
        server: bool = False,
        client: bool = False,
        validity: datetime.timedelta = DEFAULT_VALIDITY,
        not_before: datetime.datetime | None = None,
    ) -> KeyPair:
        """Issue a leaf certificate. ``not_before`` in the past with a short validity
        makes an expired certificate (for tests of refusal)."""
        key = ec.generate_private_key(ec.SECP256R1())
        start = not_before or (_now() - datetime.timedelta(minutes=5))
        usages = []
        if server:
            usages.append(ExtendedKeyUsageOID.SERVER_AUTH)
        if client:
            usages.append(ExtendedKeyUsageOID.CLIENT_AUTH)
        builder = (
            x509.CertificateBuilder()
            .subject_name(_name(common_name, organizations))
            .issuer_name(self.cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(start)
            .not_valid_after(start + validity)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    key_encipherment=False,
                    key_cert_sign=False,
                    crl_sign=False,
                    content_commitment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .add_extension(self._authority_key_identifier(), False)
        )
        if usages:
            builder = builder.add_extension(x509.ExtendedKeyUsage(usages), critical=False)
        sans: list[x509.GeneralName] = [x509.DNSName(d) for d in dns_names]
        sans += [x509.IPAddress(ipaddress.ip_address(i)) for i in ip_addresses]
        if sans:
            builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
        return KeyPair(cert=builder.sign(self.key, hashes.SHA256()), key=key)


def common_name(cert: x509.Certificate) -> str | None:
    """The subject's first CN, or None."""
    attrs = cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)
    if not attrs:
        return None
    value = attrs[0].value
    return value if isinstance(value, str) else value.decode()


def dns_sans(cert: x509.Certificate) -> list[str]:
    """The DNS subject alternative names (empty if the extension is absent)."""
    try:
        ext = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName)
    except x509.ExtensionNotFound:
        return []
    return list(ext.value.get_values_for_type(x509.DNSName))


def not_after(cert: x509.Certificate) -> datetime.datetime:
    return cert.not_valid_after_utc


def client_context(
    ca_file: str | os.PathLike[str],
    cert_file: str | os.PathLike[str] | None = None,
    key_file: str | os.PathLike[str] | None = None,
) -> ssl.SSLContext:
    """An ``ssl.SSLContext`` that verifies the server against ``ca_file`` and presents
    a client certificate when given."""
    ctx = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=os.fspath(ca_file))
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    if cert_file is not None:
        ctx.load_cert_chain(os.fspath(cert_file), None if key_file is None else os.fspath(key_file))
    return ctx


def verify_failure(exc: BaseException) -> str:
    """The certificate check that failed somewhere in ``exc``'s chain (requests wraps
    urllib3 wraps ssl): OpenSSL's ``certificate is not yet valid`` (a clock behind the
    issuer's), ``certificate has expired``, ...; or the peer's alert that refused ours
    (``tlsv1_alert_certificate_expired``); '' when none did."""
    todo, seen = [exc], set[int]()
    while todo:
        e = todo.pop()
        if id(e) in seen:
            continue
        seen.add(id(e))
        if isinstance(e, ssl.SSLCertVerificationError):
            return str(e.verify_message or "certificate verify failed")
        if isinstance(e, ssl.SSLError) and "CERTIFICATE" in str(e.reason or ""):  # an alert
            return f"the peer refused our certificate ({str(e.reason).lower()})"
        todo += [
            a
            for a in (*e.args, getattr(e, "reason", None), e.__cause__, e.__context__)
            if isinstance(a, BaseException)
        ]
    return ""
