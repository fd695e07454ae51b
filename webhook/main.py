"""``tether webhook``: the validating admission webhook for ConfigMaps and its forwarder (SKR).

Checks every setting, certificate and the kubeconfig (``tether.base.config.load``), prepares the
metrics folder and runs gunicorn; a bad setting stops it with one line before any worker.
"""

from __future__ import annotations

from tether.base import config, logs
from tether.http import metricsdir
from tether.kube import gateway
from webhook import settings as settings_mod


def main(argv: list[str]) -> int:
    s, _ = config.load(settings_mod.SPEC, argv, settings_mod.build)
    logs.configure(s.log_level, s.log_format)
    gateway.identify("webhook")
    metricsdir.prepare(s.server.metrics_dir, temporary="tether-webhook-metrics-")
    from webhook import server  # imports prometheus_client: after the folder is set

    server.WebhookServer(s).run()
    return 0
