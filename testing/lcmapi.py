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

import pathlib
import subprocess

from testing import controlplane, scriptbuilt

BUILD_SCRIPT = controlplane.REPO_ROOT / "hack" / "build-lcm-api-check.sh"
RUN_TIMEOUT = 60.0


class LcmApiError(RuntimeError):
    """The check could not be built."""


_built = scriptbuilt.ScriptBuilt(BUILD_SCRIPT, LcmApiError)


def binary() -> pathlib.Path:
    """The check's binary; built by hack/build-lcm-api-check.sh if it is not cached."""
    return _built.path()


def check(release_meta: pathlib.Path, *templates: pathlib.Path) -> subprocess.CompletedProcess[str]:
    """Runs the check on the files; exit 0 when lifecycle-manager's types take them."""
    return subprocess.run(
        [str(binary()), str(release_meta), *map(str, templates)],
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT,
        check=False,
    )
