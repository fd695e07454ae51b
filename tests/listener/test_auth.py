"""The listener's authorization decision and certificate sources (pure, plain data)."""

from __future__ import annotations

import datetime
import urllib.parse

import pytest
from cryptography.x509 import verification

from listener.edge import auth, peer
from tether.base import certs
from tether.kube import apitypes, kyma


def now() -> datetime.datetime:
    """The time of the call (certificates below are issued just before it; a module-level
    time taken at collection would be minutes old when a long suite reaches these tests)."""
    return datetime.datetime.now(datetime.UTC)


def view(
    runtime_id: str = "rt-1", domain: str | None = "c-1.kyma.example.com", deleting: bool = False
) -> kyma.KymaView:
    return kyma.KymaView("kcp-system", "k1", "uid", runtime_id, domain, deleting, {})


def test_authorize_accepts_matching_cn_and_san() -> None:
    assert (
        auth.authorize("rt-1", ["other.example", "C-1.Kyma.Example.com."], "rt-1", [view()]) is None
    )


@pytest.mark.parametrize(
    ("cn", "sans", "kymas", "reason"),
    [
        ("rt-2", ["c-1.kyma.example.com"], [view()], "cn_mismatch"),
        (None, ["c-1.kyma.example.com"], [view()], "cn_mismatch"),
        ("rt-1", ["c-1.kyma.example.com"], [], "unknown_runtime"),
        ("rt-1", ["c-1.kyma.example.com"], [view(), view()], "ambiguous_runtime"),
        ("rt-1", ["c-1.kyma.example.com"], [view(deleting=True)], "runtime_deleting"),
        ("rt-1", ["c-1.kyma.example.com"], [view(domain=None)], "domain_missing"),
        ("rt-1", ["c-2.kyma.example.com"], [view()], "san_mismatch"),
        ("rt-1", [], [view()], "san_mismatch"),
    ],
)
def test_authorize_refusals(
    cn: str | None, sans: list[str], kymas: list[kyma.KymaView], reason: str
) -> None:
    refusal = auth.authorize(cn, sans, "rt-1", kymas)
    assert refusal is not None and refusal.status == 403 and refusal.reason == reason
    assert refusal.reason in auth.REASONS


def test_kyma_view_and_runtime_id_check() -> None:
    v = kyma.view(
        {
            "metadata": {
                "name": "k",
                "namespace": "kcp-system",
                "uid": "u",
                "labels": {apitypes.RUNTIME_ID_LABEL: "rt-9"},
                "annotations": {apitypes.SKR_DOMAIN_ANNOTATION: " d.example.com "},
                "deletionTimestamp": "2026-11-30T10:00:00Z",
            }
        }
    )
    assert (v.runtime_id, v.domain, v.deleting) == ("rt-9", "d.example.com", True)
    assert (
        kyma.view({"metadata": {"annotations": {apitypes.SKR_DOMAIN_ANNOTATION: " "}}}).domain
        is None
    )
    assert kyma.valid_runtime_id("4a1f-9C_x.y")
    for bad in ("", "a,b", "a=b", "-a", "a" * 64, "a b", "x!=y"):
        assert not kyma.valid_runtime_id(bad)


def _xfcc(pair: certs.KeyPair, *, chain: bytes = b"") -> str:
    cert = urllib.parse.quote(pair.cert_pem.decode())
    out = f'By=spiffe://cluster.local/ns/tether-system/sa/tether-listener;Hash=abc;Cert="{cert}"'
    if chain:
        out += f';Chain="{urllib.parse.quote(chain.decode())}"'
    return out + ';Subject="CN=x,O=a;b";URI='


def test_parse_xfcc_takes_the_last_element_and_unquotes() -> None:
    fields = peer.parse_xfcc('By=a;Cert="first",By=b;Subject="CN=rt,O=x\\"y;z";DNS=d')
    assert fields == {"by": "b", "subject": 'CN=rt,O=x"y;z', "dns": "d"}
    for bad in ("", " , ", "By=a;novalue", "x" * (peer.MAX_XFCC_LENGTH + 1)):
        with pytest.raises(ValueError):
            peer.parse_xfcc(bad)


