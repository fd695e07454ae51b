"""Signing in to the admin pages, attacked, over HTTPS against the session's KCP plane (real
TokenReview and SubjectAccessReview): ``next`` leads only to a page, a token must be made for
the pages' audience, the cookie holds a session ID (never the token) that is worthless after
sign-out, a sign-in needs the right to the page it leads to (SubjectAccessReview), every
sign-in and every uncached TokenReview are budgeted per source, one user's sign-outs cost the
shared ConfigMap a few entries, and sign-in and sign-out are refused from another origin.
Each attack stands next to the well-behaved operator who still gets in."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
import requests

from admin import guard as admin_guard
from admin import signouts
from testing import adminenv, pollerenv
from testing.listenerenv import metric_value

pytestmark = pytest.mark.processes

COOKIE = admin_guard.COOKIE
EVIL = [
    "/%09/evil.example",
    "/\t/evil.example",
    "//evil.example",
    "/\\evil.example",
    "https://evil.example",
    "%2F%2Fevil.example",
    "/%2F%2Fevil.example",
    "/%5Cevil.example",
    "///evil.example",
    "/fleet/../../evil.example",
    "javascript:alert(1)",
    "/login",
    "/metrics",
    "/nope",
]


@pytest.fixture(scope="module")
def tokens(admin_env: adminenv.Env) -> dict[str, str]:
    return {
        "operator": admin_env.operator("signin-operator", None),
        "other": admin_env.operator("signin-other", None),
        "nobody": admin_env.operator("signin-nobody", ()),
        "compass-only": admin_env.operator("signin-compass", ("compass",)),
    }


def sign_in(
    admin: adminenv.AdminProcess, token: str, nxt: str = "/fleet", **headers: str
) -> requests.Response:
    return admin.post("/login", {"token": token, "next": nxt}, headers=headers)


def cookie_of(r: requests.Response) -> str:
    header = r.headers.get("Set-Cookie", "")
    assert header.startswith(COOKIE + "="), header
    return header.split(";", 1)[0].split("=", 1)[1]


def as_cookie(sid: str) -> dict[str, str]:
    return {"Cookie": f"{COOKIE}={sid}"}


# -- next ------------------------------------------------------------------------------------


@pytest.mark.parametrize("raw", EVIL)
def test_next_never_leads_off_the_pages(
    admin: adminenv.AdminProcess, tokens: dict[str, str], raw: str
) -> None:
    r = sign_in(admin, tokens["operator"], raw)
    assert r.status_code == 303 and r.headers["Location"] == "/fleet", r.headers
    form = admin.get("/login", params={"next": raw})
    assert form.status_code == 200 and 'name="next" value="/fleet"' in form.text
    assert "--audience tether-admin" in form.text


@pytest.mark.parametrize(
    ("raw", "kept"),
    [
        ("/fleet?x=1", "/fleet?x=1"),
        ("/compass", "/compass"),
        ("/runtimes/rt-a?x=1", "/runtimes/rt-a?x=1"),
        ("/fleet?q=a%26b", "/fleet?q=a%26b"),
    ],
)
def test_next_leads_to_a_page(
    admin: adminenv.AdminProcess, tokens: dict[str, str], raw: str, kept: str
) -> None:
    r = sign_in(admin, tokens["operator"], raw)
    assert r.status_code == 303 and r.headers["Location"] == kept
    assert f'name="next" value="{kept}"' in admin.get("/login", params={"next": raw}).text.replace(
        "&amp;", "&"
    )


def test_a_page_without_a_session_sends_the_browser_to_sign_in_and_back(
    admin: adminenv.AdminProcess,
) -> None:
    r = admin.get("/runtimes/rt-x?problem=silent")
    assert (
        r.status_code == 303
        and r.headers["Location"] == "/login?next=/runtimes/rt-x?problem=silent"
    )
    form = admin.get(r.headers["Location"])
    assert 'name="next" value="/runtimes/rt-x?problem=silent"' in form.text
    r = admin.get("/fleet?q=fail&problem=silent")  # the whole query comes back
    assert r.headers["Location"] == "/login?next=/fleet?q=fail%26problem=silent"
    form = admin.get(r.headers["Location"])
    assert 'name="next" value="/fleet?q=fail&amp;problem=silent"' in form.text


# -- audience --------------------------------------------------------------------------------


def test_only_a_token_for_the_admin_audience_is_accepted(
    admin: adminenv.AdminProcess, admin_env: adminenv.Env, tokens: dict[str, str]
) -> None:
    plain = admin_env.token("signin-operator", audiences=())  # kubectl create token NAME
    plane = admin_env.plane
    # the same ServiceAccount's token for the API server's audience is a KCP credential ...
    api = requests.get(
        plane.url + "/api",
        headers={"Authorization": f"Bearer {plain}"},
        verify=str(plane.ca_file),
        timeout=10,
    )
    assert api.status_code == 200
    # ... and refused by the pages, both signing in and as a bearer token
    r = sign_in(admin, plain)
    assert r.status_code == 401 and "Set-Cookie" not in r.headers
    assert "audience tether-admin" in r.text and "--audience tether-admin" in r.text
    bearer = admin.get("/fleet", plain, headers={"Accept": "application/json"})
    assert bearer.status_code == 401 and "audience tether-admin" in bearer.json()["details"]
    other = admin_env.token("signin-operator", audiences=("someone-else",))
    assert admin.get("/fleet", other).status_code == 401
    # the token made for the pages works there, and is no credential for the KCP's API
    good = tokens["operator"]
    assert sign_in(admin, good).status_code == 303
    assert admin.get("/fleet", good).status_code == 200
    api = requests.get(
        plane.url + "/api",
        headers={"Authorization": f"Bearer {good}"},
        verify=str(plane.ca_file),
        timeout=10,
    )
    assert api.status_code == 401


# -- the session -----------------------------------------------------------------------------


def test_the_cookie_holds_a_session_id_never_the_token(
    admin: adminenv.AdminProcess, tokens: dict[str, str]
) -> None:
    token = tokens["operator"]
    r = sign_in(admin, token, "/compass")
    assert r.status_code == 303 and r.headers["Location"] == "/compass"
    header = r.headers["Set-Cookie"]
    for piece in (token, token[:24], token[-24:], token.split(".")[1][:24]):
        assert piece not in header
    assert "HttpOnly" in header and "Secure" in header and "SameSite=Strict" in header
    assert "Path=/" in header and "Domain" not in header  # a __Host- cookie
    sid = cookie_of(r)
    assert len(sid) >= 43 and sid != token
    page = admin.get("/compass", headers=as_cookie(sid))
    assert page.status_code == 200 and "system:serviceaccount:" in page.text
    # sign-out ends the session on the server: the same cookie replayed is refused
    out = admin.post("/logout", headers=as_cookie(sid))
    assert out.status_code == 303 and out.headers["Location"] == "/login"
    assert f"{COOKIE}=;" in out.headers["Set-Cookie"] and "Secure" in out.headers["Set-Cookie"]
    again = admin.get("/compass", headers=as_cookie(sid))
    assert again.status_code == 303 and again.headers["Location"].startswith("/login")
    api = admin.get("/compass", headers={**as_cookie(sid), "Accept": "application/json"})
    assert api.status_code == 401
    assert admin.get("/compass", headers=as_cookie("made-up-" + sid[8:])).status_code == 303
    # a browser-like client: signs in, sees pages, signs out, is sent to sign in again
    signed_out = sum(e.get("event") == "admin_sign_out" for e in admin.audit())
    s = admin.session()
    assert (
        s.post(
            admin.url + "/login", data={"token": token}, allow_redirects=False, timeout=10
        ).status_code
        == 303
    )
    assert s.get(admin.url + "/parts", allow_redirects=False, timeout=10).status_code == 200
    assert s.post(admin.url + "/logout", allow_redirects=False, timeout=10).status_code == 303
    assert s.get(admin.url + "/parts", allow_redirects=False, timeout=10).status_code == 303
    pollerenv.wait_until(
        lambda: sum(e.get("event") == "admin_sign_out" for e in admin.audit()) > signed_out,
        10,
        "the sign-out's audit event",
    )
    logged = admin.log() + admin.audit_text()
    assert token not in logged and sid not in logged and sid[:16] not in logged


def test_a_session_ends_with_its_token(
    admin: adminenv.AdminProcess, admin_env: adminenv.Env
) -> None:
    short = admin_env.token("signin-other", seconds=600)  # the shortest TokenRequest
    r = sign_in(admin, short)
    assert r.status_code == 303
    max_age = int(r.headers["Set-Cookie"].split("Max-Age=", 1)[1].split(";", 1)[0])
    assert 500 < max_age <= 600  # not the 8 h of TETHER_ADMIN_SESSION_SECONDS


def test_one_operator_signing_in_and_out_again_and_again_signs_nobody_else_out(
    admin_env: adminenv.Env, tokens: dict[str, str]
) -> None:
    """The attack: a valid token (here an operator's own) signing in and out over and over,
    meant to fill what the server keeps and push the other operators out. A sign-in keeps
    nothing (the session is the sealed cookie); the sign-outs of one user cost the shared
    ConfigMap at most SIGNOUTS_PER_USER + 1 entries: past that they collapse into one cutoff
    that ends that user's own sessions, nobody else's."""
    p = adminenv.AdminProcess(
        admin_env, TETHER_ADMIN_MAX_SIGNOUTS="10", TETHER_ADMIN_SIGNOUTS_PER_USER="2"
    )
    try:
        victim = cookie_of(sign_in(p, tokens["other"]))
        narrow = cookie_of(sign_in(p, tokens["compass-only"], "/compass"))
        # (each a new connection: the worker's per-peer cap, 64, lingering ones included)
        flood = [sign_in(p, tokens["operator"]) for _ in range(20)]
        assert {r.status_code for r in flood} == {303}
        assert p.get("/fleet", headers=as_cookie(cookie_of(flood[0]))).status_code == 200
        assert metric_value(p.metrics(), "tether_admin_sign_ins_total") == 22
        outs = [p.post("/logout", headers=as_cookie(cookie_of(r))) for r in flood[:12]]
        assert {r.status_code for r in outs} == {303}
        assert p.get("/fleet", headers=as_cookie(victim)).status_code == 200
        assert p.get("/compass", headers=as_cookie(narrow)).status_code == 200
        # the flooding user's own sessions ended with its sign-outs, even those not signed out
        assert p.get("/fleet", headers=as_cookie(cookie_of(flood[15]))).status_code == 303
        data = admin_env.signouts()
        assert len(data) <= 10
        mine = signouts.user_key(sa_user(admin_env, "signin-operator"))
        assert mine in data
        assert metric_value(p.metrics(), "tether_admin_signouts") == len(data)
        # a new sign-in of that user after the flood works
        again = cookie_of(sign_in(p, tokens["operator"]))
        assert p.get("/fleet", headers=as_cookie(again)).status_code == 200
    finally:
        p.stop()


def sa_user(env: adminenv.Env, name: str) -> str:
    return f"system:serviceaccount:{env.tether_ns}:{name}"


# -- the page right --------------------------------------------------------------------------


def test_a_token_without_a_page_right_makes_no_session(
    admin: adminenv.AdminProcess, tokens: dict[str, str]
) -> None:
    """The attack: a token the KCP authenticates for the pages' audience but RBAC lets see
    no page (any ServiceAccount someone may mint a token for) signing in, to hold sessions
    and evict the operators'. The sign-in asks SubjectAccessReview first: 403, no cookie,
    no session; an operator's session is untouched."""
    operator = cookie_of(sign_in(admin, tokens["operator"]))
    held = metric_value(admin.metrics(), "tether_admin_sign_ins_total")
    for nxt, page in (
        ("/fleet", "fleet"),
        ("/compass", "compass"),
        ("/parts", "parts"),
        ("/rollout", "rollout"),
        ("/runtimes/rt-a", "runtime"),
    ):
        r = sign_in(admin, tokens["nobody"], nxt)
        assert r.status_code == 403 and "Set-Cookie" not in r.headers, (nxt, r.text)
        assert f"may not get adminpages/{page}" in r.text and "no session was made" in r.text
    j = sign_in(admin, tokens["nobody"], Accept="application/json")
    assert j.status_code == 403 and "Set-Cookie" not in j.headers
    # a right to one page signs in to that page, not to another
    assert sign_in(admin, tokens["compass-only"], "/compass").status_code == 303
    refused = sign_in(admin, tokens["compass-only"], "/fleet")
    assert refused.status_code == 403 and "may not get adminpages/fleet" in refused.text
    assert metric_value(admin.metrics(), "tether_admin_sign_ins_total") == held + 1
    assert admin.get("/fleet", headers=as_cookie(operator)).status_code == 200
    pages = {"fleet", "compass", "parts", "rollout", "runtime"}

    def denied() -> set[object]:
        return {e.get("page") for e in admin.audit() if e.get("event") == "admin_sign_in_denied"}

    pollerenv.wait_until(lambda: denied() >= pages, 10, f"sign-ins denied on {pages} audited")
    assert denied() >= pages
    assert tokens["nobody"] not in admin.audit_text() + admin.log()


# -- the TokenReview budget ------------------------------------------------------------------


@pytest.fixture
def budgeted(admin_env: adminenv.Env) -> Iterator[adminenv.AdminProcess]:
    p = adminenv.AdminProcess(admin_env, TETHER_ADMIN_REVIEWS_PER_MINUTE="5")
    yield p
    p.stop()


def test_token_reviews_are_budgeted_per_source(
    budgeted: adminenv.AdminProcess, tokens: dict[str, str]
) -> None:
    p = budgeted
    sid = cookie_of(sign_in(p, tokens["operator"]))  # one review of five
    assert p.get("/fleet", tokens["operator"]).status_code == 200  # cached: no review
    answers = [sign_in(p, f"forged-{i}").status_code for i in range(4)]
    assert answers == [401] * 4  # the budget's last four reviews
    flood = [sign_in(p, f"forged-x{i}") for i in range(30)]
    assert {r.status_code for r in flood} == {429}
    retry = int(flood[0].headers["Retry-After"])
    assert 1 <= retry <= 12 and "retry in" in flood[0].text
    bearer = p.get("/fleet", "forged-bearer", headers={"Accept": "application/json"})
    assert bearer.status_code == 429 and bearer.json()["error"] == "too many requests"
    assert "Retry-After" in bearer.headers
    # a valid token whose review the cache holds is no way around it: every sign-in counts
    reused = sign_in(p, tokens["operator"])
    assert reused.status_code == 429 and "Set-Cookie" not in reused.headers
    text = p.metrics()
    assert metric_value(text, "tether_admin_reviews_total", kind="token") == 5
    assert metric_value(text, "tether_admin_throttled_total") == 32
    assert metric_value(text, "tether_admin_sign_ins_total") == 1
    # who is signed in, or holds a checked token, is not held back
    assert p.get("/fleet", headers=as_cookie(sid)).status_code == 200
    assert p.get("/fleet", tokens["operator"]).status_code == 200
    # the bucket refills: one review every 12 s at five a minute
    time.sleep(retry + 0.5)
    assert sign_in(p, tokens["other"]).status_code == 303
    assert metric_value(p.metrics(), "tether_admin_reviews_total", kind="token") == 6


# -- same origin -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "headers",
    [
        {"Origin": "https://evil.example"},
        {"Origin": "null"},
        {"Origin": "https://127.0.0.1"},  # another port is another origin
        {"Sec-Fetch-Site": "cross-site"},
        {"Sec-Fetch-Site": "same-site"},
        {"Sec-Fetch-Site": "cross-site", "Origin": "OWN"},
    ],
)
def test_sign_in_and_out_from_another_origin_are_refused(
    admin: adminenv.AdminProcess, tokens: dict[str, str], headers: dict[str, str]
) -> None:
    headers = {k: admin.url if v == "OWN" else v for k, v in headers.items()}
    before = metric_value(admin.metrics(), "tether_admin_reviews_total", kind="token")
    r = sign_in(admin, tokens["other"], **headers)
    assert r.status_code == 403 and "Set-Cookie" not in r.headers
    assert "another" in r.text and "sign in and out from the admin pages" in r.text
    j = sign_in(admin, tokens["other"], Accept="application/json", **headers)
    assert j.status_code == 403 and j.json()["error"] == "forbidden"
    assert metric_value(admin.metrics(), "tether_admin_reviews_total", kind="token") == before
    sid = cookie_of(sign_in(admin, tokens["operator"]))
    out = admin.post("/logout", headers={**as_cookie(sid), **headers})
    assert out.status_code == 403 and "Set-Cookie" not in out.headers
    assert admin.get("/fleet", headers=as_cookie(sid)).status_code == 200  # not signed out


def test_sign_in_and_out_from_the_pages_themselves(
    admin: adminenv.AdminProcess, tokens: dict[str, str]
) -> None:
    own = {"Origin": admin.url, "Sec-Fetch-Site": "same-origin"}
    r = sign_in(admin, tokens["operator"], "/parts", **own)
    assert r.status_code == 303 and r.headers["Location"] == "/parts"
    sid = cookie_of(r)
    assert admin.get("/parts", headers=as_cookie(sid)).status_code == 200
    out = admin.post("/logout", headers={**as_cookie(sid), **own})
    assert out.status_code == 303
    assert admin.get("/parts", headers=as_cookie(sid)).status_code == 303
    assert {"admin_sign_in", "admin_sign_out"} <= {e.get("event") for e in admin.audit()}
