"""``tether listener``: serve the listener under gunicorn (gthread) with mTLS.

Settings come from ``TETHER_LISTENER_*`` environment variables (``tether listener --help``,
docs/listener.md). Every setting, certificate and the kubeconfig is checked before gunicorn
starts (a bad one: one line, exit 2); ``--check`` only checks them and exits.
"""

from __future__ import annotations

import os
import sys
import tempfile

from listener import server, settings
from listener.view import process
from tether.base import config, logs
from tether.http import metricsdir
from tether.kube import gateway


def main(argv: list[str]) -> int:
    s, _ = config.load(settings.SPEC, argv, settings.build)
    logs.configure(s.log_level, s.log_format)
    gateway.identify("listener")
    metricsdir.prepare(os.environ.get("PROMETHEUS_MULTIPROC_DIR"))
    if not s.view:
        server.Server(s).run()
        return 0
    # the pod's view: one process, started before the workers, restarted when it dies
    view = process.Supervisor(os.path.join(tempfile.mkdtemp(prefix="tether-view-"), "view.sock"))
    view.start()
    try:
        server.Server(s, view.socket_path).run()
    finally:
        view.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
