"""Compass settings: one dataclass, built once in the entry point from the options declared
in ``SPEC`` (``tether.config``: variable, default, bounds, meaning; ``tether compass --help``
and docs/compass.md list them). A bad value stops the process with one line naming it."""

from __future__ import annotations

import dataclasses
import pathlib
from collections.abc import Mapping

from apscheduler.triggers.cron import CronTrigger

from tether import config, skr_clients


@dataclasses.dataclass(frozen=True)
class Settings:
    director_url: str                      # GraphQL endpoint
    token_url: str                         # OAuth2 token endpoint
    client_id: str
    client_secret: str = dataclasses.field(repr=False)
    director_ca_file: str | None = None    # None: system trust store
    namespace: str = "kcp-system"          # Kyma CRs, mappings and kubeconfig Secrets
    managed_by: str = "tether"             # director_connection_managed_by label value
    only_app_connector: bool = False
    interval: float = 60.0
    resync_cron: str = "17 * * * *"
    concurrency: int = 8
    director_timeout: float = 10.0
    skr_timeout: float = 10.0
    backoff_base: float = 5.0
    backoff_cap: float = 300.0
    breaker_threshold: int = 5
    breaker_open_seconds: float = 15.0
    breaker_max_open_seconds: float = 120.0
    secret_namespace: str = "kyma-system"
    secret_name: str = "compass-agent-configuration"
    lease_namespace: str = "tether-system"
    lease_name: str = "tether-compass"
    shard_index: int = 0                   # this instance's shard of the Kyma CRs
    shard_count: int = 1
    bind: str = "0.0.0.0:8080"
    log_level: str = "INFO"
    log_format: str = "json"
    audit_destination: str = "stdout"
    kubeconfig: str | None = None          # None: $KUBECONFIG, else in-cluster
    runtimes: skr_clients.Policy = dataclasses.field(default_factory=skr_clients.Policy)


def _cron(name: str, raw: str) -> str:
    try:
        CronTrigger.from_crontab(raw)
    except ValueError as e:
        raise config.SettingError(f"{name}: {raw!r} is not a crontab expression: {e}") from None
    return raw


C = "TETHER_COMPASS_"
SPEC = config.Spec(
    part="compass",
    summary="Compass registration scheduler (KCP).",
    options=(
        config.https_url(C + "DIRECTOR_URL", config.REQUIRED, "Director GraphQL endpoint"),
        config.https_url(C + "OAUTH_TOKEN_URL", config.REQUIRED, "OAuth2 token endpoint"),
        config.text(C + "OAUTH_CLIENT_ID", config.REQUIRED, "OAuth2 client ID"),
        config.file(C + "OAUTH_CLIENT_SECRET_FILE", None,
                    "file holding the OAuth2 client secret (preferred to the variable)"),
        config.text(C + "OAUTH_CLIENT_SECRET", None,
                    "the OAuth2 client secret (one of the two is required)"),
        config.file(C + "DIRECTOR_CA_FILE", None,
                    "CA bundle for the Director and the token endpoint (unset: system trust "
                    "store)", "certificate"),
        config.kubeconfig(C + "KUBECONFIG", "kubeconfig of the KCP (unset: $KUBECONFIG, else "
                          "the in-cluster service account)", flag="--kubeconfig"),
        config.text("TETHER_KCP_NAMESPACE", "kcp-system",
                    "KCP namespace of the Kyma CRs, mappings and kubeconfig Secrets"),
        config.text(C + "MANAGED_BY", "tether",
                    "value of director_connection_managed_by; give each KCP (shard) its own"),
        config.boolean(C + "ONLY_APPLICATION_CONNECTOR", False,
                       "only Kyma CRs enabling application-connector"),
        config.seconds(C + "INTERVAL_SECONDS", 60.0, "time between interval runs", minimum=1,
                       maximum=86_400),
        config.custom(C + "RESYNC_CRON", "17 * * * *", "full resync (crontab, UTC)", _cron),
        config.integer(C + "CONCURRENCY", 8, "runtimes reconciled at once", minimum=1,
                       maximum=64),
        config.seconds(C + "DIRECTOR_TIMEOUT_SECONDS", 10.0, "per Director/OAuth request",
                       minimum=0.1, maximum=300),
        config.seconds(C + "SKR_TIMEOUT_SECONDS", 10.0, "per runtime API request",
                       minimum=0.1, maximum=300),
        config.seconds(C + "BACKOFF_BASE_SECONDS", 5.0, "first per-runtime backoff",
                       minimum=0, maximum=86_400),
        config.seconds(C + "BACKOFF_CAP_SECONDS", 300.0, "longest per-runtime backoff",
                       minimum=0, maximum=86_400),
        config.integer(C + "BREAKER_THRESHOLD", 5,
                       "consecutive unavailability errors that open the breaker", minimum=1,
                       maximum=10_000),
        config.seconds(C + "BREAKER_OPEN_SECONDS", 15.0,
                       "open period, doubled per failed probe", minimum=0.1, maximum=86_400),
        config.seconds(C + "BREAKER_MAX_OPEN_SECONDS", 120.0, "longest open period",
                       minimum=0.1, maximum=86_400),
        config.text(C + "AGENT_SECRET_NAMESPACE", "kyma-system",
                    "namespace of the token Secret in the runtime"),
        config.text(C + "AGENT_SECRET_NAME", "compass-agent-configuration",
                    "name of the token Secret in the runtime ({kyma}: the Kyma CR's name)"),
        config.object_name(C + "LEASE_NAMESPACE", "tether-system", "namespace of the Lease"),
        config.object_name(C + "LEASE_NAME", None, "the Lease's name",
                           shown="tether-compass; tether-compass-INDEX with shards"),
        config.integer(C + "SHARD_COUNT", 1, "instances the Kyma CRs are split across",
                       minimum=1, maximum=1024),
        config.integer(C + "SHARD_INDEX", 0, "this instance's shard (below SHARD_COUNT)",
                       minimum=0, maximum=1023),
        config.host_port(C + "BIND", "0.0.0.0:8080", "HOST:PORT of /healthz, /readyz and /metrics"),
        config.log_level(),
        config.log_format(),
        config.text("TETHER_AUDIT_LOG", "stdout", "stdout or a file path for the audit lines"),
        *skr_clients.OPTIONS,
    ),
    renamed={"TETHER_LEASE_NAMESPACE": C + "LEASE_NAMESPACE", C + "METRICS_PORT": C + "BIND"},
)


