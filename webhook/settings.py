"""The webhook's settings: one dataclass, built once in the entry point.

Every setting is declared once, as a field with its option (``tether.base.config.setting``): its
environment variable, default, bounds and meaning; some have a flag of ``tether webhook``
that overrides the variable. ``SPEC`` collects them; ``tether webhook --help`` and
docs/webhook.md list them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from tether.base import config
from tether.runtime import sender
from tether.wire import filters, watchset

MIB = 1024 * 1024
setting = config.setting


@dataclasses.dataclass(frozen=True)
class ForwarderSettings:
    drain_seconds: float = setting(
        config.seconds(
            "TETHER_WEBHOOK_DRAIN_SECONDS",
            10.0,
            "time to drain the queue at shutdown (below the graceful timeout)",
            minimum=0,
            maximum=600,
        )
    )
    threads: int = setting(
        config.integer(
            "TETHER_WEBHOOK_FORWARDER_THREADS",
            2,
            "forwarder threads per worker (all run in the forwarder process)",
            minimum=1,
            maximum=64,
            flag="--forwarder-threads",
        )
    )
    max_batch: int = setting(
        config.integer(
            "TETHER_WEBHOOK_FORWARDER_MAX_BATCH",
            50,
            "keys per round and records per POST",
            minimum=1,
            maximum=sender.MAX_BATCH_ITEMS,
        )
    )
    readback_seconds: float = setting(
        config.seconds(
            "TETHER_WEBHOOK_READBACK_SECONDS",
            5.0,
            "how long after admission a write may take to "
            "become visible (above coalesce + hot-key)",
            minimum=0.1,
            maximum=120,
        )
    )
    read_error_seconds: float = 60.0
    poll: float = 0.05  # longest pause between two reads of an object not visible yet
    reread_first: float = 0.005  # the first such pause (doubling up to ``poll``)
    readback_lanes: int = setting(
        config.integer(
            "TETHER_WEBHOOK_FORWARDER_READ_LANES",
            4,
            "objects read back at once per worker (its "
            "forwarder threads share them; 1: one after another)",
            minimum=1,
            maximum=64,
        )
    )
    retry_base: float = setting(
        config.seconds(
            "TETHER_WEBHOOK_RETRY_BASE_SECONDS",
            0.2,
            "first backoff of a failed send",
            minimum=0.01,
            maximum=60,
        )
    )
    retry_cap: float = setting(
        config.seconds(
            "TETHER_WEBHOOK_RETRY_CAP_SECONDS",
            30.0,
            "longest backoff of a failed send",
            minimum=0.1,
            maximum=3600,
        )
    )
    coalesce_seconds: float = setting(
        config.seconds(
            "TETHER_WEBHOOK_COALESCE_SECONDS",
            0.0,
            "minimum wait after a key's first admission "
            "before it is handed out (0: at once, leading edge; 0.1: the trailing window of "
            "earlier versions)",
            minimum=0,
            maximum=10,
        )
    )
    hot_key_seconds: float = setting(
        config.seconds(
            "TETHER_WEBHOOK_HOT_KEY_SECONDS",
            0.25,
            "minimum interval between two hand-outs of the "
            "same key (changes within it coalesce; 0.5 before leading-edge delivery)",
            minimum=0,
            maximum=60,
        )
    )


@dataclasses.dataclass(frozen=True)
class ServerSettings:
    bind: str = setting(
        config.host_port(
            "TETHER_WEBHOOK_BIND", "0.0.0.0:8443", "HTTPS listen address", flag="--bind"
        )
    )
    cert_file: str = setting(
        config.file(
            "TETHER_WEBHOOK_CERT_FILE",
            config.REQUIRED,
            "serving certificate (PEM)",
            "certificate",
            flag="--cert-file",
        ),
        default="",
    )
    key_file: str = setting(
        config.file(
            "TETHER_WEBHOOK_KEY_FILE",
            config.REQUIRED,
            "serving certificate's key (PEM)",
            "key",
            flag="--key-file",
        ),
        default="",
    )
    workers: int = setting(
        config.integer(
            "TETHER_WEBHOOK_WORKERS",
            2,
            "gunicorn worker processes",
            minimum=1,
            maximum=64,
            flag="--workers",
        )
    )
    threads: int = setting(
        config.integer(
            "TETHER_WEBHOOK_THREADS",
            8,
            "request threads per worker",
            minimum=1,
            maximum=256,
            flag="--threads",
        )
    )
    keepalive: int = setting(
        config.integer(
            "TETHER_WEBHOOK_KEEPALIVE_SECONDS",
            75,
            "how long an idle keep-alive connection stays open",
            minimum=0,
            maximum=3600,
            duration=True,
        )
    )
    graceful_timeout: int = setting(
        config.integer(
            "TETHER_WEBHOOK_GRACEFUL_TIMEOUT_SECONDS",
            20,
            "gunicorn's graceful timeout at shutdown",
            minimum=1,
            maximum=600,
            duration=True,
        )
    )
    max_body_bytes: int = setting(
        config.integer(
            "TETHER_WEBHOOK_MAX_BODY_BYTES",
            8 * MIB,
            "largest AdmissionReview accepted (object + oldObject of a 1 MiB ConfigMap fit)",
            minimum=64 * 1024,
            maximum=64 * MIB,
        )
    )
    # connections (per worker; tether.http.httpworker): every pod of the runtime can reach the
    # server, so handshakes, heads and bodies have deadlines and connections are capped
    handshake_timeout: float = setting(
        config.seconds(
            "TETHER_WEBHOOK_HANDSHAKE_TIMEOUT_SECONDS",
            5.0,
            "a TLS handshake completes within this time",
            minimum=0.1,
            maximum=120,
        )
    )
    head_timeout: float = setting(
        config.seconds(
            "TETHER_WEBHOOK_HEAD_TIMEOUT_SECONDS",
            10.0,
            "a request head (and a body up to 1 MiB of known length) arrives within this time",
            minimum=0.1,
            maximum=300,
        )
    )
    body_timeout: float = setting(
        config.seconds(
            "TETHER_WEBHOOK_BODY_TIMEOUT_SECONDS",
            10.0,
            "all reads of a larger body",
            minimum=0.1,
            maximum=600,
        )
    )
    idle_timeout: float = setting(
        config.seconds(
            "TETHER_WEBHOOK_IDLE_TIMEOUT_SECONDS",
            10.0,
            "one read or write without progress",
            minimum=0.1,
            maximum=300,
        )
    )
    max_connections: int = setting(
        config.integer(
            "TETHER_WEBHOOK_MAX_CONNECTIONS",
            1000,
            "connections per worker (beyond: the oldest anonymous one is closed)",
            minimum=1,
            maximum=100_000,
        )
    )
    max_connections_per_peer: int = setting(
        config.integer(  # the API server is one peer
            "TETHER_WEBHOOK_MAX_CONNECTIONS_PER_PEER",
            256,
            "connections one client address may hold per worker",
            minimum=1,
            maximum=100_000,
        )
    )
    # who may call /validate (webhook.caller; docs/webhook.md, "Who may call the webhook")
    client_ca_file: str | None = setting(
        config.file(
            "TETHER_WEBHOOK_CLIENT_CA_FILE",
            None,
            "CA bundle (PEM) of the client certificate the "
            "runtime's API server presents to the webhook; set: /validate answers 401 to a caller "
            "without one (unset: any caller, for API servers that cannot present one)",
            "certificate",
        )
    )
    client_names: tuple[str, ...] = setting(
        config.names(
            "TETHER_WEBHOOK_CLIENT_NAMES",
            (),
            "with TETHER_WEBHOOK_CLIENT_CA_FILE: the common names "
            "the API server's certificate may have (empty: any certificate of that CA)",
        )
    )
    metrics_dir: str | None = setting(
        config.text(
            "PROMETHEUS_MULTIPROC_DIR",
            None,
            "metrics folder shared by the workers (unset: a temporary one per start)",
        )
    )


@dataclasses.dataclass(frozen=True, kw_only=True)
class Settings:
    runtime_id: str = setting(config.runtime_id(flag="--runtime-id"))
    listener: sender.ClientSettings = config.inputs(*sender.client_options(read_timeout=10.0))
    server: ServerSettings = config.group(ServerSettings)
    forwarder: ForwarderSettings = config.group(ForwarderSettings)
    queue_size: int = setting(
        config.integer(
            "TETHER_WEBHOOK_QUEUE_SIZE",
            10000,
            "keys waiting per worker before overflow",
            minimum=1,
            maximum=1_000_000,
            flag="--queue-size",
        )
    )
    filter: filters.ConfigMapFilter = config.inputs(*filters.OPTIONS)
    watches_configmap: tuple[str, str] = setting(watchset.OPTION)  # namespace, name
    digest_key_file: str | None = setting(watchset.KEY_OPTION)  # read at start
    watches_ttl: float = watchset.DEFAULT_TTL  # how often the Watch list is read again
    kubeconfig: str | None = setting(
        config.kubeconfig(  # None: in-cluster service account
            "TETHER_KUBECONFIG",
            "kubeconfig for the read-back (unset: $KUBECONFIG, else the "
            "in-cluster service account)",
            flag="--kubeconfig",
        )
    )
    log_level: str = setting(config.log_level(flag="--log-level"))
    log_format: str = setting(config.log_format())
    overflow_log_seconds: float = 60.0


SPEC = config.Spec.of(
    Settings,
    part="webhook",
    summary="Validating admission webhook for the objects the runtime's Watches cover "
    "(ConfigMaps without Watches) and its forwarder (SKR).",
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
    server = config.fill(ServerSettings, v)
    drain = v["TETHER_WEBHOOK_DRAIN_SECONDS"]
    if drain >= v["TETHER_WEBHOOK_GRACEFUL_TIMEOUT_SECONDS"]:
        raise config.SettingError(
            f"TETHER_WEBHOOK_DRAIN_SECONDS: {drain:g} must be below "
            f"TETHER_WEBHOOK_GRACEFUL_TIMEOUT_SECONDS ({server.graceful_timeout})"
        )
    fwd = config.fill(ForwarderSettings, v)
    if fwd.coalesce_seconds + fwd.hot_key_seconds >= fwd.readback_seconds:
        raise config.SettingError(
            f"TETHER_WEBHOOK_READBACK_SECONDS: {fwd.readback_seconds:g} must exceed "
            f"TETHER_WEBHOOK_COALESCE_SECONDS ({fwd.coalesce_seconds:g}) plus "
            f"TETHER_WEBHOOK_HOT_KEY_SECONDS ({fwd.hot_key_seconds:g})"
        )
    return config.fill(
        Settings,
        v,
        server=server,
        forwarder=fwd,
        filter=filters.from_values(v),
        listener=sender.client_settings(v, v["TETHER_RUNTIME_ID"]),
    )


def from_env(env: Mapping[str, str] | None = None) -> Settings:
    """Raises ``config.SettingError`` naming the first bad variable (``env`` for tests;
    default ``os.environ``). Files are only checked to exist here (``SPEC.check_files``)."""
    return build(SPEC.read(env))
