"""Compass settings: one dataclass, built once in the entry point. Every setting is declared
once, as a field with its option (``tether.base.config.setting``: variable, default, bounds,
meaning); ``SPEC`` collects them, ``tether compass --help`` and docs/compass.md list them. A
bad value stops the process with one line naming it."""

from __future__ import annotations

import dataclasses
import pathlib
from collections.abc import Mapping

from apscheduler.triggers.cron import CronTrigger

from tether.base import auditwriter, config
from tether.kube import skr_clients

C = "TETHER_COMPASS_"
setting = config.setting
BACKOFF = config.backoff(C, 5.0, 300.0)


def _cron(name: str, raw: str) -> str:
    try:
        CronTrigger.from_crontab(raw)
    except ValueError as e:
        raise config.SettingError(f"{name}: {raw!r} is not a crontab expression: {e}") from None
    return raw


@dataclasses.dataclass(frozen=True)
class Settings:
    director_url: str = setting(
        config.https_url(  # GraphQL endpoint
            C + "DIRECTOR_URL", config.REQUIRED, "Director GraphQL endpoint"
        )
    )
    token_url: str = setting(
        config.https_url(  # OAuth2 token endpoint
            C + "OAUTH_TOKEN_URL", config.REQUIRED, "OAuth2 token endpoint"
        )
    )
    client_id: str = setting(
        config.text(C + "OAUTH_CLIENT_ID", config.REQUIRED, "OAuth2 client ID")
    )
    client_secret: str = config.inputs(
        config.file(
            C + "OAUTH_CLIENT_SECRET_FILE",
            None,
            "file holding the OAuth2 client secret (preferred to the variable)",
        ),
        config.text(
            C + "OAUTH_CLIENT_SECRET", None, "the OAuth2 client secret (one of the two is required)"
        ),
        repr=False,
    )
    director_ca_file: str | None = setting(
        config.file(  # None: system trust store
            C + "DIRECTOR_CA_FILE",
            None,
            "CA bundle for the Director and the token endpoint (unset: system trust store)",
            "certificate",
        )
    )
    kubeconfig: str | None = setting(  # None: $KUBECONFIG, else in-cluster
        config.kcp_kubeconfig(C + "KUBECONFIG", flag="--kubeconfig")
    )
    namespace: str = setting(
        config.text(  # Kyma CRs, mappings and kubeconfig Secrets
            "TETHER_KCP_NAMESPACE",
            "kcp-system",
            "KCP namespace of the Kyma CRs, mappings and kubeconfig Secrets",
        )
    )
    managed_by: str = setting(
        config.text(  # director_connection_managed_by label value
            C + "MANAGED_BY",
            "tether",
            "value of director_connection_managed_by; give each KCP (shard) its own",
        )
    )
    only_app_connector: bool = setting(
        config.boolean(
            C + "ONLY_APPLICATION_CONNECTOR", False, "only Kyma CRs enabling application-connector"
        )
    )
    read_compass_manager: bool = setting(
        config.boolean(  # compass.legacy; docs/compass.md, "Names"
            C + "READ_COMPASS_MANAGER_MAPPINGS",
            False,
            "also read compass-manager's "
            "CompassManagerMappings (never written) as existing registrations; needs the "
            "compat-compass-manager overlay",
        )
    )
    mode: str = setting(
        config.choice(
            C + "MODE",
            "normal",
            "normal; dry-run: report what would be done, change nothing; "
            "registration-off: adopt and configure existing registrations, register none",
            ("normal", "dry-run", "registration-off"),
        )
    )
    token_lifetime: float = setting(
        config.seconds(
            C + "TOKEN_LIFETIME_SECONDS",
            300.0,
            "the Director's one-time token lifetime: an adopted "
            "agent Secret written longer ago holds an expired token",
            minimum=1,
            maximum=86_400,
        )
    )
    interval: float = setting(
        config.seconds(
            C + "INTERVAL_SECONDS", 60.0, "time between interval runs", minimum=1, maximum=86_400
        )
    )
    resync_cron: str = setting(
        config.custom(C + "RESYNC_CRON", "17 * * * *", "full resync (crontab, UTC)", _cron)
    )
    concurrency: int = setting(
        config.integer(C + "CONCURRENCY", 32, "runtimes reconciled at once", minimum=1, maximum=64)
    )
    director_timeout: float = setting(
        config.seconds(
            C + "DIRECTOR_TIMEOUT_SECONDS",
            10.0,
            "per Director/OAuth request",
            minimum=0.1,
            maximum=300,
        )
    )
    skr_timeout: float = setting(
        config.seconds(
            C + "SKR_TIMEOUT_SECONDS", 10.0, "per runtime API request", minimum=0.1, maximum=300
        )
    )
    backoff_base: float = setting(BACKOFF[0])
    backoff_cap: float = setting(BACKOFF[1])
    breaker_threshold: int = setting(
        config.integer(
            C + "BREAKER_THRESHOLD",
            5,
            "consecutive unavailability errors that open the breaker",
            minimum=1,
            maximum=10_000,
        )
    )
    breaker_open_seconds: float = setting(
        config.seconds(
            C + "BREAKER_OPEN_SECONDS",
            15.0,
            "open period, doubled per failed probe",
            minimum=0.1,
            maximum=86_400,
        )
    )
    breaker_max_open_seconds: float = setting(
        config.seconds(
            C + "BREAKER_MAX_OPEN_SECONDS",
            120.0,
            "longest open period",
            minimum=0.1,
            maximum=86_400,
        )
    )
    secret_namespace: str = setting(
        config.text(
            C + "AGENT_SECRET_NAMESPACE",
            "kyma-system",
            "namespace of the token Secret in the runtime",
        )
    )
    secret_name: str = setting(
        config.text(
            C + "AGENT_SECRET_NAME",
            "compass-agent-configuration",
            "name of the token Secret in the runtime ({kyma}: the Kyma CR's name)",
        )
    )
    legacy_secret_namespaces: tuple[str, ...] = setting(
        config.names(
            C + "AGENT_SECRET_LEGACY_NAMESPACES",
            ("compass-system",),
            "where older runtimes keep the agent Secret, read after AGENT_SECRET_NAMESPACE for the "
            "runtime ID it names (a hint adoption checks, never proof; comma-separated)",
        )
    )
    lease_namespace: str = setting(
        config.object_name(C + "LEASE_NAMESPACE", "tether-system", "namespace of the Lease")
    )
    lease_name: str = setting(
        config.object_name(
            C + "LEASE_NAME",
            None,
            "the Lease's name",
            shown="tether-compass; tether-compass-INDEX with shards",
        ),
        derived="tether-compass",
    )
    shard_count: int = setting(
        config.integer(
            C + "SHARD_COUNT", 1, "instances the Kyma CRs are split across", minimum=1, maximum=1024
        )
    )
    shard_index: int = setting(
        config.integer(  # this instance's shard of the Kyma CRs
            C + "SHARD_INDEX",
            0,
            "this instance's shard (below SHARD_COUNT)",
            minimum=0,
            maximum=1023,
        )
    )
    bind: str = setting(
        config.host_port(C + "BIND", "0.0.0.0:8080", "HOST:PORT of /healthz, /readyz and /metrics")
    )
    log_level: str = setting(config.log_level())
    log_format: str = setting(config.log_format())
    audit_destination: str = setting(config.audit_log())
    audit_queue_lines: int = setting(auditwriter.queue_lines(C + "AUDIT_QUEUE_LINES"))
    runtimes: skr_clients.Policy = config.inputs(
        *skr_clients.OPTIONS, default_factory=skr_clients.Policy
    )


