"""``tether canary`` as a subprocess for the canary's process tests: its settings from the
caller's environment dict, its probes and metrics on a free port (``CanaryProcess``); and
the local overlay of the optional ``manifests/kcp/canary`` that ``make demo`` applies
(``render_overlay``: the patches kustomization.yaml there tells an operator to write, plus
the local planes' bind and address policy)."""

from __future__ import annotations

import http.client
import os
import pathlib
import subprocess
import sys
from typing import Any

import yaml

from testing import controlplane, localnet, overlays, pollerenv

REPO = controlplane.REPO_ROOT


class CanaryProcess:
    """``python -m command.cli canary``; ``stop`` is SIGTERM to its process group."""

    def __init__(self, workdir: pathlib.Path, name: str, env: dict[str, str]) -> None:
        self.port = controlplane.free_port()
        self.log_path = workdir / f"canary-{name}-{self.port}.log"
        base = {
            k: v for k, v in os.environ.items() if not k.startswith("TETHER_") and k != "KUBECONFIG"
        }
        self.env = {
            **base,
            **localnet.ENV,  # the local planes listen on 127.0.0.1
            "TETHER_CANARY_BIND": f"127.0.0.1:{self.port}",
            "TETHER_CANARY_IDENTITY": name,
            "TETHER_LOG_FORMAT": "text",
            **env,
        }
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 60.0) -> CanaryProcess:
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "command.cli", "canary"],
                env=self.env,
                cwd=REPO,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                preexec_fn=controlplane.die_with_parent(),
            )
        pollerenv.wait_until(self._healthy, timeout, f"the canary healthy:\n{self.log()}")
        return self

    def _healthy(self) -> bool:
        assert self.proc is not None
        if self.proc.poll() is not None:
            raise AssertionError(f"canary exited with {self.proc.returncode}:\n{self.log()}")
        return self.get("/healthz")[0] == 200

    def get(self, path: str) -> tuple[int, str]:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=5)
        try:
            conn.request("GET", path)
            resp = conn.getresponse()
            return resp.status, resp.read().decode(errors="replace")
        except OSError:
            return 0, ""
        finally:
            conn.close()

    def metric(self, name: str, **labels: str) -> float:
        return pollerenv.metric_sum(self.get("/metrics")[1], name, **labels)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")[-5000:] if self.log_path.exists() else ""

    def stop(self, timeout: float = 30.0) -> int:
        if self.proc is None or self.proc.poll() is not None:
            return 0 if self.proc is None else self.proc.returncode
        controlplane.stop_group(self.proc, timeout)
        return self.proc.returncode


def render_overlay(
    folder: pathlib.Path, runtime_id: str, kyma: str, env: dict[str, str] | None = None
) -> pathlib.Path:
    """``manifests/kcp/canary`` probing ``runtime_id``: its env names the runtime (and
    ``env``), its Role names the runtime's kubeconfig Secret ``kubeconfig-<kyma>``; the
    local overlays' changes: the canary binds its pod IP, 127.0.0.1 is allowed."""
    extra = {"TETHER_CANARY_RUNTIME": runtime_id, **localnet.ENV, **(env or {})}
    ops: list[dict[str, Any]] = [
        {
            "op": "add",
            "path": "/spec/template/spec/containers/0/env/-",
            "value": {"name": k, "value": v},
        }
        for k, v in sorted(extra.items())
    ]
    patches = overlays._pod_ip_bind(
        "kcp/canary", "tether-canary", {0: {"TETHER_CANARY_BIND": "9093"}}
    )
    patches.append(
        {"target": {"kind": "Deployment", "name": "tether-canary"}, "patch": yaml.safe_dump(ops)}
    )
    patches.append(
        {
            "target": {"kind": "Role", "name": "tether-canary-kubeconfig"},
            "patch": yaml.safe_dump(
                [
                    {
                        "op": "replace",
                        "path": "/rules/0/resourceNames",
                        "value": [f"kubeconfig-{kyma}"],
                    }
                ]
            ),
        }
    )
    return overlays._write(
        folder,
        {},
        {
            "apiVersion": "kustomize.config.k8s.io/v1beta1",
            "kind": "Kustomization",
            "resources": [overlays._base(folder, "kcp/canary")],
            "patches": patches,
        },
    )


def pod_metric(ip: str, name: str, **labels: str) -> float:
    """A sample of the canary pod's /metrics (on its pod IP, port 9093); 0 when unreachable."""
    conn = http.client.HTTPConnection(ip, 9093, timeout=5)
    try:
        conn.request("GET", "/metrics")
        text = conn.getresponse().read().decode(errors="replace")
    except OSError:
        return 0.0
    finally:
        conn.close()
    return pollerenv.metric_sum(text, name, **labels)
