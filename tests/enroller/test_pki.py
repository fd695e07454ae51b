"""The enroller's certificate decisions (enroller.pki), on plain data with a fixed ``now``."""

from __future__ import annotations

import datetime
import json

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.x509.oid import ExtendedKeyUsageOID

from enroller import pki
from tether.base import certs

UTC = datetime.UTC
NOW = datetime.datetime(2030, 1, 1, 12, 0, tzinfo=UTC)
DAY = datetime.timedelta(days=1)
SECOND = datetime.timedelta(seconds=1)
LIFETIME = datetime.timedelta(days=30)
# CertificateAuthority.create starts its CA at the real clock; 40 years covers NOW
CA_LIFETIME = datetime.timedelta(days=40 * 365)


@pytest.fixture(scope="module")
def ca() -> certs.CertificateAuthority:
    return certs.CertificateAuthority.create("watcher-ca", CA_LIFETIME)


@pytest.fixture(scope="module")
def other_ca() -> certs.CertificateAuthority:
    return certs.CertificateAuthority.create("other-ca", CA_LIFETIME)


@pytest.fixture(scope="module")
def client(ca: certs.CertificateAuthority) -> certs.KeyPair:
    return pki.client_certificate(ca, "rt-1", "c-1.kyma.example.com", LIFETIME, NOW)


def ekus(cert: x509.Certificate) -> list[x509.ObjectIdentifier]:
    return list(cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value)


# -- issuing ------------------------------------------------------------------------------


def test_client_certificate(ca: certs.CertificateAuthority, client: certs.KeyPair) -> None:
    cert = client.cert
    assert certs.common_name(cert) == "rt-1"
    assert certs.dns_sans(cert) == ["c-1.kyma.example.com"]
    assert ekus(cert) == [ExtendedKeyUsageOID.CLIENT_AUTH]
    assert cert.not_valid_before_utc == NOW - datetime.timedelta(minutes=5)
    assert cert.not_valid_after_utc == NOW + LIFETIME
    assert not cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    cert.verify_directly_issued_by(ca.cert)


def test_client_certificate_domain_is_normalized(ca: certs.CertificateAuthority) -> None:
    pair = pki.client_certificate(ca, "rt-1", "C-1.Kyma.Example.COM.", LIFETIME, NOW)
    assert certs.dns_sans(pair.cert) == ["c-1.kyma.example.com"]


@pytest.mark.parametrize(
    "runtime_id, domain, lifetime, now, problem",
    [
        ("", "a.example.com", LIFETIME, NOW, "runtime ID"),
        ("rt/1", "a.example.com", LIFETIME, NOW, "runtime ID"),
        ("rt-1", "", LIFETIME, NOW, "not a DNS name"),
        ("rt-1", "a..example.com", LIFETIME, NOW, "not a DNS name"),
        ("rt-1", "*.example.com", LIFETIME, NOW, "not a DNS name"),
        ("rt-1", "a.example.com", datetime.timedelta(0), NOW, "lifetime must be positive"),
        ("rt-1", "a.example.com", LIFETIME, NOW.replace(tzinfo=None), "timezone-aware"),
    ],
)
def test_client_certificate_refuses(
    ca: certs.CertificateAuthority,
    runtime_id: str,
    domain: str,
    lifetime: datetime.timedelta,
    now: datetime.datetime,
    problem: str,
) -> None:
    with pytest.raises(pki.PKIError, match=problem):
        pki.client_certificate(ca, runtime_id, domain, lifetime, now)


def test_leaf_never_outlives_its_ca() -> None:
    short = certs.CertificateAuthority.create("short-ca", datetime.timedelta(days=10))
    now = short.cert.not_valid_before_utc + DAY
    pair = pki.client_certificate(short, "rt-1", "a.example.com", LIFETIME, now)
    assert pair.cert.not_valid_after_utc == short.cert.not_valid_after_utc
    with pytest.raises(pki.PKIError, match="expired"):
        pki.client_certificate(
            short, "rt-1", "a.example.com", LIFETIME, short.cert.not_valid_after_utc
        )


