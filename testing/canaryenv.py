"""``tether canary`` as a subprocess for the canary's process tests: its settings from the
caller's environment dict, its probes and metrics on a free port (``CanaryProcess``); and
the local overlay of the optional ``manifests/kcp/canary`` that ``make demo`` applies
(``render_overlay``: the patches kustomization.yaml there tells an operator to write, plus
the local planes' bind and address policy)."""

from __future__ import annotations

import http.client
import pathlib
from typing import Any

import yaml

from testing import controlplane, localnet, loopenv, overlays, pollerenv

REPO = controlplane.REPO_ROOT


class CanaryProcess(loopenv.PartProcess):
    """``tether canary`` as a subprocess (``testing.loopenv.PartProcess``); the local planes
    listen on 127.0.0.1, which its address policy must allow."""

    part = "canary"
    defaults = dict(localnet.ENV)


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
