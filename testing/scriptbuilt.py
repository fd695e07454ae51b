"""A binary that a hack/ build script builds into its cache and names on its last line.

``ScriptBuilt(script, error, env)`` builds once per process (a second call answers the
path it found), or takes the binary an environment variable names; a failed build or a
path that is not executable raises ``error`` naming the script to run by hand.
"""

from __future__ import annotations

import os
import pathlib
import subprocess
import threading


class ScriptBuilt:
    def __init__(self, script: pathlib.Path, error: type[Exception], env: str = "") -> None:
        self._script, self._error, self._env = script, error, env
        self._lock = threading.Lock()
        self._path: pathlib.Path | None = None

    def path(self) -> pathlib.Path:
        """The binary; built by the script if it is not cached (or named by ``env``)."""
        with self._lock:
            if self._path is not None:
                return self._path
            explicit = os.environ.get(self._env) if self._env else None
            if explicit:
                path = pathlib.Path(explicit)
            else:
                proc = subprocess.run(
                    ["bash", str(self._script)], stdout=subprocess.PIPE, text=True, check=False
                )
                if proc.returncode != 0:
                    raise self._error(
                        f"building {self._script.name} failed (exit {proc.returncode}); "
                        f"run {self._script} to see why"
                    )
                path = pathlib.Path(proc.stdout.strip().splitlines()[-1])
            if not os.access(path, os.X_OK):
                raise self._error(f"{path} is missing or not executable")
            self._path = path
            return path
