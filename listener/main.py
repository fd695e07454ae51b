"""``tether listener``: serve the listener under gunicorn (gthread) with mTLS.

Settings come from ``TETHER_LISTENER_*`` environment variables (``tether listener --help``,
docs/listener.md). Every setting, certificate and the kubeconfig is checked before gunicorn
starts (a bad one: one line, exit 2); ``--check`` only checks them and exits.
"""

from __future__ import annotations

import os
import sys

from listener import settings
from listener.edge import server
from tether import config, gateway, logs, metricsdir


def main(argv: list[str]) -> int:
    s, _ = config.load(settings.SPEC, argv, settings.build)
    logs.configure(s.log_level, s.log_format)
    gateway.identify("listener")
    metricsdir.prepare(os.environ.get("PROMETHEUS_MULTIPROC_DIR"))
    server.Server(s).run()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