def test_serving_certificate(ca: certs.CertificateAuthority) -> None:
    names = ["tether-webhook.tether-system.svc", "tether-webhook.tether-system.svc.cluster.local"]
    pair = pki.serving_certificate(ca, names, LIFETIME, NOW)
    assert ekus(pair.cert) == [ExtendedKeyUsageOID.SERVER_AUTH]
    assert certs.dns_sans(pair.cert) == names
    assert certs.common_name(pair.cert) == names[0]
    assert pair.cert.not_valid_after_utc == NOW + LIFETIME
    pair.cert.verify_directly_issued_by(ca.cert)


@pytest.mark.parametrize("names", [[], "tether-webhook.tether-system.svc", ["ok.svc", "no_pe"]])
def test_serving_certificate_refuses(ca: certs.CertificateAuthority, names: list[str]) -> None:
    with pytest.raises(pki.PKIError):
        pki.serving_certificate(ca, names, LIFETIME, NOW)


# -- renewal ------------------------------------------------------------------------------


def test_renew_at_two_thirds(client: certs.KeyPair) -> None:
    start, end = client.cert.not_valid_before_utc, client.cert.not_valid_after_utc
    assert pki.renew_at(client.cert) == start + (end - start) * 2 / 3
    # 30 days + 5 minutes of validity: 20 days and 200 s after the start
    assert pki.renew_at(client.cert) == start + datetime.timedelta(days=20, seconds=200)


def test_renewal_boundaries(ca: certs.CertificateAuthority, client: certs.KeyPair) -> None:
    pem, at, end = client.cert_pem, pki.renew_at(client.cert), client.cert.not_valid_after_utc
    assert pki.needs_renewal(pem, ca, NOW) is None
    assert pki.needs_renewal(pem, ca, at - SECOND) is None
    assert pki.needs_renewal(pem, ca, at) == "expiring"
    assert pki.needs_renewal(pem, ca, end - SECOND) == "expiring"
    assert pki.needs_renewal(pem, ca, end) == "expired"
    assert pki.needs_renewal(pem, ca, end + DAY) == "expired"


@pytest.mark.parametrize(
    "pem, reason",
    [
        (None, "missing"),
        (b"", "missing"),
        (b"not a certificate", "unreadable"),
        (b"-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n", "unreadable"),
    ],
)
def test_missing_and_unreadable(
    ca: certs.CertificateAuthority, pem: bytes | None, reason: str
) -> None:
    assert pki.needs_renewal(pem, ca, NOW) == reason


def test_a_key_is_not_a_certificate(ca: certs.CertificateAuthority, client: certs.KeyPair) -> None:
    assert pki.needs_renewal(client.key_pem, ca, NOW) == "unreadable"


def test_foreign_issuer(
    ca: certs.CertificateAuthority, other_ca: certs.CertificateAuthority, client: certs.KeyPair
) -> None:
    assert pki.needs_renewal(client.cert_pem, other_ca, NOW) == "foreign_issuer"
    assert pki.needs_renewal(client.cert_pem, other_ca.cert, NOW) == "foreign_issuer"
    assert pki.needs_renewal(client.cert_pem, [], NOW) == "foreign_issuer"
    # a bundle: any of its CAs will do
    assert pki.needs_renewal(client.cert_pem, [other_ca.cert, ca.cert], NOW) is None
    assert pki.needs_renewal(client.cert_pem, ca.cert, NOW) is None


def test_same_name_other_key_is_foreign(
    ca: certs.CertificateAuthority, client: certs.KeyPair
) -> None:
    """The signature decides, not the issuer's name."""
    impostor = certs.CertificateAuthority.create("watcher-ca", CA_LIFETIME)
    assert impostor.cert.subject == ca.cert.subject
    assert pki.needs_renewal(client.cert_pem, impostor, NOW) == "foreign_issuer"


