"""The README's demo command works: `hack/demo.py --once` runs the whole scenario (planes,
Director stand-in, the manifests applied with kubectl and every Deployment run by the pod
runner; a ConfigMap change reaches the KCP; the runtime gets its Compass Secret), names
each Deployment with its readiness, and stops cleanly."""

from __future__ import annotations

import subprocess
import sys

import pytest

from testing import controlplane

pytestmark = pytest.mark.processes


def test_demo_once() -> None:
    out = subprocess.run(
        [sys.executable, str(controlplane.REPO_ROOT / "hack" / "demo.py"), "--once"],
        capture_output=True,
        text=True,
        timeout=400,
        cwd=controlplane.REPO_ROOT,
    )
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    text = out.stdout
    assert "kubectl apply -k" in text
    for name in ("tether-listener", "tether-compass", "tether-webhook", "tether-poller"):
        assert f"deployment/{name}: 2/2 ready, 2 available" in text, text[-3000:]
    assert "stored in the KCP as RuntimeConfigMap" in text
    assert "KCP holds data {'greeting': 'hi'}" in text
    assert "the KCP holds a tombstone" in text
    assert "registered as Director runtime" in text
    assert "deployment/tether-injector: 1/1 ready" in text, text[-3000:]
    assert "the injector wrote {'color': 'blue'} into Sample" in text
    assert "Sample CR holds color=green" in text
    assert "deployment/tether-canary: 1/1 ready" in text, text[-3000:]
    assert 'tether_canary_probes_total{stage="stored",outcome="ok"}' in text
    assert "'TOKEN'" in text and "scenario done" in text
