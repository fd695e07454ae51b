"""Behind a trusted authenticating proxy (oauth2-proxy, kube-rbac-proxy), over real TLS with
real certificates against the session's KCP plane: the proxy's identity headers count only
on a connection that presented the proxy's client certificate (its CA, an allowed common
name, for client authentication), and then go through the same SubjectAccessReview as a
token. A proxy-authenticated operator reaches the pages; a forged header from anywhere else
does not, whatever else the request carries; a token sign-in keeps working beside it."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import requests
from kubernetes import client

from admin import guard as admin_guard
from testing import adminenv, pollerenv
from testing.listenerenv import metric_value

pytestmark = pytest.mark.processes

COOKIE = admin_guard.COOKIE
JSON = {"Accept": "application/json"}


@pytest.fixture(scope="module")
def proxied(admin_env: adminenv.Env) -> Iterator[adminenv.AdminProcess]:
    p = adminenv.AdminProcess(admin_env, **admin_env.proxy_settings())
    yield p
    p.stop()


@pytest.fixture(scope="module")
def people(admin_env: adminenv.Env) -> dict[str, str]:
    """Users and a group as an IdP would name them, bound to the pages by RBAC (no
    ServiceAccount, no token: only the proxy vouches for them)."""
    rbac = client.RbacAuthorizationV1Api(admin_env.api)
    s = admin_env.suffix
    names = {"user": f"alice-{s}@example.com", "group": f"tether-operators-{s}"}
    for kind, name in (("User", names["user"]), ("Group", names["group"])):
        rbac.create_cluster_role_binding(
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "ClusterRoleBinding",
                "metadata": {"name": f"proxy-{kind.lower()}-{s}"},
                "subjects": [{"kind": kind, "name": name, "apiGroup": "rbac.authorization.k8s.io"}],
                "roleRef": {
                    "apiGroup": "rbac.authorization.k8s.io",
                    "kind": "ClusterRole",
                    "name": admin_env.viewer_role,
                },
            }
        )
    return names


def test_a_proxy_authenticated_operator_reaches_the_pages(
    proxied: adminenv.AdminProcess, admin_env: adminenv.Env, people: dict[str, str]
) -> None:
    cert = admin_env.proxy_cert
    r = proxied.get("/fleet", headers={"X-Remote-User": people["user"]}, cert=cert)
    assert r.status_code == 200 and people["user"] in r.text
    assert "Set-Cookie" not in r.headers  # no session: the proxy vouches for every request
    # by a group the IdP names (comma-separated, as oauth2-proxy sends them)
    r = proxied.get(
        "/compass",
        headers={"X-Remote-User": "bob@example.com", "X-Remote-Group": f"x, {people['group']}"},
        cert=cert,
    )
    assert r.status_code == 200
    # RBAC still decides: the same user without the group, an unknown user
    for headers in (
        {"X-Remote-User": "bob@example.com"},
        {"X-Remote-User": "bob@example.com", "X-Remote-Group": "someone-elses-group"},
    ):
        r = proxied.get("/fleet", headers={**headers, **JSON}, cert=cert)
        assert r.status_code == 403 and "may not get adminpages/fleet" in r.json()["details"]
    # the SubjectAccessReview is cached like a token's: ten pages, at most one more review
    before = metric_value(proxied.metrics(), "tether_admin_reviews_total", kind="access")
    for _ in range(10):
        assert (
            proxied.get("/parts", headers={"X-Remote-User": people["user"]}, cert=cert).status_code
            == 200
        )
    text = proxied.metrics()
    assert metric_value(text, "tether_admin_reviews_total", kind="access") <= before + 1
    assert metric_value(text, "tether_admin_reviews_total", kind="token") == 0  # no TokenReview


@pytest.mark.parametrize(
    "extra",
    [
        {},
        {"X-Remote-Group": "system:masters"},
        {"Authorization": "Bearer OPERATOR"},  # a valid token beside the forged header
        {"Cookie": "OPERATOR"},  # a valid session beside the forged header
    ],
)
def test_a_forged_identity_header_from_elsewhere_is_refused(
    proxied: adminenv.AdminProcess,
    admin_env: adminenv.Env,
    people: dict[str, str],
    extra: dict[str, str],
) -> None:
    """The attack: a client that reaches the admin directly (not through the proxy) sends
    the header the proxy would set, naming an operator. No client certificate: 401 with the
    reason, audited, never signed in, whatever token or cookie the request also carries."""
    token = admin_env.operator(f"forger-{len(extra)}-{next(iter(extra), 'x')[:4].lower()}", None)
    if extra.get("Authorization") == "Bearer OPERATOR":
        extra = {"Authorization": f"Bearer {token}"}
    if extra.get("Cookie") == "OPERATOR":
        signed = proxied.post("/login", {"token": token})
        assert signed.status_code == 303
        cookie = signed.headers["Set-Cookie"].split(";", 1)[0]
        assert proxied.get("/fleet", headers={"Cookie": cookie}).status_code == 200
        extra = {"Cookie": cookie}
    headers = {"X-Remote-User": people["user"], **extra, **JSON}
    r = proxied.get("/fleet", headers=headers)
    assert r.status_code == 401 and r.json()["error"] == "unauthorized"
    assert "client certificate" in r.json()["details"] and "X-Remote-User" in r.json()["details"]
    html = proxied.get("/fleet", headers={k: v for k, v in headers.items() if k != "Accept"})
    assert html.status_code == 401 and "Set-Cookie" not in html.headers
    # from the proxy's CA but not the allowed name: refused the same way
    r = proxied.get("/fleet", headers=headers, cert=admin_env.stranger_cert)
    assert r.status_code == 401 and "someone-else" in r.json()["details"]

    def refused() -> list[dict[str, object]]:
        return [e for e in proxied.audit() if e.get("event") == "admin_proxy_refused"]

    pollerenv.wait_until(
        lambda: {e.get("reason") for e in refused()} >= {"no_certificate", "name_not_allowed"},
        10,
        "the refusals audited",
    )
    logged = proxied.audit_text() + proxied.log()
    assert token not in logged
    if "Cookie" in extra:
        assert extra["Cookie"].split("=", 1)[1] not in logged


@pytest.mark.parametrize("which", ["foreign_cert", "server_only_cert"])
def test_a_certificate_the_proxy_ca_did_not_issue_for_clients_fails_the_handshake(
    proxied: adminenv.AdminProcess, admin_env: adminenv.Env, people: dict[str, str], which: str
) -> None:
    """The allowed name on a certificate of another CA, or of the proxy's CA without the
    clientAuth usage: OpenSSL refuses it in the handshake, the request never reaches the app."""
    with pytest.raises(requests.exceptions.SSLError):
        proxied.get(
            "/fleet", headers={"X-Remote-User": people["user"]}, cert=getattr(admin_env, which)
        )
    # the listener is still there for the well-behaved proxy
    r = proxied.get("/fleet", headers={"X-Remote-User": people["user"]}, cert=admin_env.proxy_cert)
    assert r.status_code == 200


@pytest.mark.parametrize(
    ("headers", "status"),
    [
        ({"X-Remote-Group": "g"}, 401),  # groups but no user
        ({"X-Remote-User": "a" * 1100}, 400),
        ({"X-Remote-User": "alice", "X-Remote-Group": ",".join(f"g{i}" for i in range(70))}, 400),
    ],
)
def test_the_proxys_headers_are_bounded(
    proxied: adminenv.AdminProcess, admin_env: adminenv.Env, headers: dict[str, str], status: int
) -> None:
    r = proxied.get("/fleet", headers={**headers, **JSON}, cert=admin_env.proxy_cert)
    assert r.status_code == status and r.json()["details"]
    assert "a" * 200 not in r.text  # the value is not echoed


def test_token_sign_in_works_beside_the_proxy(
    proxied: adminenv.AdminProcess, admin_env: adminenv.Env
) -> None:
    token = admin_env.operator("beside-the-proxy", None)
    r = proxied.post("/login", {"token": token})
    assert r.status_code == 303
    cookie = r.headers["Set-Cookie"].split(";", 1)[0]
    assert proxied.get("/fleet", headers={"Cookie": cookie}).status_code == 200
    assert proxied.get("/fleet", token).status_code == 200
    # through the proxy's connection without identity headers: judged as any request
    assert proxied.get("/fleet", cert=admin_env.proxy_cert).status_code == 303
    assert proxied.get("/fleet", token, cert=admin_env.proxy_cert).status_code == 200


def test_without_a_proxy_ca_the_headers_are_nobody(
    admin: adminenv.AdminProcess, admin_env: adminenv.Env, people: dict[str, str]
) -> None:
    """Off unless configured: the identity headers mean nothing, with or without the proxy's
    certificate (which the pages do not even ask for)."""
    for cert in (None, admin_env.proxy_cert):
        r = admin.get("/fleet", headers={"X-Remote-User": people["user"]}, cert=cert)
        assert r.status_code == 303 and r.headers["Location"].startswith("/login")