def test_subject_changed(ca: certs.CertificateAuthority, client: certs.KeyPair) -> None:
    pem = client.cert_pem
    kw = {"runtime_id": "rt-1", "domain": "c-1.kyma.example.com"}
    assert pki.needs_renewal(pem, ca, NOW, **kw) is None
    assert (
        pki.needs_renewal(pem, ca, NOW, runtime_id="rt-1", domain="C-1.KYMA.example.com.") is None
    )
    assert pki.needs_renewal(pem, ca, NOW, runtime_id="rt-2") == "subject_changed"
    assert pki.needs_renewal(pem, ca, NOW, domain="c-2.kyma.example.com") == "subject_changed"


def test_extra_san_is_a_changed_subject(ca: certs.CertificateAuthority) -> None:
    two = ca.issue(
        "rt-1",
        dns_names=["a.example.com", "b.example.com"],
        client=True,
        not_before=NOW,
        validity=LIFETIME,
    )
    ip = ca.issue(
        "rt-1",
        dns_names=["a.example.com"],
        ip_addresses=["10.0.0.1"],
        client=True,
        not_before=NOW,
        validity=LIFETIME,
    )
    for pair in (two, ip):
        assert (
            pki.needs_renewal(pair.cert_pem, ca, NOW, domain="a.example.com") == "subject_changed"
        )
        assert pki.needs_renewal(pair.cert_pem, ca, NOW) is None


def test_reasons_in_order(other_ca: certs.CertificateAuthority, client: certs.KeyPair) -> None:
    """Issuer before subject before time: an old CA's expired certificate is foreign."""
    late = client.cert.not_valid_after_utc + DAY
    assert pki.needs_renewal(client.cert_pem, other_ca, late, runtime_id="x") == "foreign_issuer"


def test_subject_before_time(ca: certs.CertificateAuthority, client: certs.KeyPair) -> None:
    late = client.cert.not_valid_after_utc + DAY
    assert pki.needs_renewal(client.cert_pem, ca, late, runtime_id="x") == "subject_changed"


def test_first_certificate_of_a_chain_counts(
    ca: certs.CertificateAuthority, other_ca: certs.CertificateAuthority, client: certs.KeyPair
) -> None:
    assert pki.needs_renewal(client.cert_pem + ca.cert_pem, ca, NOW) is None
    foreign = pki.client_certificate(other_ca, "rt-1", "c-1.kyma.example.com", LIFETIME, NOW)
    assert pki.needs_renewal(foreign.cert_pem + client.cert_pem, ca, NOW) == "foreign_issuer"


# -- CA rollover --------------------------------------------------------------------------


def test_ca_needs_rollover(ca: certs.CertificateAuthority) -> None:
    start, end = ca.cert.not_valid_before_utc, ca.cert.not_valid_after_utc
    due = start + (end - start) * 2 / 3
    assert not pki.ca_needs_rollover(ca.cert, start)
    assert not pki.ca_needs_rollover(ca.cert, due - SECOND)
    assert pki.ca_needs_rollover(ca.cert, due)
    assert pki.ca_needs_rollover(ca.cert, end + DAY)
    half = start + (end - start) / 2
    assert pki.ca_needs_rollover(ca.cert, half, fraction=0.5)
    assert not pki.ca_needs_rollover(ca.cert, half - SECOND, fraction=0.5)


@pytest.mark.parametrize("fraction", [0, -0.5, 1.5])
def test_ca_needs_rollover_fraction_bounds(ca: certs.CertificateAuthority, fraction: float) -> None:
    with pytest.raises(pki.PKIError, match="fraction"):
        pki.ca_needs_rollover(ca.cert, NOW, fraction)


def test_trust_bundle_current_first(
    ca: certs.CertificateAuthority, other_ca: certs.CertificateAuthority
) -> None:
    bundle = x509.load_pem_x509_certificates(pki.trust_bundle(ca.cert, other_ca.cert))
    assert bundle == [ca.cert, other_ca.cert]
    assert pki.trust_bundle(ca.cert, None) == ca.cert_pem
    assert pki.trust_bundle(ca.cert, ca.cert) == ca.cert_pem


