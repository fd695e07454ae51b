"""lifecycle-manager's published Go types as a check: ``hack/lcm-api-check`` decodes a
ModuleReleaseMeta and its ModuleTemplates strictly into
``github.com/kyma-project/lifecycle-manager/api`` v1beta2 (the version in
``hack/lcm-api-version.env``) and checks what lifecycle-manager's template lookup reads.
Built by ``hack/build-lcm-api-check.sh`` (``make lcm-api-check``) and cached outside the
checkout like the other Go peers.

Environment:
    TETHER_LCM_API_CHECK_CACHE  cache root of the build (default ~/.cache/tether/lcm-api-check)
"""

from __future__ import annotations

import os
import pathlib
import subprocess
import threading

from testing import controlplane

BUILD_SCRIPT = controlplane.REPO_ROOT / "hack" / "build-lcm-api-check.sh"
RUN_TIMEOUT = 60.0


class LcmApiError(RuntimeError):
    """The check could not be built."""


_lock = threading.Lock()
_binary: pathlib.Path | None = None


def binary() -> pathlib.Path:
    """The check's binary; builds it (hack/build-lcm-api-check.sh) if it is not cached."""
    global _binary
    with _lock:
        if _binary is not None:
            return _binary
        proc = subprocess.run(
            ["bash", str(BUILD_SCRIPT)], stdout=subprocess.PIPE, text=True, check=False
        )
        if proc.returncode != 0:
            raise LcmApiError(
                f"building lcm-api-check failed (exit {proc.returncode}); "
                f"run {BUILD_SCRIPT} to see why"
            )
        path = pathlib.Path(proc.stdout.strip().splitlines()[-1])
        if not os.access(path, os.X_OK):
            raise LcmApiError(f"{path} is missing or not executable")
        _binary = path
        return path


def check(release_meta: pathlib.Path, *templates: pathlib.Path) -> subprocess.CompletedProcess[str]:
    """Runs the check on the files; exit 0 when lifecycle-manager's types take them."""
    return subprocess.run(
        [str(binary()), str(release_meta), *map(str, templates)],
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT,
        check=False,
    )
