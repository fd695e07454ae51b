"""The README's demo command works: `hack/demo.py --once` runs the whole scenario (planes,
Director stand-in, listener, webhook, poller, compass; a ConfigMap change reaches the KCP;
the runtime gets its Compass Secret) and stops cleanly."""

from __future__ import annotations

import subprocess
import sys

import pytest

from testing import controlplane

pytestmark = pytest.mark.slow


def test_demo_once() -> None:
    out = subprocess.run([sys.executable, str(controlplane.REPO_ROOT / "hack" / "demo.py"), "--once"],
                         capture_output=True, text=True, timeout=400, cwd=controlplane.REPO_ROOT)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    text = out.stdout
    assert "stored in the KCP as RuntimeConfigMap" in text
    assert "KCP holds data {'greeting': 'hi'}" in text
    assert "the KCP holds a tombstone" in text
    assert "registered as Director runtime" in text
    assert "'TOKEN'" in text and "scenario done" in text
