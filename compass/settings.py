"""Compass settings: one dataclass, built once in the entry point from the environment
(``from_env``). A bad value stops the process with ``config.SettingError`` naming it."""

from __future__ import annotations

import dataclasses
import pathlib
from collections.abc import Mapping

from apscheduler.triggers.cron import CronTrigger

from common import config


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
    metrics_port: int = 8080
    log_level: str = "INFO"
    log_format: str = "json"
    audit_destination: str = "stdout"


def from_env(env: Mapping[str, str] | None = None) -> Settings:
    secret_file = config.optional("TETHER_COMPASS_OAUTH_CLIENT_SECRET_FILE", env=env)
    if secret_file:
        path = pathlib.Path(secret_file)
        if not path.is_file():
            raise config.SettingError(f"TETHER_COMPASS_OAUTH_CLIENT_SECRET_FILE={secret_file} is not a file")
        secret = path.read_text().strip()
    else:
        secret = config.string("TETHER_COMPASS_OAUTH_CLIENT_SECRET", env=env)
    ca = config.optional("TETHER_COMPASS_DIRECTOR_CA_FILE", env=env)
    if ca is not None:
        ca = config.existing_file("TETHER_COMPASS_DIRECTOR_CA_FILE", env=env)
    cron = config.string("TETHER_COMPASS_RESYNC_CRON", "17 * * * *", env=env)
    try:
        CronTrigger.from_crontab(cron)
    except ValueError as e:
        raise config.SettingError(f"TETHER_COMPASS_RESYNC_CRON={cron!r} is not a crontab expression: {e}") from None
    shard_count = config.integer("TETHER_COMPASS_SHARD_COUNT", 1, minimum=1, maximum=1024, env=env)
    shard_index = config.integer("TETHER_COMPASS_SHARD_INDEX", 0, minimum=0, env=env)
    if shard_index >= shard_count:
        raise config.SettingError(
            f"TETHER_COMPASS_SHARD_INDEX={shard_index} must be below TETHER_COMPASS_SHARD_COUNT={shard_count}")
    lease_name = config.string("TETHER_COMPASS_LEASE_NAME", "tether-compass", env=env)
    if shard_count > 1 and config.optional("TETHER_COMPASS_LEASE_NAME", env=env) is None:
        lease_name = f"tether-compass-{shard_index}"  # one Lease (one leader) per shard
    url = config.string("TETHER_COMPASS_DIRECTOR_URL", env=env)
    token_url = config.string("TETHER_COMPASS_OAUTH_TOKEN_URL", env=env)
    for name, value in (("TETHER_COMPASS_DIRECTOR_URL", url), ("TETHER_COMPASS_OAUTH_TOKEN_URL", token_url)):
        if not value.startswith("https://"):
            raise config.SettingError(f"{name}={value} must be an https:// URL")
    return Settings(
        director_url=url,
        token_url=token_url,
        client_id=config.string("TETHER_COMPASS_OAUTH_CLIENT_ID", env=env),
        client_secret=secret,
        director_ca_file=ca,
        namespace=config.string("TETHER_KCP_NAMESPACE", "kcp-system", env=env),
        managed_by=config.string("TETHER_COMPASS_MANAGED_BY", "tether", env=env),
        only_app_connector=config.boolean("TETHER_COMPASS_ONLY_APPLICATION_CONNECTOR", False, env=env),
        interval=config.number("TETHER_COMPASS_INTERVAL_SECONDS", 60.0, minimum=1.0, env=env),
        resync_cron=cron,
        concurrency=config.integer("TETHER_COMPASS_CONCURRENCY", 8, minimum=1, maximum=64, env=env),
        director_timeout=config.number("TETHER_COMPASS_DIRECTOR_TIMEOUT_SECONDS", 10.0, minimum=0.1, env=env),
        skr_timeout=config.number("TETHER_COMPASS_SKR_TIMEOUT_SECONDS", 10.0, minimum=0.1, env=env),
        backoff_base=config.number("TETHER_COMPASS_BACKOFF_BASE_SECONDS", 5.0, minimum=0.0, env=env),
        backoff_cap=config.number("TETHER_COMPASS_BACKOFF_CAP_SECONDS", 300.0, minimum=0.0, env=env),
        breaker_threshold=config.integer("TETHER_COMPASS_BREAKER_THRESHOLD", 5, minimum=1, env=env),
        breaker_open_seconds=config.number("TETHER_COMPASS_BREAKER_OPEN_SECONDS", 15.0, minimum=0.1, env=env),
        breaker_max_open_seconds=config.number("TETHER_COMPASS_BREAKER_MAX_OPEN_SECONDS", 120.0, minimum=0.1, env=env),
        secret_namespace=config.string("TETHER_COMPASS_AGENT_SECRET_NAMESPACE", "kyma-system", env=env),
        secret_name=config.string("TETHER_COMPASS_AGENT_SECRET_NAME", "compass-agent-configuration", env=env),
        lease_namespace=config.string("TETHER_LEASE_NAMESPACE", "tether-system", env=env),
        lease_name=lease_name,
        shard_index=shard_index,
        shard_count=shard_count,
        metrics_port=config.integer("TETHER_COMPASS_METRICS_PORT", 8080, minimum=0, maximum=65535, env=env),
        log_level=config.string("TETHER_LOG_LEVEL", "INFO", env=env),
        log_format=config.string("TETHER_LOG_FORMAT", "json", env=env),
        audit_destination=config.string("TETHER_AUDIT_LOG", "stdout", env=env),
    )
