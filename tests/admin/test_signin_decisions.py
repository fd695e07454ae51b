"""The sign-in decisions as plain data (no plane): where ``next`` may lead, which
``Origin``/``Sec-Fetch-Site`` are the admin's own, the TokenReview audience check, the
per-source review budget and the session store's bounds. The same cases run over HTTPS
against a real KCP in test_signin.py."""

from __future__ import annotations

import base64
import json

import pytest

from admin import auth, sessions, signin, throttle

PAGES = ("/fleet", "/compass", "/parts")


def is_page(path: str) -> bool:
    return path in PAGES or (
        path.startswith("/runtimes/") and path.count("/") == 2 and len(path) > len("/runtimes/")
    )


@pytest.mark.parametrize(
    "raw",
    [
        "/%09/evil.example",
        "/\t/evil.example",
        "//evil.example",
        "///evil.example",
        "/\\evil.example",
        "/%5Cevil.example",
        "https://evil.example",
        "https://evil.example/fleet",
        "%2F%2Fevil.example",
        "%2f%2fevil.example",
        "/%2F%2Fevil.example",
        "/%252F%252Fevil.example",
        "/%25252525252F",
        "http:/fleet",
        "javascript:alert(1)",
        "//evil.example/fleet",
        "/fleet/../../evil",
        "/runtimes/..",
        "/runtimes/%2E%2E",
        "/login",
        "/logout",
        "/metrics",
        "/static/admin.css",
        "/",
        "",
        "fleet",
        "/nope",
        "/runtimes/a%2Fb",
        "/fleet\n",
        " /fleet",
        "/fleet%00",
        "/fleet%0d%0aSet-Cookie:x=1",
        "/r\u00e9",
        "/fleet" + "?q=a" * 1000,
    ],
)
def test_next_refuses_anything_but_a_page(raw: str) -> None:
    assert signin.safe_next(raw, is_page) == "/fleet"


@pytest.mark.parametrize(
    ("raw", "kept"),
    [
        ("/fleet", "/fleet"),
        ("/fleet?x=1", "/fleet?x=1"),
        ("/fleet?q=a%26b&problem=silent", "/fleet?q=a%26b&problem=silent"),
        ("/fleet?q=a+b", "/fleet?q=a+b"),
        ("/fleet?q=%3Cscript%3E#frag", "/fleet?q=%3Cscript%3E"),
        ("/runtimes/rt-failing?x=1", "/runtimes/rt-failing?x=1"),
        ("/compass", "/compass"),
        ("%2Fparts", "/parts"),  # encoded, but a page once decoded
    ],
)
def test_next_keeps_a_page_rebuilt(raw: str, kept: str) -> None:
    assert signin.safe_next(raw, is_page) == kept


OWN = "https://admin.example:8443"


@pytest.mark.parametrize(
    ("origin", "site"),
    [
        (None, None),
        (OWN, None),
        (None, "same-origin"),
        (OWN, "same-origin"),
        ("HTTPS://Admin.Example:8443", "Same-Origin"),
        (OWN + "/", None),
    ],
)
def test_same_origin_is_accepted(origin: str | None, site: str | None) -> None:
    assert signin.cross_site(origin, site, OWN) is None


@pytest.mark.parametrize(
    ("origin", "site"),
    [
        ("https://evil.example", None),
        ("null", None),
        ("", None),
        ("http://admin.example:8443", None),
        ("https://admin.example", None),
        ("https://admin.example:8443.evil.example", None),
        ("https://x@admin.example:8443", None),
        (None, "cross-site"),
        (None, "same-site"),
        (None, "none"),
        (OWN, "cross-site"),
        ("https://admin.example:99999", None),
    ],
)
def test_another_origin_is_refused(origin: str | None, site: str | None) -> None:
    why = signin.cross_site(origin, site, OWN)
    assert why is not None and "another" in why


def test_default_ports_are_the_same_origin() -> None:
    assert signin.cross_site("https://admin.example", None, "https://admin.example:443") is None
    assert signin.origin_of("https://[::1]:8443") == "https://[::1]:8443"


def review(authenticated: bool, audiences: list[str]) -> dict[str, object]:
    return {
        "status": {
            "authenticated": authenticated,
            "audiences": audiences,
            "user": {"username": "u", "uid": "1", "groups": ["g"], "extra": {"k": ["v"]}},
        }
    }