def test_rollover_complete(
    ca: certs.CertificateAuthority, other_ca: certs.CertificateAuthority, client: certs.KeyPair
) -> None:
    old = pki.client_certificate(other_ca, "rt-2", "c-2.kyma.example.com", LIFETIME, NOW)
    new = pki.client_certificate(ca, "rt-2", "c-2.kyma.example.com", LIFETIME, NOW)
    assert pki.rollover_complete({}, ca)
    assert pki.rollover_complete({"rt-1": client.cert_pem, "rt-2": new.cert_pem}, ca)
    assert pki.rollover_complete({"rt-1": client.cert_pem, "rt-2": new.cert_pem}, ca.cert)
    assert not pki.rollover_complete({"rt-1": client.cert_pem, "rt-2": old.cert_pem}, ca)
    # a runtime without a certificate (or with one no CA accepts) does not block
    assert pki.rollover_complete(
        {"rt-1": client.cert_pem, "rt-2": None, "rt-3": b"", "rt-4": b"garbage"}, ca
    )
    assert not pki.rollover_complete({"rt-2": None, "rt-3": old.cert_pem}, ca)


# -- display ------------------------------------------------------------------------------


def test_describe_client(ca: certs.CertificateAuthority, client: certs.KeyPair) -> None:
    d = pki.describe(client.cert_pem, NOW + DAY)
    assert d == {
        "subject_cn": "rt-1",
        "dns_names": ["c-1.kyma.example.com"],
        "ip_addresses": [],
        "issuer_cn": "watcher-ca",
        "serial": format(client.cert.serial_number, "x"),
        "not_before": "2030-01-01T11:55:00Z",
        "not_after": "2030-01-31T12:00:00Z",
        "renew_at": "2030-01-21T11:58:20Z",
        "days_left": 29.0,
        "extended_key_usages": ["clientAuth"],
        "is_ca": False,
        "sha256": client.cert.fingerprint(hashes.SHA256()).hex(),
    }
    assert pki.describe(client.cert, NOW + DAY) == d


def test_describe_ca_server_and_ips(ca: certs.CertificateAuthority) -> None:
    assert pki.describe(ca.cert, NOW)["is_ca"] is True
    assert pki.describe(ca.cert, NOW)["extended_key_usages"] == []
    both = ca.issue(
        "svc",
        dns_names=["svc.example.com"],
        ip_addresses=["127.0.0.1", "::1"],
        server=True,
        client=True,
        not_before=NOW,
        validity=DAY,
    )
    d = pki.describe(both.cert, NOW + 2 * DAY)
    assert d["ip_addresses"] == ["127.0.0.1", "::1"]
    assert d["extended_key_usages"] == ["serverAuth", "clientAuth"]
    assert d["days_left"] == -1.0


def test_describe_has_no_key(client: certs.KeyPair) -> None:
    text = json.dumps(pki.describe(client.cert_pem + client.key_pem, NOW))
    assert "PRIVATE KEY" not in text
    assert b"".join(client.key_pem.splitlines()[1:-1]).decode() not in text
    private = client.key.private_numbers().private_value
    assert str(private) not in text and format(private, "x") not in text


def test_describe_refuses_no_certificate(client: certs.KeyPair) -> None:
    with pytest.raises(pki.PKIError, match="no PEM certificate"):
        pki.describe(client.key_pem, NOW)


# -- the CA Secret ------------------------------------------------------------------------


def test_secret_round_trip(ca: certs.CertificateAuthority) -> None:
    data = pki.ca_secret_data(ca, None)
    assert data == {"tls.crt": ca.cert_pem, "tls.key": ca.key_pem}
    current, previous = pki.load_ca_secret(data)
    assert current.cert == ca.cert and previous is None
    assert current.key.private_numbers() == ca.key.private_numbers()
    assert pki.ca_secret_data(current, previous) == data


