"""A kubelet's probes, for the pod runner: httpGet (HTTP or HTTPS, not verified, 200-399
passes) and tcpSocket, against the pod's IP, within ``timeoutSeconds``."""

from __future__ import annotations

import concurrent.futures
import dataclasses
import http.client
import socket
import ssl
from collections.abc import Mapping
from typing import Any

from testing import podspec


@dataclasses.dataclass
class ProbeState:
    spec: dict[str, Any]
    kind: str
    next_at: float = 0.0
    successes: int = 0
    failures: int = 0
    passed: bool = False
    inflight: concurrent.futures.Future[bool] | None = None
    last_error: str = ""


def check(p: ProbeState, container: Mapping[str, Any], ip: str) -> bool:
    timeout = float(p.spec.get("timeoutSeconds", 1))
    try:
        if "tcpSocket" in p.spec:
            port = podspec.port_number(container, p.spec["tcpSocket"]["port"])
            with socket.create_connection((p.spec["tcpSocket"].get("host", ip), port), timeout):
                return True
        get = p.spec["httpGet"]
        port = podspec.port_number(container, get["port"])
        host = get.get("host", ip)
        if get.get("scheme", "HTTP").upper() == "HTTPS":
            ctx = ssl.create_default_context()
            ctx.check_hostname, ctx.verify_mode = (
                False,
                ssl.CERT_NONE,
            )  # the kubelet does not verify
            conn: http.client.HTTPConnection = http.client.HTTPSConnection(
                host, port, timeout=timeout, context=ctx
            )
        else:
            conn = http.client.HTTPConnection(host, port, timeout=timeout)
        try:
            headers = {h["name"]: h["value"] for h in get.get("httpHeaders") or []}
            conn.request(
                "GET", get.get("path", "/"), headers={"User-Agent": "kube-probe/local", **headers}
            )
            status = conn.getresponse().status
        finally:
            conn.close()
        p.last_error = f"HTTP {status}"
        return 200 <= status < 400
    except (OSError, http.client.HTTPException, podspec.Invalid) as e:
        p.last_error = f"{type(e).__name__}: {e}"
        return False
