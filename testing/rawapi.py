"""Raw JSON over HTTPS to a test control plane as ``system:masters``: what benchmarks and
stacks use where the ``kubernetes`` client's CPU would distort a measurement."""

from __future__ import annotations

import http.client
import json
import pathlib
import ssl
from typing import Any

from testing import controlplane


class Api:
    """Raw JSON over HTTPS to one apiserver as system:masters (cheap next to the client)."""

    def __init__(self, plane: controlplane.ControlPlane, workdir: pathlib.Path, user: str) -> None:
        assert plane.client_ca is not None
        cert, key = workdir / f"{user}.crt", workdir / f"{user}.key"
        plane.client_ca.issue(user, organizations=("system:masters",), client=True).write(cert, key)
        self.ctx = ssl.create_default_context(cafile=str(plane.ca_file))
        self.ctx.load_cert_chain(str(cert), str(key))
        self.port = plane.port

    def connect(self, timeout: float = 60.0) -> http.client.HTTPSConnection:
        return http.client.HTTPSConnection(
            "127.0.0.1", self.port, context=self.ctx, timeout=timeout
        )

    def call(
        self,
        conn: http.client.HTTPSConnection,
        method: str,
        path: str,
        body: Any = None,
        content_type: str = "application/json",
    ) -> tuple[int, dict[str, Any]]:
        raw = json.dumps(body).encode() if body is not None else None
        conn.request(
            method, path, raw, {"Content-Type": content_type, "Accept": "application/json"}
        )
        resp = conn.getresponse()
        data = resp.read()
        return resp.status, json.loads(data) if data else {}