def test_secret_round_trip_in_rollover(
    ca: certs.CertificateAuthority, other_ca: certs.CertificateAuthority
) -> None:
    data = pki.ca_secret_data(ca, other_ca.cert)
    assert data == {
        "tls.crt": ca.cert_pem,
        "tls.key": ca.key_pem,
        "previous.crt": other_ca.cert_pem,
    }
    current, previous = pki.load_ca_secret(data)
    assert current.cert == ca.cert and previous == other_ca.cert
    assert pki.ca_secret_data(current, previous) == data
    # an emptied previous.crt ends the rollover; one equal to the current CA is none
    assert pki.load_ca_secret(data | {"previous.crt": b""})[1] is None
    assert pki.load_ca_secret(data | {"previous.crt": ca.cert_pem})[1] is None
    # other keys are ignored
    assert pki.load_ca_secret(data | {"ca.crt": b"anything"})[1] == other_ca.cert
    assert pki.ca_secret_data(ca, ca.cert) == {"tls.crt": ca.cert_pem, "tls.key": ca.key_pem}


def _encrypted(ca: certs.CertificateAuthority) -> bytes:
    return ca.key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.BestAvailableEncryption(b"secret"),
    )


def _bad_secrets(
    ca: certs.CertificateAuthority, other: certs.CertificateAuthority
) -> list[tuple[str, dict[str, bytes], str]]:
    good = {"tls.crt": ca.cert_pem, "tls.key": ca.key_pem}
    leaf = ca.issue("leaf", client=True)
    return [
        ("no cert", {"tls.key": ca.key_pem}, "tls.crt is missing"),
        ("empty cert", good | {"tls.crt": b""}, "tls.crt is missing"),
        ("no key", {"tls.crt": ca.cert_pem}, "tls.key is missing"),
        ("garbage cert", good | {"tls.crt": b"garbage"}, "tls.crt holds no PEM certificate"),
        ("key as cert", good | {"tls.crt": ca.key_pem}, "tls.crt holds no PEM certificate"),
        ("two certs", good | {"tls.crt": ca.cert_pem + other.cert_pem}, "holds 2 certificates"),
        ("leaf cert", {"tls.crt": leaf.cert_pem, "tls.key": leaf.key_pem}, "not a CA certificate"),
        ("garbage key", good | {"tls.key": b"garbage"}, "tls.key is not an unencrypted PEM"),
        ("encrypted key", good | {"tls.key": _encrypted(ca)}, "tls.key is not an unencrypted PEM"),
        ("other key", good | {"tls.key": other.key_pem}, "tls.key does not match"),
        ("garbage previous", good | {"previous.crt": b"garbage"}, "previous.crt holds no PEM"),
        ("leaf previous", good | {"previous.crt": leaf.cert_pem}, "previous.crt is not a CA"),
    ]


def test_secret_errors(
    ca: certs.CertificateAuthority, other_ca: certs.CertificateAuthority
) -> None:
    for case, data, problem in _bad_secrets(ca, other_ca):
        with pytest.raises(pki.PKIError) as raised:
            pki.load_ca_secret(data)
        message = str(raised.value)
        assert problem in message, case
        assert message.startswith("CA Secret: "), case
        assert "PRIVATE" not in message and "BEGIN" not in message, case
        assert isinstance(raised.value, ValueError)


def test_load_ca_names_its_sources(
    ca: certs.CertificateAuthority, other_ca: certs.CertificateAuthority
) -> None:
    with pytest.raises(
        pki.PKIError, match="^/ca/ca.key does not match the certificate in /ca/ca.crt$"
    ):
        pki.load_ca(ca.cert_pem, other_ca.key_pem, "/ca/ca.crt", "/ca/ca.key")
    assert pki.load_ca(ca.cert_pem, ca.key_pem).cert == ca.cert