def build(v: config.Values) -> Settings:
    """The settings from the options' values, with the checks between them."""
    secret_file = v[C + "OAUTH_CLIENT_SECRET_FILE"]
    if secret_file:
        try:
            secret = pathlib.Path(secret_file).read_text().strip()
        except (OSError, UnicodeDecodeError) as e:
            raise config.SettingError(f"{C}OAUTH_CLIENT_SECRET_FILE: cannot read {secret_file}: "
                                      f"{type(e).__name__}") from None
    elif v[C + "OAUTH_CLIENT_SECRET"]:
        secret = v[C + "OAUTH_CLIENT_SECRET"]
    else:
        raise config.SettingError(f"{C}OAUTH_CLIENT_SECRET: not set (required, or "
                                  f"{C}OAUTH_CLIENT_SECRET_FILE)")
    shard_count, shard_index = v[C + "SHARD_COUNT"], v[C + "SHARD_INDEX"]
    if shard_index >= shard_count:
        raise config.SettingError(f"{C}SHARD_INDEX: {shard_index} must be below "
                                  f"{C}SHARD_COUNT ({shard_count})")
    lease_name = v[C + "LEASE_NAME"] or (
        f"tether-compass-{shard_index}" if shard_count > 1 else "tether-compass")
    return Settings(
        director_url=v[C + "DIRECTOR_URL"],
        token_url=v[C + "OAUTH_TOKEN_URL"],
        client_id=v[C + "OAUTH_CLIENT_ID"],
        client_secret=secret,
        director_ca_file=v[C + "DIRECTOR_CA_FILE"],
        namespace=v["TETHER_KCP_NAMESPACE"],
        managed_by=v[C + "MANAGED_BY"],
        only_app_connector=v[C + "ONLY_APPLICATION_CONNECTOR"],
        interval=v[C + "INTERVAL_SECONDS"],
        resync_cron=v[C + "RESYNC_CRON"],
        concurrency=v[C + "CONCURRENCY"],
        director_timeout=v[C + "DIRECTOR_TIMEOUT_SECONDS"],
        skr_timeout=v[C + "SKR_TIMEOUT_SECONDS"],
        backoff_base=v[C + "BACKOFF_BASE_SECONDS"],
        backoff_cap=v[C + "BACKOFF_CAP_SECONDS"],
        breaker_threshold=v[C + "BREAKER_THRESHOLD"],
        breaker_open_seconds=v[C + "BREAKER_OPEN_SECONDS"],
        breaker_max_open_seconds=v[C + "BREAKER_MAX_OPEN_SECONDS"],
        secret_namespace=v[C + "AGENT_SECRET_NAMESPACE"],
        secret_name=v[C + "AGENT_SECRET_NAME"],
        lease_namespace=v[C + "LEASE_NAMESPACE"],
        lease_name=lease_name,
        shard_index=shard_index,
        shard_count=shard_count,
        bind=v[C + "BIND"],
        log_level=v["TETHER_LOG_LEVEL"],
        log_format=v["TETHER_LOG_FORMAT"],
        audit_destination=v["TETHER_AUDIT_LOG"],
        kubeconfig=v[C + "KUBECONFIG"],
        runtimes=skr_clients.policy(v, v[C + "SKR_TIMEOUT_SECONDS"]),
    )


def from_env(env: Mapping[str, str] | None = None) -> Settings:
    """Raises ``config.SettingError`` naming the first bad variable (``env`` for tests;
    default ``os.environ``)."""
    return build(SPEC.read(env))