def test_xfcc_certificate_verification() -> None:
    ca = certs.CertificateAuthority.create("runtime-ca")
    other = certs.CertificateAuthority.create("other-ca")
    good = ca.issue("rt-1", dns_names=["c-1.kyma.example.com"], client=True)
    leaf, chain = peer.xfcc_certificates(peer.parse_xfcc(_xfcc(good, chain=good.cert_pem)))
    assert leaf == good.cert and chain == []
    peer.verify_chain(leaf, chain, [ca.cert], now())
    with pytest.raises(verification.VerificationError):
        peer.verify_chain(
            other.issue("rt-1", dns_names=["c-1.kyma.example.com"], client=True).cert,
            [],
            [ca.cert],
            now(),
        )
    start = now() - datetime.timedelta(days=3)
    old = ca.issue(
        "rt-1", dns_names=["c"], client=True, not_before=start, validity=datetime.timedelta(days=1)
    )
    with pytest.raises(verification.VerificationError):
        peer.verify_chain(old.cert, [], [ca.cert], now())
    with pytest.raises(ValueError):
        peer.xfcc_certificates({"cert": "not-a-pem"})


def test_from_environ_without_tls_peer() -> None:
    ca = certs.CertificateAuthority.create("runtime-ca")
    good = ca.issue("rt-1", dns_names=["c-1.kyma.example.com"], client=True)
    header = _xfcc(good)

    def source(environ: dict[str, object], proxies: tuple[str, ...]) -> str:
        try:
            return peer.from_environ(
                environ, trusted_proxies=proxies, cas=[ca.cert], now=now()
            ).source
        except peer.NoCertificate as e:
            return e.reason

    assert source({}, ("127.0.0.1/32",)) == "no_certificate"
    assert (
        source({peer.XFCC_ENVIRON: header, "REMOTE_ADDR": "127.0.0.1"}, ()) == "xfcc_untrusted_peer"
    )
    assert (
        source({peer.XFCC_ENVIRON: header, "REMOTE_ADDR": "10.0.0.9"}, ("127.0.0.1/32",))
        == "xfcc_untrusted_peer"
    )
    assert (
        source({peer.XFCC_ENVIRON: header, "REMOTE_ADDR": "127.0.0.6"}, ("127.0.0.0/8",)) == "xfcc"
    )
    assert (
        source({peer.XFCC_ENVIRON: "By=x", "REMOTE_ADDR": "127.0.0.6"}, ("127.0.0.0/8",))
        == "xfcc_malformed"
    )
    foreign = certs.CertificateAuthority.create("x").issue("rt-1", dns_names=["d"], client=True)
    assert (
        source({peer.XFCC_ENVIRON: _xfcc(foreign), "REMOTE_ADDR": "::1"}, ("::1/128",))
        == "xfcc_chain_invalid"
    )


@pytest.mark.parametrize(
    ("reason", "cn", "known", "owner"),
    [
        ("san_mismatch", "rt-a", True, "rt-a"),
        ("domain_missing", "rt-a", True, "rt-a"),
        ("runtime_deleting", "rt-a", True, "rt-a"),
        ("ambiguous_runtime", "rt-a", True, "rt-a"),
        ("cn_mismatch", "rt-a", True, "rt-a"),  # the sender, not the path's runtime
        ("cn_mismatch", "rt-gone", False, None),  # no Kyma CR carries the CN's runtime
        ("unknown_runtime", "rt-a", True, None),
        ("no_certificate", None, False, None),
        ("xfcc_chain_invalid", None, False, None),
        ("san_mismatch", "", True, None),  # a certificate without a CN names nobody
    ],
)
def test_a_refusal_counts_against_the_runtime_its_verified_cn_names(
    reason: str, cn: str | None, known: bool, owner: str | None
) -> None:
    assert auth.attributed(reason, cn, known) == owner


def test_every_attributed_reason_is_a_refusal_reason() -> None:
    assert set(auth.ATTRIBUTED) <= set(auth.REASONS)
    assert "unknown_runtime" not in auth.ATTRIBUTED and "no_certificate" not in auth.ATTRIBUTED