SPEC = config.Spec.of(
    Settings,
    part="compass",
    summary="Compass registration scheduler (KCP).",
    renamed={"TETHER_LEASE_NAMESPACE": C + "LEASE_NAMESPACE", C + "METRICS_PORT": C + "BIND"},
)


def _secret(v: config.Values) -> str:
    secret_file = v[C + "OAUTH_CLIENT_SECRET_FILE"]
    if secret_file:
        try:
            return pathlib.Path(secret_file).read_text().strip()
        except (OSError, UnicodeDecodeError) as e:
            raise config.SettingError(
                f"{C}OAUTH_CLIENT_SECRET_FILE: cannot read {secret_file}: {type(e).__name__}"
            ) from None
    if v[C + "OAUTH_CLIENT_SECRET"]:
        return str(v[C + "OAUTH_CLIENT_SECRET"])
    raise config.SettingError(
        f"{C}OAUTH_CLIENT_SECRET: not set (required, or {C}OAUTH_CLIENT_SECRET_FILE)"
    )


def build(v: config.Values) -> Settings:
    """The settings from the options' values, with the checks between them."""
    secret = _secret(v)
    shard_count, shard_index = v[C + "SHARD_COUNT"], v[C + "SHARD_INDEX"]
    if shard_index >= shard_count:
        raise config.SettingError(
            f"{C}SHARD_INDEX: {shard_index} must be below {C}SHARD_COUNT ({shard_count})"
        )
    lease_name = v[C + "LEASE_NAME"] or (
        f"tether-compass-{shard_index}" if shard_count > 1 else "tether-compass"
    )
    return config.fill(
        Settings,
        v,
        client_secret=secret,
        lease_name=lease_name,
        runtimes=skr_clients.policy(v, v[C + "SKR_TIMEOUT_SECONDS"]),
    )


def from_env(env: Mapping[str, str] | None = None) -> Settings:
    """Raises ``config.SettingError`` naming the first bad variable (``env`` for tests;
    default ``os.environ``)."""
    return build(SPEC.read(env))
