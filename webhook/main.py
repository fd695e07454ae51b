"""``tether webhook``: validate settings, prepare the metrics folder, run gunicorn."""

from __future__ import annotations

import atexit
import os
import pathlib
import shutil
import ssl
import sys
import tempfile

import yaml

from common import certs, config, logs, tlsreload
from webhook import settings as settings_mod


def parse_flags(argv: list[str]) -> dict[str, str]:
    """Flags override the environment; returns the merged environment."""
    return config.env_with_flags(
        argv, settings_mod.FLAGS, prog="tether webhook",
        description="Validating admission webhook for ConfigMaps and its forwarder. "
                    "Every flag has an environment variable; see docs/webhook.md.")


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


def check_start(s: settings_mod.Settings) -> str:
    """What cannot work, found before gunicorn starts (workers would only fail to boot):
    certificate files that do not load or do not match their key, a file that is no kubeconfig.
    Empty when all is well."""
    try:
        tlsreload.server_context(s.server.cert_file, s.server.key_file)
    except (OSError, ssl.SSLError) as e:
        return (f"TETHER_WEBHOOK_CERT_FILE/TETHER_WEBHOOK_KEY_FILE: cannot load the serving "
                f"certificate: {type(e).__name__}: {e}")
    try:
        certs.client_context(s.listener.ca_file, s.listener.cert_file, s.listener.key_file)
    except (OSError, ssl.SSLError) as e:
        return (f"TETHER_LISTENER_CA_FILE/TETHER_CLIENT_CERT_FILE/TETHER_CLIENT_KEY_FILE: cannot "
                f"load the client certificate or CA: {type(e).__name__}: {e}")
    if s.kubeconfig:
        # Only read it here: building a client in the master would write the kubeconfig's
        # certificates to temporary files that forked workers share and that the first
        # exiting worker's atexit handler deletes (breaking the others' new connections).
        try:
            loaded = yaml.safe_load(pathlib.Path(s.kubeconfig).read_text())
        except (OSError, yaml.YAMLError, UnicodeDecodeError) as e:
            return f"TETHER_KUBECONFIG: cannot read {s.kubeconfig}: {type(e).__name__}"
        if not isinstance(loaded, dict) or not loaded.get("clusters"):
            return f"TETHER_KUBECONFIG: {s.kubeconfig} is not a kubeconfig (no clusters)"
    return ""


def main(argv: list[str]) -> int:
    env = parse_flags(argv)
    try:
        s = settings_mod.from_env(env)
    except config.SettingError as e:
        print(f"tether webhook: {e}", file=sys.stderr)
        return 2
    problem = check_start(s)
    if problem:
        print(f"tether webhook: {problem}", file=sys.stderr)
        return 2
    logs.configure(s.log_level, s.log_format)
    prepare_metrics_dir(s.server.metrics_dir)
    from webhook import server  # imports prometheus_client: after the folder is set

    server.WebhookServer(s).run()
    return 0
