"""Certificates: what the CA issues carries the names and usages asked for."""

from __future__ import annotations

import datetime
import pathlib
import stat

from cryptography import x509

from tether import certs


def test_issue_client_and_server() -> None:
    ca = certs.CertificateAuthority.create("test-ca")
    leaf = ca.issue("rt-1", dns_names=["rt-1.example.com"], ip_addresses=["127.0.0.1"],
                    client=True, server=True)
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
    again = certs.CertificateAuthority.load((tmp_path / "ca.crt").read_bytes(),
                                            (tmp_path / "ca.key").read_bytes())
    assert again.cert == ca.cert
    assert certs.dns_sans(ca.cert) == []
