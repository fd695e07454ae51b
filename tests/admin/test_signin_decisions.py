"""The sign-in decisions as plain data (no plane): where ``next`` may lead, which
``Origin``/``Sec-Fetch-Site`` are the admin's own, the TokenReview audience check, the
per-source review budget, the sealed session cookie (keys, rotation, tampering) and the
sign-out ledger's bounds. The same cases run over HTTPS
against a real KCP in test_signin.py."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from admin import auth, sessioncookie, signin, signouts, throttle

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


KEY, OLD = bytes(range(32)), bytes(range(1, 33))


def claims(who: auth.Identity = WHO, issued: float = 1000.0, expires: float = 2000.0) -> Claims:
    return sessioncookie.Claims("sid-1", who, issued, expires)


Claims = sessioncookie.Claims


def test_a_sealed_session_opens_only_with_its_key_and_until_it_expires() -> None:
    # '@' and ':' are outside base64url, so the names cannot appear in a sealed value by chance
    who = auth.Identity(
        "alice@example.org", "u-1", ("team:ops", "system:authenticated"), (("k", ("v",)),)
    )
    value = sessioncookie.seal(KEY, claims(who))
    assert value.startswith("v1." + sessioncookie.key_id(KEY) + ".")
    assert sessioncookie.open_([KEY], value, 1500.0) == claims(who)
    assert sessioncookie.open_([KEY], value, 2000.0) is None  # expired
    assert sessioncookie.open_([OLD], value, 1500.0) is None  # another key
    # nothing of the identity is readable, and two seals of the same differ (the nonce)
    assert "alice@example.org" not in value and "team:ops" not in value
    assert sessioncookie.seal(KEY, claims(who)) != value


@pytest.mark.parametrize(
    "mangle",
    [
        lambda v: v[:-2] + ("A" if v[-2] != "A" else "B") + v[-1],  # a bit of the ciphertext
        lambda v: "v2" + v[2:],  # another format
        lambda v: v.replace(v.split(".")[1], "00000000"),  # another key id
        lambda v: v.split(".")[0] + "." + v.split(".")[1] + ".",  # no ciphertext
        lambda v: v + "x" * sessioncookie.MAX_VALUE,  # too long: not even opened
        lambda v: "",
        lambda v: "v1..AAAA",
        lambda v: "garbage",
    ],
)
def test_an_altered_or_forged_cookie_is_no_session(mangle: Any) -> None:
    value = sessioncookie.seal(KEY, claims())
    assert sessioncookie.open_([KEY], mangle(value), 1500.0) is None


def test_a_cookie_sealed_with_valid_json_of_the_wrong_shape_is_no_session() -> None:
    kid = sessioncookie.key_id(KEY)
    nonce = b"\0" * 12
    for plain in (b"[]", b'{"s": 1}', b'{"s":"a","u":"b","i":"","g":[1],"x":{},"t":1,"e":9e9}'):
        sealed = AESGCM(KEY).encrypt(nonce, plain, f"tether-admin-session/v1/{kid}".encode())
        value = f"v1.{kid}." + base64.urlsafe_b64encode(nonce + sealed).decode().rstrip("=")
        assert sessioncookie.open_([KEY], value, 1500.0) is None


def test_key_rotation_the_first_key_seals_every_listed_key_opens() -> None:
    old = sessioncookie.seal(OLD, claims())
    text = f"{base64.b64encode(KEY).decode()}\n{base64.b64encode(OLD).decode()}\n"
    keys = sessioncookie.parse_keys(text, "keys")
    assert keys == (KEY, OLD)
    assert sessioncookie.open_(keys, old, 1500.0) == claims()
    assert sessioncookie.open_(keys[:1], old, 1500.0) is None  # the old key dropped
    for bad, why in (
        ("", "no key"),
        ("not base64!\n", "not base64"),
        (base64.b64encode(b"short").decode(), "holds 5 bytes"),
        ((base64.b64encode(KEY).decode() + "\n") * 5, "at most 4"),
    ):
        with pytest.raises(ValueError, match=why) as e:
            sessioncookie.parse_keys(bad, "/etc/keys")
        assert "/etc/keys" in str(e.value) and base64.b64encode(KEY).decode() not in str(e.value)


def test_an_identity_too_large_for_a_cookie_is_refused() -> None:
    many = auth.Identity("alice", "", tuple(f"group-{i:04d}-" + "x" * 40 for i in range(80)), ())
    with pytest.raises(sessioncookie.TooLarge, match="80 groups"):
        sessioncookie.seal(KEY, claims(many))


BOUNDS = signouts.Bounds(per_user=2, max_entries=5, lifetime=100.0)


def out(sid: str, user: str = "alice", expires: float = 500.0) -> signouts.Signout:
    return signouts.Signout(sid, user, expires)


def test_a_signed_out_session_ends_and_its_entry_goes_when_the_cookie_would_have() -> None:
    data = signouts.record({}, out("a", expires=150.0), 100.0, BOUNDS)
    assert signouts.ended(data, "a", "alice", 90.0)
    assert not signouts.ended(data, "b", "alice", 90.0)  # another session of the same user
    # the map names no one: hashes only
    assert all("alice" not in k + v and "a" != k for k, v in data.items())
    later = signouts.record(data, out("b"), 151.0, BOUNDS)  # a's cookie expired: its entry went
    assert signouts.session_key("a") not in later and signouts.ended(later, "b", "alice", 0)


def test_one_user_signing_out_again_and_again_costs_one_entry() -> None:
    data: dict[str, str] = {}
    data = signouts.record(data, out("x", user="bob"), 100.0, BOUNDS)
    for i in range(50):
        data = signouts.record(data, out(f"s{i}"), 100.0 + i, BOUNDS)
    assert len(data) <= 1 + BOUNDS.per_user + 1  # bob's, alice's cutoff and her newest
    assert signouts.user_key("alice") in data and signouts.ended(data, "x", "bob", 0)
    # the cutoff ends every session of alice issued up to the last collapse, not later ones
    cut = float(data[signouts.user_key("alice")].split()[0])
    assert signouts.ended(data, "any", "alice", cut) and not signouts.ended(
        data, "any", "alice", cut + 1
    )
    assert not signouts.ended(data, "any", "bob", 0)
    # the cutoff is kept one session lifetime, then goes
    assert signouts.user_key("alice") not in signouts.record(
        data, out("y", user="carol"), cut + BOUNDS.lifetime + 1, BOUNDS
    )


def test_the_whole_map_is_bounded_across_users() -> None:
    data: dict[str, str] = {}
    for i in range(5):
        data = signouts.record(data, out(f"s{i}", user=f"user-{i}"), 100.0, BOUNDS)
    assert len(data) == 5
    # full: the next sign-out becomes its user's cutoff, replacing that user's own entry
    data = signouts.record(data, out("t0", user="user-0"), 101.0, BOUNDS)
    assert len(data) == 5 and signouts.user_key("user-0") in data
    assert signouts.ended(data, "s0", "user-0", 100.0) and signouts.ended(data, "t0", "user-0", 1)
    # a sixth user would need a sixth entry: refused, nothing written
    with pytest.raises(signouts.Full):
        signouts.record(data, out("n", user="user-new"), 102.0, BOUNDS)


def test_entries_edited_by_hand_end_what_they_name() -> None:
    data = {signouts.user_key("alice"): "garbage", signouts.session_key("s"): "x y"}
    assert signouts.ended(data, "any", "alice", 0) and signouts.ended(data, "s", "bob", 0)
    kept = signouts.record({**data, "other": "z"}, out("n", user="bob"), 100.0, BOUNDS)
    assert kept["other"] == "z" and signouts.ended(kept, "s", "bob", 0)
