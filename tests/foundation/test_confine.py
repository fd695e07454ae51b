"""A plain process confined with a manifest's limits (testing/cgroups.confine, used by the
listener's abuse tests): the listener's Deployment limit is read from its manifest, a leaky
process over a small limit is OOM-killed and ``held`` then fails, one under it passes with
its peak said.

Needs writable cgroups, as the pod runner's limits tests: without them it fails, saying why
(``TETHER_PODRUNNER_LIMITS=off``: confine gives None and the abuse tests run unconfined)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from testing import cgroups, controlplane
from testing.listenerenv import LISTENER_LIMITS

pytestmark = pytest.mark.processes  # starts processes of its own (testing/tiers.py)

LEAKY = controlplane.REPO_ROOT / "standins" / "leaky.py"


def test_the_listener_limits_are_its_manifests() -> None:
    assert LISTENER_LIMITS == cgroups.Limits(768 << 20, None, "memory 768Mi")
    with pytest.raises(cgroups.Invalid):
        cgroups.manifest_limits(
            controlplane.REPO_ROOT / "manifests" / "kcp" / "listener" / "deployment.yaml",
            "no-such-container",
        )


def _run(name: str, limits: cgroups.Limits, argv: list[str]) -> tuple[int, cgroups.Usage]:
    if cgroups.detect().reason.endswith("=off"):
        pytest.skip(f"limits are off on purpose: {cgroups.detect().reason}")
    group = cgroups.confine(name, limits)
    assert group is not None
    try:
        proc = subprocess.run(group.wrap(argv), capture_output=True, timeout=120, check=False)
        return proc.returncode, group.usage()
    finally:
        group.remove()


def test_a_leak_over_the_limit_is_oom_killed_and_held_says_so() -> None:
    limits = cgroups.Limits(64 << 20, None, "memory 64Mi")
    rc, usage = _run("confine-leaky", limits, [sys.executable, str(LEAKY), "memory", "8"])
    print(usage.text())
    assert rc == -9, rc  # SIGKILL by the kernel's OOM killer
    assert usage.oom_kills >= 1
    assert usage.peak is not None and usage.peak <= 64 << 20
    with pytest.raises(AssertionError, match="OOM-killed under its limit"):
        cgroups.held(usage, "leaky")


def test_a_process_under_its_limit_is_held() -> None:
    limits = cgroups.Limits(256 << 20, None, "memory 256Mi")
    rc, usage = _run("confine-small", limits, [sys.executable, "-c", "bytearray(32 << 20)"])
    assert rc == 0
    line = cgroups.held(usage, "small")
    assert usage.oom_kills == 0 and usage.peak is not None and 32 << 20 < usage.peak < 256 << 20
    assert "OOM kills 0" in line and "of 256 MiB" in line
