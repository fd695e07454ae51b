"""The folder prometheus_client's multiprocess mode shares between a gunicorn master's
workers (``PROMETHEUS_MULTIPROC_DIR``), prepared in the master before any worker starts and
before prometheus_client is imported.

The folder is created (an emptyDir mounted at /tmp starts empty: workers failed to boot on a
missing /tmp/metrics, found by running the manifests with the pod runner) and emptied of
metric files of earlier processes (the folder survives container restarts: their counts
would be added to this process's).
"""

from __future__ import annotations

import atexit
import os
import pathlib
import shutil
import tempfile


def prepare(configured: str | None, *, temporary: str | None = None) -> str | None:
    """The folder ``configured`` (created, 0700, its ``*.db`` files removed), else with
    ``temporary`` (a prefix) a new folder removed when this process exits, else None
    (single-process metrics). Sets ``PROMETHEUS_MULTIPROC_DIR`` when there is a folder."""
    if configured:
        os.makedirs(configured, mode=0o700, exist_ok=True)
        for f in pathlib.Path(configured).glob("*.db"):
            f.unlink(missing_ok=True)
        path = configured
    elif temporary:
        path = tempfile.mkdtemp(prefix=temporary)
        owner = os.getpid()

        def remove() -> None:  # gunicorn workers are forks and run atexit too: master only
            if os.getpid() == owner:
                shutil.rmtree(path, True)

        atexit.register(remove)
    else:
        return None
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = path
    return path
