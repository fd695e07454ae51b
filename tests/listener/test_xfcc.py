"""Behind Istio/Envoy: the client certificate from X-Forwarded-Client-Cert, trusted only
from the configured proxy addresses, with the same chain, CN and SAN checks."""

from __future__ import annotations

import pathlib
import urllib.parse
from collections.abc import Callable, Iterator

import pytest
import requests

from testing.listenerenv import Env, ListenerProcess, Runtime, expired

pytestmark = pytest.mark.processes  # starts processes of its own (testing/tiers.py)


def xfcc(cert_file: object) -> str:
    pem = pathlib.Path(str(cert_file)).read_text()
    return (
        "By=spiffe://cluster.local/ns/tether-system/sa/tether-listener;Hash=0f;"
        f'Cert="{urllib.parse.quote(pem)}";Subject="CN=x";URI='
    )


@pytest.fixture(scope="module")
def proxied(listener_env: Env) -> Iterator[ListenerProcess]:
    p = ListenerProcess(
        listener_env,
        "xfcc",
        TETHER_LISTENER_TLS_CERT_FILE="",
        TETHER_LISTENER_TLS_KEY_FILE="",
        TETHER_LISTENER_XFCC_TRUSTED_PROXIES="127.0.0.1/32",
    )
    yield p
    p.stop()


@pytest.fixture(scope="module")
def untrusting(listener_env: Env) -> Iterator[ListenerProcess]:
    p = ListenerProcess(
        listener_env,
        "xfcc-untrusting",
        TETHER_LISTENER_TLS_CERT_FILE="",
        TETHER_LISTENER_TLS_KEY_FILE="",
        TETHER_LISTENER_XFCC_TRUSTED_PROXIES="10.9.9.9/32",
    )
    yield p
    p.stop()


def post(p: ListenerProcess, rt: Runtime, header: str | None) -> requests.Response:
    headers = {} if header is None else {"X-Forwarded-Client-Cert": header}
    return requests.post(
        f"{p.url}/v1/runtimes/{rt.id}/changes", json=rt.record("a", 1), headers=headers, timeout=10
    )


def test_xfcc_from_trusted_proxy(proxied: ListenerProcess, runtime: Callable[..., Runtime]) -> None:
    rt = runtime()
    assert proxied.url.startswith("http://")
    r = post(proxied, rt, xfcc(rt.cert_file))
    assert r.status_code == 200, r.text
    assert r.json()["results"][0]["outcome"] == "persisted"
    cases = [
        (None, 401, "no_certificate"),
        ("By=x;Hash=y", 401, "xfcc_malformed"),
        (xfcc(rt.issue(rt.env.foreign_ca)[0]), 401, "xfcc_chain_invalid"),
        (xfcc(rt.issue(**expired())[0]), 401, "xfcc_chain_invalid"),
        (xfcc(rt.issue(dns=["elsewhere.example.com"])[0]), 403, "san_mismatch"),
        (xfcc(rt.issue(cn="rt-someone-else")[0]), 403, "cn_mismatch"),
    ]
    for header, status, reason in cases:
        r = post(proxied, rt, header)
        assert (r.status_code, r.json()["details"]["reason"]) == (status, reason)
    assert len(rt.env.stored(rt.id)) == 1


def test_xfcc_ignored_from_untrusted_peer(
    untrusting: ListenerProcess, runtime: Callable[..., Runtime]
) -> None:
    rt = runtime()
    r = post(untrusting, rt, xfcc(rt.cert_file))
    assert r.status_code == 401
    assert r.json()["details"]["reason"] == "xfcc_untrusted_peer"
    assert rt.env.stored(rt.id) == []
