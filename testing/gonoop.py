"""A Go no-op admission webhook (``testing/gonoop/main.go``), the floor beside the Python
no-op in the benchmarks that compare Tether's webhook with a no-op.

Built with the Go toolchain that builds the control plane (``go`` on PATH, standard library
only: nothing to download) into a cache folder outside the checkout keyed by the source's
hash and the Go version, so a fresh clone on the same machine reuses it; a missing cache is
rebuilt, one build at a time (a lock beside it).

    gonoop.binary()            # the executable (built if not cached)
    proc.command = [str(gonoop.binary())]   # a testing.webhookstack.WebhookProcess runs it

Environment: ``TETHER_GONOOP_CACHE`` cache root (default ~/.cache/tether/gonoop).
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import pathlib
import shutil
import subprocess
import tempfile

SOURCE = pathlib.Path(__file__).with_name("gonoop") / "main.go"
NAME = "tether-gonoop"


class BuildError(RuntimeError):
    """The Go no-op could not be built."""


def _go_version(go: str) -> str:
    done = subprocess.run([go, "env", "GOVERSION"], capture_output=True, text=True, check=False)
    if done.returncode != 0 or not done.stdout.strip():
        raise BuildError(f"`go env GOVERSION` failed: {done.stderr.strip()[:300]}")
    return done.stdout.strip()


def cache_root() -> pathlib.Path:
    default = pathlib.Path.home() / ".cache" / "tether" / "gonoop"
    return pathlib.Path(os.environ.get("TETHER_GONOOP_CACHE") or default)


def binary() -> pathlib.Path:
    """The built no-op; builds it when the cache lacks this source and Go version."""
    go = shutil.which("go")
    if go is None:
        raise BuildError("the go command is missing (it builds the control plane too)")
    digest = hashlib.sha256(SOURCE.read_bytes()).hexdigest()[:16]
    out = cache_root() / f"{digest}-{_go_version(go)}" / NAME
    if os.access(out, os.X_OK):
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(cache_root() / ".build.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if os.access(out, os.X_OK):  # built while this one waited
            return out
        with tempfile.TemporaryDirectory(prefix="tether-gonoop-") as work:
            src = pathlib.Path(work)
            shutil.copy(SOURCE, src / "main.go")
            (src / "go.mod").write_text("module tether.local/gonoop\n\ngo 1.26\n")
            tmp = out.with_suffix(".tmp")
            done = subprocess.run(
                [go, "build", "-trimpath", "-o", str(tmp), "."],
                cwd=src,
                env={**os.environ, "CGO_ENABLED": "0", "GOFLAGS": "-mod=mod"},
                capture_output=True,
                text=True,
                check=False,
            )
            if done.returncode != 0:
                raise BuildError(f"go build failed: {done.stderr.strip()[-1000:]}")
            os.replace(tmp, out)
    return out
