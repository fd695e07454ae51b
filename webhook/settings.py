"""The webhook's settings: one dataclass, built once in the entry point.

Every option is declared once in ``SPEC`` (``tether.config``): its environment variable,
default, bounds and meaning; some have a flag of ``tether webhook`` that overrides the
variable. ``tether webhook --help`` and docs/webhook.md list them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from tether import config, filters, sender


@dataclasses.dataclass(frozen=True)
class ForwarderSettings:
    threads: int = 2
    max_batch: int = 50
    readback_seconds: float = 5.0
    read_error_seconds: float = 60.0
    poll: float = 0.05  # longest pause between two reads of an object not visible yet
    reread_first: float = 0.005  # the first such pause (doubling up to ``poll``)
    retry_base: float = 0.2
    retry_cap: float = 30.0
    drain_seconds: float = 10.0
    coalesce_seconds: float = 0.0
    hot_key_seconds: float = 0.25


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
    # connections (per worker; tether.httpworker): every pod of the runtime can reach the
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


MIB = 1024 * 1024
W = "TETHER_WEBHOOK_"

SPEC = config.Spec(
    part="webhook",
    summary="Validating admission webhook for ConfigMaps and its forwarder (SKR).",
    options=(
        config.runtime_id(flag="--runtime-id"),
        *sender.client_options(read_timeout=10.0),
        config.host_port("TETHER_WEBHOOK_BIND", "0.0.0.0:8443", "HTTPS listen address",
                         flag="--bind"),
        config.file("TETHER_WEBHOOK_CERT_FILE", config.REQUIRED, "serving certificate (PEM)",
                    "certificate", flag="--cert-file"),
        config.file("TETHER_WEBHOOK_KEY_FILE", config.REQUIRED, "serving certificate's key (PEM)",
                    "key", flag="--key-file"),
        config.integer("TETHER_WEBHOOK_WORKERS", 2, "gunicorn worker processes", minimum=1,
                       maximum=64, flag="--workers"),
        config.integer("TETHER_WEBHOOK_THREADS", 8, "request threads per worker", minimum=1,
                       maximum=256, flag="--threads"),
        config.integer("TETHER_WEBHOOK_KEEPALIVE_SECONDS", 75,
                       "how long an idle keep-alive connection stays open", minimum=0,
                       maximum=3600, duration=True),
        config.integer("TETHER_WEBHOOK_GRACEFUL_TIMEOUT_SECONDS", 20,
                       "gunicorn's graceful timeout at shutdown", minimum=1, maximum=600,
                       duration=True),
        config.integer("TETHER_WEBHOOK_MAX_BODY_BYTES", 8 * MIB,
                       "largest AdmissionReview accepted (object + oldObject of a 1 MiB "
                       "ConfigMap fit)", minimum=64 * 1024, maximum=64 * MIB),
        config.seconds("TETHER_WEBHOOK_HANDSHAKE_TIMEOUT_SECONDS", 5.0,
                       "a TLS handshake completes within this time", minimum=0.1, maximum=120),
        config.seconds("TETHER_WEBHOOK_HEAD_TIMEOUT_SECONDS", 10.0,
                       "a request head (and a body up to 1 MiB of known length) arrives within "
                       "this time", minimum=0.1, maximum=300),
        config.seconds("TETHER_WEBHOOK_BODY_TIMEOUT_SECONDS", 10.0,
                       "all reads of a larger body", minimum=0.1, maximum=600),
        config.seconds("TETHER_WEBHOOK_IDLE_TIMEOUT_SECONDS", 10.0,
                       "one read or write without progress", minimum=0.1, maximum=300),
        config.integer("TETHER_WEBHOOK_MAX_CONNECTIONS", 1000,
                       "connections per worker (beyond: the oldest anonymous one is closed)",
                       minimum=1, maximum=100_000),
        config.integer("TETHER_WEBHOOK_MAX_CONNECTIONS_PER_PEER", 256,
                       "connections one client address may hold per worker", minimum=1,
                       maximum=100_000),
        config.text("PROMETHEUS_MULTIPROC_DIR", None,
                    "metrics folder shared by the workers (unset: a temporary one per start)"),
        config.seconds("TETHER_WEBHOOK_DRAIN_SECONDS", 10.0,
                       "time to drain the queue at shutdown (below the graceful timeout)",
                       minimum=0, maximum=600),
        config.integer("TETHER_WEBHOOK_FORWARDER_THREADS", 2, "forwarder threads per worker",
                       minimum=1, maximum=64, flag="--forwarder-threads"),
        config.integer("TETHER_WEBHOOK_FORWARDER_MAX_BATCH", 50,
                       "keys per round and records per POST", minimum=1,
                       maximum=sender.MAX_BATCH_ITEMS),
        config.seconds("TETHER_WEBHOOK_READBACK_SECONDS", 5.0,
                       "how long after admission a write may take to become visible (above "
                       "coalesce + hot-key)", minimum=0.1, maximum=120),
        config.seconds("TETHER_WEBHOOK_RETRY_BASE_SECONDS", 0.2,
                       "first backoff of a failed send", minimum=0.01, maximum=60),
        config.seconds("TETHER_WEBHOOK_RETRY_CAP_SECONDS", 30.0,
                       "longest backoff of a failed send", minimum=0.1, maximum=3600),
        config.seconds("TETHER_WEBHOOK_COALESCE_SECONDS", 0.0,
                       "minimum wait after a key's first admission before it is handed out "
                       "(0: at once, leading edge; 0.1: the trailing window of earlier "
                       "versions)", minimum=0, maximum=10),
        config.seconds("TETHER_WEBHOOK_HOT_KEY_SECONDS", 0.25,
                       "minimum interval between two hand-outs of the same key (changes "
                       "within it coalesce; 0.5 before leading-edge delivery)", minimum=0,
                       maximum=60),
        config.integer("TETHER_WEBHOOK_QUEUE_SIZE", 10000,
                       "keys waiting per worker before overflow", minimum=1, maximum=1_000_000,
                       flag="--queue-size"),
        *filters.OPTIONS,
        config.kubeconfig("TETHER_KUBECONFIG",
                          "kubeconfig for the read-back (unset: $KUBECONFIG, else the in-cluster "
                          "service account)", flag="--kubeconfig"),
        config.log_level(flag="--log-level"),
        config.log_format(),
    ),
    renamed={
        **sender.CLIENT_RENAMED,
        "TETHER_WEBHOOK_KEEPALIVE": "TETHER_WEBHOOK_KEEPALIVE_SECONDS",
        "TETHER_WEBHOOK_GRACEFUL_TIMEOUT": "TETHER_WEBHOOK_GRACEFUL_TIMEOUT_SECONDS",
        "TETHER_DRAIN_SECONDS": "TETHER_WEBHOOK_DRAIN_SECONDS",
        "TETHER_FORWARDER_THREADS": "TETHER_WEBHOOK_FORWARDER_THREADS",
        "TETHER_FORWARDER_MAX_BATCH": "TETHER_WEBHOOK_FORWARDER_MAX_BATCH",
        "TETHER_READBACK_SECONDS": "TETHER_WEBHOOK_READBACK_SECONDS",
        "TETHER_RETRY_BASE_SECONDS": "TETHER_WEBHOOK_RETRY_BASE_SECONDS",
        "TETHER_RETRY_CAP_SECONDS": "TETHER_WEBHOOK_RETRY_CAP_SECONDS",
        "TETHER_COALESCE_SECONDS": "TETHER_WEBHOOK_COALESCE_SECONDS",
        "TETHER_HOT_KEY_SECONDS": "TETHER_WEBHOOK_HOT_KEY_SECONDS",
        "TETHER_QUEUE_SIZE": "TETHER_WEBHOOK_QUEUE_SIZE",
    },
    pairs=(*sender.CLIENT_PAIRS, ("TETHER_WEBHOOK_CERT_FILE", "TETHER_WEBHOOK_KEY_FILE")),
)


def build(v: config.Values) -> Settings:
    """The settings from the options' values, with the checks between them."""
    server = ServerSettings(
        bind=v["TETHER_WEBHOOK_BIND"],
        cert_file=v["TETHER_WEBHOOK_CERT_FILE"],
        key_file=v["TETHER_WEBHOOK_KEY_FILE"],
        workers=v["TETHER_WEBHOOK_WORKERS"],
        threads=v["TETHER_WEBHOOK_THREADS"],
        keepalive=v["TETHER_WEBHOOK_KEEPALIVE_SECONDS"],
        graceful_timeout=v["TETHER_WEBHOOK_GRACEFUL_TIMEOUT_SECONDS"],
        max_body_bytes=v["TETHER_WEBHOOK_MAX_BODY_BYTES"],
        handshake_timeout=v["TETHER_WEBHOOK_HANDSHAKE_TIMEOUT_SECONDS"],
        head_timeout=v["TETHER_WEBHOOK_HEAD_TIMEOUT_SECONDS"],
        body_timeout=v["TETHER_WEBHOOK_BODY_TIMEOUT_SECONDS"],
        idle_timeout=v["TETHER_WEBHOOK_IDLE_TIMEOUT_SECONDS"],
        max_connections=v["TETHER_WEBHOOK_MAX_CONNECTIONS"],
        max_connections_per_peer=v["TETHER_WEBHOOK_MAX_CONNECTIONS_PER_PEER"],
        metrics_dir=v["PROMETHEUS_MULTIPROC_DIR"],
    )
    drain = v["TETHER_WEBHOOK_DRAIN_SECONDS"]
    if drain >= v["TETHER_WEBHOOK_GRACEFUL_TIMEOUT_SECONDS"]:
        raise config.SettingError(
            f"TETHER_WEBHOOK_DRAIN_SECONDS: {drain:g} must be below "
            f"TETHER_WEBHOOK_GRACEFUL_TIMEOUT_SECONDS ({server.graceful_timeout})")
    fwd = ForwarderSettings(
        threads=v["TETHER_WEBHOOK_FORWARDER_THREADS"],
        max_batch=v["TETHER_WEBHOOK_FORWARDER_MAX_BATCH"],
        readback_seconds=v["TETHER_WEBHOOK_READBACK_SECONDS"],
        retry_base=v["TETHER_WEBHOOK_RETRY_BASE_SECONDS"],
        retry_cap=v["TETHER_WEBHOOK_RETRY_CAP_SECONDS"],
        drain_seconds=drain,
        coalesce_seconds=v["TETHER_WEBHOOK_COALESCE_SECONDS"],
        hot_key_seconds=v["TETHER_WEBHOOK_HOT_KEY_SECONDS"],
    )
    if fwd.coalesce_seconds + fwd.hot_key_seconds >= fwd.readback_seconds:
        raise config.SettingError(
            f"TETHER_WEBHOOK_READBACK_SECONDS: {fwd.readback_seconds:g} must exceed "
            f"TETHER_WEBHOOK_COALESCE_SECONDS ({fwd.coalesce_seconds:g}) plus "
            f"TETHER_WEBHOOK_HOT_KEY_SECONDS ({fwd.hot_key_seconds:g})")
    runtime_id = v["TETHER_RUNTIME_ID"]
    return Settings(
        runtime_id=runtime_id,
        listener=sender.client_settings(v, runtime_id),
        server=server,
        forwarder=fwd,
        filter=filters.from_values(v),
        queue_size=v["TETHER_WEBHOOK_QUEUE_SIZE"],
        kubeconfig=v["TETHER_KUBECONFIG"],
        log_level=v["TETHER_LOG_LEVEL"],
        log_format=v["TETHER_LOG_FORMAT"],
    )


def from_env(env: Mapping[str, str] | None = None) -> Settings:
    """Raises ``config.SettingError`` naming the first bad variable (``env`` for tests;
    default ``os.environ``). Files are only checked to exist here (``SPEC.check_files``)."""
    return build(SPEC.read(env))
