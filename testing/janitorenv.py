"""The listener's janitor in tests: ``tether janitor`` as a long-running subprocess
(``Janitor``: its metrics and audit lines), with a tombstone retention and an orphan grace
short enough for a test to see them pass (``loopenv.janitor_once`` runs one pass)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

import requests

from testing import controlplane, pollerenv
from testing.listenerenv import Env, metric_value

RETENTION = 4.0  # seconds: short, so the tests see tombstones pruned
GRACE = 3.0


class Janitor:
    """``tether janitor`` as a subprocess in ``env``'s namespace with the janitor's own user
    (its manifests' Roles), ``RETENTION`` and ``GRACE`` unless ``overrides`` say otherwise,
    its probes on a free port; ready when started."""

    def __init__(self, env: Env, **overrides: str) -> None:
        self.port = controlplane.free_port()
        self.audit_file = env.dir / f"janitor-audit-{self.port}.jsonl"
        self.log_file = env.dir / f"janitor-{self.port}.log"
        # the janitor's own user and Roles (manifests/kcp/janitor/rbac.yaml): the listener's
        # cannot delete
        vars_ = {
            "TETHER_LISTENER_KUBECONFIG": str(env.janitor_kubeconfig),
            "TETHER_LISTENER_NAMESPACE": env.namespace,
            "TETHER_LISTENER_TOMBSTONE_RETENTION_SECONDS": str(RETENTION),
            "TETHER_LISTENER_ORPHAN_GRACE_SECONDS": str(GRACE),
            "TETHER_LISTENER_JANITOR_INTERVAL_SECONDS": "0.5",
            "TETHER_LISTENER_JANITOR_LEASE_SECONDS": "3",
            "TETHER_LISTENER_JANITOR_BIND": f"127.0.0.1:{self.port}",
            "TETHER_LISTENER_AUDIT_LOG": str(self.audit_file),
            "TETHER_LISTENER_LOG_FORMAT": "text",
            **overrides,
        }
        environ = {
            k: v for k, v in os.environ.items() if not k.startswith("TETHER_") and k != "KUBECONFIG"
        }
        environ.update(vars_)
        self._log = open(self.log_file, "wb")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "command.cli", "janitor"],
            cwd=controlplane.REPO_ROOT,
            env=environ,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            preexec_fn=controlplane.die_with_parent(),
        )
        pollerenv.wait_until(self._ready, 60, "janitor ready")

    def _ready(self) -> bool:
        if self.proc.poll() is not None:
            raise AssertionError(f"janitor exited: {self.log_file.read_text()[-3000:]}")
        try:
            return requests.get(f"http://127.0.0.1:{self.port}/readyz", timeout=2).ok
        except requests.RequestException:
            return False

    def metric(self, name: str) -> float:
        text = requests.get(f"http://127.0.0.1:{self.port}/metrics", timeout=10).text
        return metric_value(text, name)

    def audit(self) -> list[dict[str, Any]]:
        if not self.audit_file.exists():
            return []
        return [json.loads(line) for line in self.audit_file.read_text().splitlines() if line]

    def stop(self) -> None:
        controlplane.stop_group(self.proc)
        self._log.close()
