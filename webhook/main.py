"""``tether webhook``: the validating admission webhook for ConfigMaps and its forwarder (SKR).

Checks every setting, certificate and the kubeconfig (``tether.config.load``), prepares the
metrics folder and runs gunicorn; a bad setting stops it with one line before any worker.
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile

from tether import config, gateway, logs
from webhook import settings as settings_mod


def prepare_metrics_dir(configured: str | None) -> str:
    """PROMETHEUS_MULTIPROC_DIR: the configured folder (emptied of stale files) or a new
    temporary folder removed at exit. Must be set before prometheus_client is imported."""
    if configured:
        os.makedirs(configured, exist_ok=True)
        for name in os.listdir(configured):
            if name.endswith(".db"):
                os.remove(os.path.join(configured, name))
        path = configured
    else:
        path = tempfile.mkdtemp(prefix="tether-webhook-metrics-")
        owner = os.getpid()

        def remove() -> None:  # gunicorn workers are forks and run atexit too: master only
            if os.getpid() == owner:
                shutil.rmtree(path, True)

        atexit.register(remove)
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = path
    return path


def main(argv: list[str]) -> int:
    s, _ = config.load(settings_mod.SPEC, argv, settings_mod.build)
    logs.configure(s.log_level, s.log_format)
    gateway.identify("webhook")
    prepare_metrics_dir(s.server.metrics_dir)
    from webhook import server  # imports prometheus_client: after the folder is set

    server.WebhookServer(s).run()
    return 0