def test_a_review_counts_only_for_the_admin_audience() -> None:
    body = auth.review_body("t", "tether-admin")
    assert body["spec"] == {"token": "t", "audiences": ["tether-admin"]}
    assert auth.identity_of(review(True, ["tether-admin"]), "tether-admin") == auth.Identity(
        "u", "1", ("g",), (("k", ("v",)),)
    )
    assert (
        auth.identity_of(review(True, ["https://kubernetes.default.svc"]), "tether-admin") is None
    )
    assert auth.identity_of(review(True, []), "tether-admin") is None
    assert auth.identity_of(review(False, ["tether-admin"]), "tether-admin") is None


def test_the_expiry_of_a_jwt() -> None:
    def jwt(claims: object) -> str:
        part = base64.urlsafe_b64encode(json.dumps(claims).encode()).rstrip(b"=").decode()
        return f"h.{part}.s"

    assert auth.expiry_of(jwt({"exp": 1700000000})) == 1700000000.0
    assert auth.expiry_of(jwt({"exp": True})) is None
    assert auth.expiry_of(jwt([1])) is None
    assert auth.expiry_of("opaque-static-token") is None
    assert auth.expiry_of("a.!!!.c") is None


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def test_the_review_budget_per_source() -> None:
    clock = Clock()
    b = throttle.Buckets(6, max_sources=2, clock=clock)
    for _ in range(6):
        b.take("a")
    with pytest.raises(throttle.Throttled) as e:
        b.take("a")
    assert e.value.retry_after == 10  # one review every 10 s at 6 a minute
    b.take("b")  # another source is not held back
    clock.t += 10
    b.take("a")
    with pytest.raises(throttle.Throttled):
        b.take("a")
    b.take("c")
    assert len(b) == 2  # bounded: the least recently used source was dropped


def test_sources_of_addresses() -> None:
    assert throttle.source_of("10.0.0.1") == "10.0.0.1"
    assert throttle.source_of("2001:db8::1") == throttle.source_of("2001:db8::ffff:1")
    assert throttle.source_of("2001:db8::1") == "2001:db8::/64"
    assert throttle.source_of("::ffff:10.0.0.1") == "10.0.0.1"
    assert throttle.source_of("x" * 500) == "x" * 64


WHO = auth.Identity("alice", "", (), ())


def test_sessions_end_are_deleted_and_are_bounded() -> None:
    clock = Clock()
    store = sessions.Store(3, per_user=3, clock=clock)
    a = store.create(WHO, 60)
    assert len(a) >= 43 and store.get(a) == WHO
    assert store.get(a + "x") is None and store.get("") is None and store.get("a" * 500) is None
    assert store.delete(a) and store.get(a) is None and not store.delete(a)
    short, b, c = store.create(WHO, 5), store.create(WHO, 60), store.create(WHO, 60)
    clock.t += 10
    d = store.create(WHO, 60)  # full: the expired one goes first
    assert store.get(short) is None and store.get(b) == WHO and len(store) == 3
    store.create(WHO, 60)  # full again: the oldest goes
    assert store.get(b) is None and store.get(c) == WHO and store.get(d) == WHO
    clock.t += 60
    assert store.get(c) is None  # expired


def test_one_user_signing_in_again_and_again_ends_only_its_own_sessions() -> None:
    clock = Clock()
    store = sessions.Store(10, per_user=2, clock=clock)
    alice = [store.create(WHO, 60) for _ in range(2)]
    bob_who = auth.Identity("bob", "", (), ())
    bob = store.create(bob_who, 60)
    mallory_who = auth.Identity("mallory", "", (), ())
    mallory = [store.create(mallory_who, 60) for _ in range(2000)]
    assert [store.get(a) for a in alice] == [WHO, WHO] and store.get(bob) == bob_who
    assert store.of("mallory") == 2 and len(store) == 5
    assert store.get(mallory[-1]) == mallory_who and store.get(mallory[-2]) == mallory_who
    assert store.get(mallory[0]) is None  # its own oldest went
    # an ended session leaves the user's count with it
    assert store.delete(mallory[-1]) and store.of("mallory") == 1
    clock.t += 61
    assert store.get(bob) is None and store.of("bob") == 0


def test_the_whole_store_is_bounded_across_users() -> None:
    store = sessions.Store(10, per_user=2, clock=Clock())
    made = [store.create(auth.Identity(f"user-{i}", "", (), ()), 60) for i in range(15)]
    assert len(store) == 10
    assert all(store.get(sid) is None for sid in made[:5])  # the oldest went
    assert all(store.get(sid) is not None for sid in made[5:])
    assert store.of("user-0") == 0 and store.of("user-14") == 1
