"""The stand-in Director's server: kept-alive connections (one TLS handshake per client
connection, as a real Director behind its ingress), bounded (idle timeout, body size), and a
``stop()`` that takes the kept-alive connections down too (the Director is down)."""

from __future__ import annotations

import pathlib
import socket
import ssl
from collections.abc import Iterator

import pytest
import requests

from standins.director import app as app_mod
from standins.director import server as server_mod
from standins.director import store as store_mod
from testing.pollerenv import wait_until

SECRET = "s3cr3t-of-the-server-tests"


@pytest.fixture
def standin(tmp_path: pathlib.Path) -> Iterator[tuple[server_mod.DirectorServer, str]]:
    ca, cert, key = server_mod.self_signed(tmp_path / "tls")
    srv = server_mod.DirectorServer(
        store_mod.Store(client_secret=SECRET), cert, key, idle_seconds=1.0
    ).start()
    yield srv, str(ca)
    srv.stop()


def token(session: requests.Session, srv: server_mod.DirectorServer, ca: str) -> requests.Response:
    return session.post(
        f"{srv.url}/oauth2/token",
        data={"grant_type": "client_credentials"},
        auth=(srv.store.client_id, SECRET),
        verify=ca,
        timeout=10,
    )


def test_one_connection_serves_many_requests(
    standin: tuple[server_mod.DirectorServer, str],
) -> None:
    srv, ca = standin
    with requests.Session() as s:
        for _ in range(5):
            r = token(s, srv, ca)
            assert r.status_code == 200 and r.json()["access_token"]
            assert "close" not in r.headers.get("Connection", "").lower()
        assert srv.connections == 1
        tok = r.json()["access_token"]
        r = s.post(
            f"{srv.url}/graphql",
            json={"query": "{ runtimes { totalCount } }"},
            headers={"Authorization": f"Bearer {tok}", "Tenant": "t"},
            verify=ca,
            timeout=10,
        )
        assert r.json() == {"data": {"runtimes": {"totalCount": 0}}}
        assert srv.connections == 1
    # the idle timeout (1 s here) closes a connection its client left open
    raw = socket.create_connection(("127.0.0.1", srv.port), timeout=10)
    tls = ssl.create_default_context(cafile=ca).wrap_socket(raw, server_hostname="127.0.0.1")
    try:
        assert tls.recv(1) == b""  # closed by the server (else: a timeout after 10 s)
        wait_until(lambda: srv.connections == 0, 10, "the idle connection forgotten")
    finally:
        tls.close()


def test_stop_closes_kept_alive_connections_and_start_serves_again(
    standin: tuple[server_mod.DirectorServer, str],
) -> None:
    srv, ca = standin
    with requests.Session() as s:
        assert token(s, srv, ca).status_code == 200
        srv.stop()
        assert srv.connections == 0
        with pytest.raises(requests.ConnectionError):
            token(s, srv, ca)
        srv.start()
        assert token(s, srv, ca).status_code == 200


def test_bad_bodies_are_answered_with_a_status_and_json(
    standin: tuple[server_mod.DirectorServer, str],
) -> None:
    srv, ca = standin
    big = b"x" * (server_mod.MAX_BODY + 1)
    r = requests.put(f"{srv.url}/admin/faults", data=big, verify=ca, timeout=30)
    assert r.status_code == 413 and "larger than" in r.json()["error"]
    r = requests.put(
        f"{srv.url}/admin/faults",
        data=iter([b'{"latency"', b": 0.001}"]),
        headers={"Content-Type": "application/json"},
        verify=ca,
        timeout=10,
    )  # chunked: no Content-Length
    assert r.status_code == 200 and r.json()["latency"] == 0.001
    r = requests.put(
        f"{srv.url}/admin/faults", data=iter([big[:600_000], big[600_000:]]), verify=ca, timeout=30
    )
    assert r.status_code == 413 and "larger than" in r.json()["error"]
    r = requests.put(f"{srv.url}/admin/faults", json={"latency": 0}, verify=ca, timeout=10)
    assert r.status_code == 200 and r.json()["latency"] == 0


def test_a_query_is_parsed_and_validated_once_and_answered_as_before() -> None:
    """``app.prepared``: the same query text gives the same document (parsed and validated
    once), an invalid one its validation error, a long one is not kept."""
    q = "query($id: ID!) { runtime(id: $id) { id name } }"
    doc, errs = app_mod.prepared(q)
    assert doc is not None and errs == () and app_mod.prepared(q)[0] is doc
    doc, errs = app_mod.prepared("{ runtime(id: 1) { nope } }")
    assert doc is not None and "Cannot query field 'nope'" in errs[0].message
    doc, errs = app_mod.prepared("{ runtime(")
    assert doc is None and "Syntax Error" in errs[0].message
    long = q + " " * 5000
    assert app_mod.prepared(long)[0] is not app_mod.prepared(long)[0]
