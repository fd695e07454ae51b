"""``tether listener``: serve the listener under gunicorn (gthread) with mTLS.

Settings come from ``TETHER_LISTENER_*`` environment variables (``tether listener --help``,
docs/listener.md). Every setting, certificate and the kubeconfig is checked before gunicorn
starts (a bad one: one line, exit 2); ``--check`` only checks them and exits.
"""

from __future__ import annotations

import os
import pathlib
import sys

from listener import settings
from listener.edge import server
from tether import config, logs


def _clear_multiprocess_dir(path: str | None) -> None:
    """Create the folder (an emptyDir mounted at /tmp starts empty: the workers failed to
    boot on a missing /tmp/metrics, found by running the manifests with the pod runner) and
    remove metric files of earlier processes (the folder survives container restarts)."""
    if path:
        os.makedirs(path, mode=0o700, exist_ok=True)
        for f in pathlib.Path(path).glob("*.db"):
            f.unlink(missing_ok=True)


def main(argv: list[str]) -> int:
    s, _ = config.load(settings.SPEC, argv, settings.build)
    logs.configure(s.log_level, s.log_format)
    _clear_multiprocess_dir(os.environ.get("PROMETHEUS_MULTIPROC_DIR"))
    server.Server(s).run()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
