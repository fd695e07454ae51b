"""``tether listener``: serve the listener under gunicorn (gthread) with mTLS.

Settings come from ``TETHER_LISTENER_*`` environment variables (docs/listener.md);
``--check`` only validates them and exits.
"""

from __future__ import annotations

import argparse
import os
import pathlib
import sys

from common import config, logs
from listener import server, settings


def _clear_multiprocess_dir(path: str | None) -> None:
    """Remove metric files of earlier processes (the folder survives container restarts)."""
    if path and os.path.isdir(path):
        for f in pathlib.Path(path).glob("*.db"):
            f.unlink(missing_ok=True)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="tether listener", description=__doc__)
    parser.add_argument("--check", action="store_true", help="validate the settings and exit")
    args = parser.parse_args(argv)
    try:
        s = settings.from_env()
    except config.SettingError as e:
        print(f"tether listener: {e}", file=sys.stderr)
        return 2
    if args.check:
        print("settings ok")
        return 0
    logs.configure(s.log_level, s.log_format)
    _clear_multiprocess_dir(os.environ.get("PROMETHEUS_MULTIPROC_DIR"))
    server.Server(s).run()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
