"""``tether webhook``: validate settings, prepare the metrics folder, run gunicorn."""

from __future__ import annotations

import argparse
import atexit
import os
import shutil
import sys
import tempfile

from common import config, logs
from webhook import settings as settings_mod


def parse_flags(argv: list[str]) -> dict[str, str]:
    """Flags override the environment; returns the merged environment."""
    parser = argparse.ArgumentParser(
        prog="tether webhook",
        description="Validating admission webhook for ConfigMaps and its forwarder. "
                    "Every flag has an environment variable; see docs/webhook.md.")
    for flag, var in settings_mod.FLAGS.items():
        parser.add_argument(flag, dest=var, metavar="VALUE", help=f"(env {var})")
    args = parser.parse_args(argv)
    env = dict(os.environ)
    env.update({k: str(v) for k, v in vars(args).items() if v is not None})
    return env


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
    env = parse_flags(argv)
    try:
        s = settings_mod.from_env(env)
    except config.SettingError as e:
        print(f"tether webhook: {e}", file=sys.stderr)
        return 2
    logs.configure(s.log_level, s.log_format)
    prepare_metrics_dir(s.server.metrics_dir)
    from webhook import server  # imports prometheus_client: after the folder is set

    server.WebhookServer(s).run()
    return 0
