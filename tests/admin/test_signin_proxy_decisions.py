"""Whom an authenticating proxy's headers name, as plain data (no plane, no TLS): the headers
count only with the proxy's certificate name, are bounded, and a request without them is
judged as any other. The same over real TLS against a real KCP: test_signin_proxy.py."""

from __future__ import annotations

import pytest

from admin import auth, proxyauth

TRUST = proxyauth.Trust(frozenset({"proxy"}), ("X-Remote-User",), ("X-Remote-Group",))
OAUTH2 = proxyauth.Trust(
    frozenset({"proxy"}), ("X-Forwarded-Email", "X-Forwarded-User"), ("X-Forwarded-Groups",)
)


def test_no_identity_header_is_no_decision() -> None:
    assert proxyauth.decide({"Authorization": "Bearer x"}, None, TRUST) is None
    assert proxyauth.decide({}, "proxy", TRUST) is None


@pytest.mark.parametrize(
    "headers",
    [
        {"X-Remote-User": "alice"},
        {"x-remote-user": "alice"},
        {"X-Remote-Group": "admins"},  # groups alone are identity headers too
        {"X-Remote-User": ""},
    ],
)
def test_identity_headers_without_the_proxy_certificate_are_refused(
    headers: dict[str, str],
) -> None:
    found = proxyauth.decide(headers, None, TRUST)
    assert isinstance(found, proxyauth.Refused)
    assert found.status == 401 and found.reason == "no_certificate"
    assert "X-Remote-User" in found.message and "client certificate" in found.message
    other = proxyauth.decide(headers, "someone-else", TRUST)
    assert isinstance(other, proxyauth.Refused) and other.reason == "name_not_allowed"
    assert "someone-else" in other.message


def test_the_proxy_names_the_user_and_groups() -> None:
    found = proxyauth.decide(
        {"X-Remote-User": " alice ", "X-Remote-Group": "ops, admins,ops,,"}, "proxy", TRUST
    )
    assert found == auth.Identity("alice", "", ("ops", "admins", "system:authenticated"), ())
    # oauth2-proxy's headers, the first user header set counts
    found = proxyauth.decide(
        {"X-Forwarded-User": "alice", "X-Forwarded-Groups": "g"}, "proxy", OAUTH2
    )
    assert isinstance(found, auth.Identity) and found.user == "alice"
    found = proxyauth.decide(
        {"X-Forwarded-Email": "a@example.com", "X-Forwarded-User": "alice"}, "proxy", OAUTH2
    )
    assert isinstance(found, auth.Identity) and found.user == "a@example.com"
    # a header the settings do not name is no identity header
    assert proxyauth.decide({"X-Forwarded-User": "alice"}, None, TRUST) is None


@pytest.mark.parametrize(
    ("headers", "status", "reason"),
    [
        ({"X-Remote-Group": "ops"}, 401, "no_user"),
        ({"X-Remote-User": "   "}, 401, "no_user"),
        ({"X-Remote-User": "a" * (proxyauth.MAX_USER + 1)}, 400, "bad_headers"),
        ({"X-Remote-User": "alice\x1b[31m"}, 400, "bad_headers"),
        (
            {"X-Remote-User": "a", "X-Remote-Group": ",".join(f"g{i}" for i in range(65))},
            400,
            "bad_headers",
        ),
        ({"X-Remote-User": "a", "X-Remote-Group": "g" * 257}, 400, "bad_headers"),
        ({"X-Remote-User": "a", "X-Remote-Group": "ok,bad\x00"}, 400, "bad_headers"),
    ],
)
def test_the_proxys_headers_are_bounded(headers: dict[str, str], status: int, reason: str) -> None:
    found = proxyauth.decide(headers, "proxy", TRUST)
    assert isinstance(found, proxyauth.Refused), found
    assert (found.status, found.reason) == (status, reason)
    assert "\x1b" not in found.message and "\x00" not in found.message
