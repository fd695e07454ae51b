"""Certificate reloads of a real listener process (``tether.base.tlsreload``, item 4 of issue 10).

A client CA file that turns unreadable keeps the previous CAs in use and shows in /readyz on
the operations port (client CA and serving context, which trusts the same file); restoring
it makes the listener ready again, without a restart.
"""

from __future__ import annotations

import shutil
import time
from typing import Any

import pytest
import requests

from testing.listenerenv import Env, ListenerProcess

pytestmark = pytest.mark.processes  # starts processes of its own (testing/tiers.py)


def _readyz(p: ListenerProcess) -> tuple[int, Any]:
    r = requests.get(f"{p.ops_url}/readyz", timeout=10)
    return r.status_code, r.json()


def _wait(p: ListenerProcess, want: int, timeout: float = 20) -> Any:
    deadline = time.monotonic() + timeout
    status, body = _readyz(p)
    while status != want and time.monotonic() < deadline:
        time.sleep(0.3)
        status, body = _readyz(p)
    assert status == want, body
    return body


def test_a_failed_ca_reload_shows_in_readiness_and_heals(listener_env: Env) -> None:
    ca = listener_env.dir / "reload-client-ca.pem"
    shutil.copyfile(listener_env.client_ca_file, ca)
    p = ListenerProcess(listener_env, "reload", TETHER_LISTENER_CLIENT_CA_FILE=str(ca))
    try:
        assert _wait(p, 200) == {"status": "ready"}
        good = ca.read_bytes()
        ca.write_bytes(b"-----BEGIN CERTIFICATE-----\nnot base64\n-----END CERTIFICATE-----\n")
        body = _wait(p, 503)
        assert body["error"] == "not ready"
        checks = {d["check"]: d["message"] for d in body["details"]}
        assert "client-ca" in checks and str(ca) in checks["client-ca"]
        assert "serving-certificate" in checks
        assert "BEGIN" not in str(body)  # names the file, never its content
        # the data port still serves with the previous context meanwhile
        r = requests.get(f"{p.url}/healthz", verify=str(listener_env.server_ca_file), timeout=10)
        assert r.status_code == 200
        ca.write_bytes(good)
        assert _wait(p, 200) == {"status": "ready"}
    finally:
        p.stop()
