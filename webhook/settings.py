"""The webhook's settings: one dataclass, built once in the entry point.

Every setting is an environment variable; flags of ``tether webhook`` override them
(``--listener-url`` sets ``TETHER_LISTENER_URL`` and so on: the flag is the variable's
name without ``TETHER_``/``TETHER_WEBHOOK_``, lower case, dashes). See docs/webhook.md.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from common import config, filters, sender


@dataclasses.dataclass(frozen=True)
class ForwarderSettings:
    threads: int = 2
    max_batch: int = 50
    readback_seconds: float = 5.0
    read_error_seconds: float = 60.0
    poll: float = 0.05
    retry_base: float = 0.2
    retry_cap: float = 30.0
    drain_seconds: float = 10.0
    coalesce_seconds: float = 0.1
    hot_key_seconds: float = 0.5


@dataclasses.dataclass(frozen=True)
class ServerSettings:
    bind: str = "0.0.0.0:8443"
    cert_file: str = ""
    key_file: str = ""
    workers: int = 2
    threads: int = 8
    keepalive: int = 75
    graceful_timeout: int = 20
    max_body_bytes: int = 8 * 1024 * 1024
    # connections (per worker; common.httpworker): every pod of the runtime can reach the
    # server, so handshakes, heads and bodies have deadlines and connections are capped
    handshake_timeout: float = 5.0
    head_timeout: float = 10.0
    body_timeout: float = 10.0
    idle_timeout: float = 10.0
    max_connections: int = 1000
    max_connections_per_peer: int = 256  # per client address (the API server is one)
    metrics_dir: str | None = None  # PROMETHEUS_MULTIPROC_DIR; a temp dir per start if unset


@dataclasses.dataclass(frozen=True)
class Settings:
    runtime_id: str
    listener: sender.ClientSettings
    server: ServerSettings
    forwarder: ForwarderSettings
    filter: filters.ConfigMapFilter
    queue_size: int = 10000
    kubeconfig: str | None = None  # None: in-cluster service account
    log_level: str = "INFO"
    log_format: str = "json"
    overflow_log_seconds: float = 60.0


def from_env(env: Mapping[str, str]) -> Settings:
    """Raises ``config.SettingError`` naming the first bad variable."""
    runtime_id = config.runtime_id(env=env)
    listener = sender.client_settings_from_env(env, runtime_id, read_timeout=10.0)
    workers = config.integer("TETHER_WEBHOOK_WORKERS", 2, minimum=1, maximum=64, env=env)
    server = ServerSettings(
        bind=config.string("TETHER_WEBHOOK_BIND", "0.0.0.0:8443", env=env),
        cert_file=config.existing_file("TETHER_WEBHOOK_CERT_FILE", env=env),
        key_file=config.existing_file("TETHER_WEBHOOK_KEY_FILE", env=env),
        workers=workers,
        threads=config.integer("TETHER_WEBHOOK_THREADS", 8, minimum=1, maximum=256, env=env),
        keepalive=config.integer("TETHER_WEBHOOK_KEEPALIVE", 75, minimum=0, maximum=3600, env=env),
        graceful_timeout=config.integer("TETHER_WEBHOOK_GRACEFUL_TIMEOUT", 20, minimum=1, maximum=600, env=env),
        max_body_bytes=config.integer("TETHER_WEBHOOK_MAX_BODY_BYTES", 8 * 1024 * 1024,
                                      minimum=64 * 1024, maximum=64 * 1024 * 1024, env=env),
        handshake_timeout=config.number("TETHER_WEBHOOK_HANDSHAKE_TIMEOUT_SECONDS", 5.0,
                                        minimum=0.1, maximum=120, env=env),
        head_timeout=config.number("TETHER_WEBHOOK_HEAD_TIMEOUT_SECONDS", 10.0, minimum=0.1,
                                   maximum=300, env=env),
        body_timeout=config.number("TETHER_WEBHOOK_BODY_TIMEOUT_SECONDS", 10.0, minimum=0.1,
                                   maximum=600, env=env),
        idle_timeout=config.number("TETHER_WEBHOOK_IDLE_TIMEOUT_SECONDS", 10.0, minimum=0.1,
                                   maximum=300, env=env),
        max_connections=config.integer("TETHER_WEBHOOK_MAX_CONNECTIONS", 1000, minimum=1,
                                       maximum=100_000, env=env),
        max_connections_per_peer=config.integer("TETHER_WEBHOOK_MAX_CONNECTIONS_PER_PEER", 256,
                                                minimum=1, maximum=100_000, env=env),
        metrics_dir=config.optional("PROMETHEUS_MULTIPROC_DIR", env=env),
    )
    drain = config.number("TETHER_DRAIN_SECONDS", 10.0, minimum=0, maximum=600, env=env)
    if drain >= server.graceful_timeout:
        raise config.SettingError(
            f"TETHER_DRAIN_SECONDS={drain} must be below TETHER_WEBHOOK_GRACEFUL_TIMEOUT={server.graceful_timeout}")
    fwd = ForwarderSettings(
        threads=config.integer("TETHER_FORWARDER_THREADS", 2, minimum=1, maximum=64, env=env),
        max_batch=config.integer("TETHER_FORWARDER_MAX_BATCH", 50, minimum=1, maximum=sender.MAX_BATCH_ITEMS, env=env),
        readback_seconds=config.number("TETHER_READBACK_SECONDS", 5.0, minimum=0.1, maximum=120, env=env),
        retry_base=config.number("TETHER_RETRY_BASE_SECONDS", 0.2, minimum=0.01, maximum=60, env=env),
        retry_cap=config.number("TETHER_RETRY_CAP_SECONDS", 30.0, minimum=0.1, maximum=3600, env=env),
        drain_seconds=drain,
        coalesce_seconds=config.number("TETHER_COALESCE_SECONDS", 0.1, minimum=0, maximum=10, env=env),
        hot_key_seconds=config.number("TETHER_HOT_KEY_SECONDS", 0.5, minimum=0, maximum=60, env=env),
    )
    if fwd.coalesce_seconds + fwd.hot_key_seconds >= fwd.readback_seconds:
        raise config.SettingError(
            f"TETHER_COALESCE_SECONDS={fwd.coalesce_seconds} plus TETHER_HOT_KEY_SECONDS="
            f"{fwd.hot_key_seconds} must be below TETHER_READBACK_SECONDS={fwd.readback_seconds}")
    return Settings(
        runtime_id=runtime_id,
        listener=listener,
        server=server,
        forwarder=fwd,
        filter=filters.from_env(env),
        queue_size=config.integer("TETHER_QUEUE_SIZE", 10000, minimum=1, maximum=1_000_000, env=env),
        kubeconfig=config.optional("TETHER_KUBECONFIG", env=env) or config.optional("KUBECONFIG", env=env),
        log_level=config.log_level(env=env),
        log_format=config.string("TETHER_LOG_FORMAT", "json", env=env),
    )



FLAGS = {
    # flag -> variable
    "--runtime-id": "TETHER_RUNTIME_ID",
    "--listener-url": "TETHER_LISTENER_URL",
    "--listener-ca-file": "TETHER_LISTENER_CA_FILE",
    "--client-cert-file": "TETHER_CLIENT_CERT_FILE",
    "--client-key-file": "TETHER_CLIENT_KEY_FILE",
    "--listener-timeout": "TETHER_LISTENER_TIMEOUT",
    "--bind": "TETHER_WEBHOOK_BIND",
    "--cert-file": "TETHER_WEBHOOK_CERT_FILE",
    "--key-file": "TETHER_WEBHOOK_KEY_FILE",
    "--workers": "TETHER_WEBHOOK_WORKERS",
    "--threads": "TETHER_WEBHOOK_THREADS",
    "--forwarder-threads": "TETHER_FORWARDER_THREADS",
    "--queue-size": "TETHER_QUEUE_SIZE",
    "--ignored-namespaces": "TETHER_IGNORED_NAMESPACES",
    "--label-selector": "TETHER_LABEL_SELECTOR",
    "--kubeconfig": "TETHER_KUBECONFIG",
    "--log-level": "TETHER_LOG_LEVEL",
}
