"""Certificates: what the CA issues carries the names and usages asked for."""

from __future__ import annotations

import datetime
import hashlib
import pathlib
import stat

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec

from tether.base import certs


def test_issue_client_and_server() -> None:
    ca = certs.CertificateAuthority.create("test-ca")
    leaf = ca.issue(
        "rt-1", dns_names=["rt-1.example.com"], ip_addresses=["127.0.0.1"], client=True, server=True
    )
    assert certs.common_name(leaf.cert) == "rt-1"
    assert certs.dns_sans(leaf.cert) == ["rt-1.example.com"]
    leaf.cert.verify_directly_issued_by(ca.cert)
    eku = leaf.cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert len(list(eku)) == 2


def test_expired_certificate() -> None:
    ca = certs.CertificateAuthority.create("test-ca")
    past = datetime.datetime.now(datetime.UTC) - datetime.timedelta(days=3)
    leaf = ca.issue("old", client=True, not_before=past, validity=datetime.timedelta(days=1))
    assert certs.not_after(leaf.cert) < datetime.datetime.now(datetime.UTC)


def test_key_file_mode_and_reload(tmp_path: pathlib.Path) -> None:
    ca = certs.CertificateAuthority.create("test-ca")
    ca.write(tmp_path / "ca.crt", tmp_path / "ca.key")
    assert stat.S_IMODE((tmp_path / "ca.key").stat().st_mode) == 0o600
    again = certs.CertificateAuthority.load(
        (tmp_path / "ca.crt").read_bytes(), (tmp_path / "ca.key").read_bytes()
    )
    assert again.cert == ca.cert
    assert certs.dns_sans(ca.cert) == []


def test_a_certificate_names_its_issuer_by_the_issuers_own_key_identifier() -> None:
    """A CA made as Go >= 1.25 makes one (cert-manager's) carries a Subject Key Identifier of
    the first 160 bits of a SHA-256 of its key, not the SHA-1: the certificates it issues must
    name exactly that (RFC 5280 4.2.1.1), or OpenSSL finds no issuer (tls_unknown_ca)."""
    key = ec.generate_private_key(ec.SECP256R1())
    point = key.public_key().public_bytes(
        serialization.Encoding.X962, serialization.PublicFormat.UncompressedPoint
    )
    ski = hashlib.sha256(point).digest()[:20]
    now = datetime.datetime.now(datetime.UTC)
    name = x509.Name([x509.NameAttribute(x509.oid.NameOID.COMMON_NAME, "go-made-ca")])
    ca_cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now)
        .not_valid_after(now + datetime.timedelta(hours=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(x509.SubjectKeyIdentifier(ski), critical=False)
        .sign(key, hashes.SHA256())
    )
    leaf = certs.CertificateAuthority(cert=ca_cert, key=key).issue("probe", client=True).cert
    aki = leaf.extensions.get_extension_for_class(x509.AuthorityKeyIdentifier).value
    assert aki.key_identifier == ski
    # Tether's own CAs (SHA-1 identifiers) are named as before
    own = certs.CertificateAuthority.create("own")
    own_ski = own.cert.extensions.get_extension_for_class(x509.SubjectKeyIdentifier).value
    issued = own.issue("probe", client=True).cert
    assert (
        issued.extensions.get_extension_for_class(x509.AuthorityKeyIdentifier).value.key_identifier
        == own_ski.digest
    )
