"""Sessions across restarts and replicas, over HTTPS against the session's KCP plane: two
``tether admin`` processes with the same session key (the Secret the replicas mount) and the
same sign-out ConfigMap. A browser signed in stays signed in when its replica restarts, the
other replica accepts its cookie, a sign-out on one ends it on the other within
SIGNOUT_CACHE_SECONDS, and a process with another key accepts none of them."""

from __future__ import annotations

import base64
import os
import time
from collections.abc import Iterator

import pytest

from admin import guard as admin_guard
from testing import adminenv, pollerenv

pytestmark = pytest.mark.processes

COOKIE = admin_guard.COOKIE
CACHE = 2  # TETHER_ADMIN_SIGNOUT_CACHE_SECONDS of both replicas


def as_cookie(value: str) -> dict[str, str]:
    return {"Cookie": f"{COOKIE}={value}"}


@pytest.fixture(scope="module")
def token(admin_env: adminenv.Env) -> str:
    return admin_env.operator("replica-operator", None)


@pytest.fixture(scope="module")
def replicas(admin_env: adminenv.Env) -> Iterator[tuple[adminenv.AdminProcess, ...]]:
    one = adminenv.AdminProcess(admin_env, TETHER_ADMIN_SIGNOUT_CACHE_SECONDS=str(CACHE))
    two = adminenv.AdminProcess(admin_env, TETHER_ADMIN_SIGNOUT_CACHE_SECONDS=str(CACHE))
    yield one, two
    one.stop()
    two.stop()


def sign_in(p: adminenv.AdminProcess, token: str) -> str:
    r = p.post("/login", {"token": token, "next": "/fleet"})
    assert r.status_code == 303, r.text
    header = r.headers["Set-Cookie"]
    assert header.startswith(COOKIE + "=") and "HttpOnly" in header and "Secure" in header
    assert "SameSite=Strict" in header and "Path=/" in header and "Domain" not in header
    return header.split(";", 1)[0].split("=", 1)[1]


def test_a_restart_keeps_the_browser_signed_in(
    replicas: tuple[adminenv.AdminProcess, ...], token: str
) -> None:
    one, _ = replicas
    cookie = sign_in(one, token)
    assert token not in cookie
    assert one.get("/fleet", headers=as_cookie(cookie)).status_code == 200
    one.restart()
    assert one.get("/fleet", headers=as_cookie(cookie)).status_code == 200
    assert one.get("/parts", headers=as_cookie(cookie)).status_code == 200


def test_the_other_replica_accepts_the_cookie_and_honours_its_sign_out(
    replicas: tuple[adminenv.AdminProcess, ...], token: str, admin_env: adminenv.Env
) -> None:
    one, two = replicas
    cookie = sign_in(one, token)
    assert two.get("/fleet", headers=as_cookie(cookie)).status_code == 200  # read: cached
    before = len(admin_env.signouts())
    out = one.post("/logout", headers=as_cookie(cookie))
    assert out.status_code == 303 and f"{COOKIE}=;" in out.headers["Set-Cookie"]
    assert len(admin_env.signouts()) == before + 1  # one entry in the KCP, a hash
    assert all(cookie not in k + v for k, v in admin_env.signouts().items())
    # the replica that signed it out refuses the copy at once
    assert one.get("/fleet", headers=as_cookie(cookie)).status_code == 303
    # the other within its cache of the ConfigMap
    started = time.monotonic()
    pollerenv.wait_until(
        lambda: two.get("/fleet", headers=as_cookie(cookie)).status_code == 303,
        CACHE + 5,
        "the sign-out on the other replica",
    )
    assert time.monotonic() - started <= CACHE + 1.5
    j = two.get("/fleet", headers={**as_cookie(cookie), "Accept": "application/json"})
    assert j.status_code == 401
    # and after a restart of either (the sign-out is in the KCP, not in a process)
    two.restart()
    assert two.get("/fleet", headers=as_cookie(cookie)).status_code == 303
    # a sign-out of a session that already ended writes nothing
    n = len(admin_env.signouts())
    assert two.post("/logout", headers=as_cookie(cookie)).status_code == 303
    assert len(admin_env.signouts()) == n
    # the same operator signs in again and is in on both
    fresh = sign_in(two, token)
    assert one.get("/fleet", headers=as_cookie(fresh)).status_code == 200


def test_a_process_with_another_key_accepts_none_of_the_cookies(
    replicas: tuple[adminenv.AdminProcess, ...], token: str, admin_env: adminenv.Env
) -> None:
    """The hostile side: a cookie is a credential only with the key. A replica configured with
    another key (or none: a key of its own) refuses it; a cookie's bytes altered are refused."""
    one, _ = replicas
    cookie = sign_in(one, token)
    other_key = admin_env.dir / "other-session-keys"
    other_key.write_text(base64.b64encode(os.urandom(32)).decode() + "\n")
    stranger = adminenv.AdminProcess(admin_env, TETHER_ADMIN_SESSION_KEY_FILE=str(other_key))
    try:
        assert stranger.get("/fleet", headers=as_cookie(cookie)).status_code == 303
        altered = cookie[:-3] + ("AAA" if cookie[-3:] != "AAA" else "BBB")
        assert one.get("/fleet", headers=as_cookie(altered)).status_code == 303
        assert one.get("/fleet", headers=as_cookie(cookie)).status_code == 200
    finally:
        stranger.stop()


def test_rotation_an_old_key_still_opens_until_it_is_dropped(
    admin_env: adminenv.Env, token: str
) -> None:
    """The key file rotated in place (as a Secret's volume is updated): the new key first, the
    old one below it. Cookies of the old key still open; new ones are sealed with the new key;
    once the old key is removed its cookies are worth nothing. No restart."""
    keys = admin_env.dir / "rotating-keys"
    old, new = (base64.b64encode(os.urandom(32)).decode() for _ in range(2))
    keys.write_text(old + "\n")
    p = adminenv.AdminProcess(admin_env, TETHER_ADMIN_SESSION_KEY_FILE=str(keys))
    try:
        before = sign_in(p, token)
        _replace(keys, f"{new}\n{old}\n")
        pollerenv.wait_until(
            lambda: sign_in(p, token).split(".")[1] != before.split(".")[1],
            10,
            "cookies sealed with the new key",
        )
        after = sign_in(p, token)
        assert p.get("/fleet", headers=as_cookie(before)).status_code == 200
        _replace(keys, f"{new}\n")
        pollerenv.wait_until(
            lambda: p.get("/fleet", headers=as_cookie(before)).status_code == 303,
            10,
            "the old key's cookie refused",
        )
        assert p.get("/fleet", headers=as_cookie(after)).status_code == 200
        assert old not in p.log() and new not in p.log()
    finally:
        p.stop()


def _replace(path: os.PathLike[str], text: str) -> None:
    """Writes ``text`` to a new file renamed over ``path`` (a new inode, as the kubelet swaps
    a Secret volume's files)."""
    tmp = f"{os.fspath(path)}.new"
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, path)
