"""Admin settings: one dataclass, built once in the entry point. Every setting is declared
once, as a field with its option (``tether.base.config.setting``); ``SPEC`` collects them
(``tether admin --help``, docs/admin.md). A bad value stops the process with one line."""

from __future__ import annotations

import dataclasses

from admin import fleet, runbooks
from tether.base import auditwriter, config

A = "TETHER_ADMIN_"
setting = config.setting
KCP_NAMESPACE = config.object_name(
    "TETHER_KCP_NAMESPACE",
    "kcp-system",
    "KCP namespace of the Kyma CRs, RuntimeEnrollments, records, RuntimeDeliveries and mappings",
)


def _audience(name: str, raw: str) -> str:
    if not raw or len(raw) > 253 or not all(" " < c < "\x7f" and c != "," for c in raw):
        raise config.SettingError(
            f"{name}: {raw!r} is not an audience (printable ASCII, no "
            "space or comma, at most 253 characters)"
        )
    return raw


# the inputs of ``fleet.Thresholds``
THRESHOLDS = (
    config.seconds(
        A + "SILENT_SECONDS",
        300.0,
        "a runtime without heartbeat this long is silent",
        minimum=10,
        maximum=7 * 86_400,
    ),
    config.seconds(
        A + "CERTIFICATE_WARNING_SECONDS",
        86_400.0,
        "a client certificate expiring within this is a problem",
        minimum=0,
        maximum=365 * 86_400,
    ),
    config.number(
        A + "POLLER_SHARE",
        0.5,
        "the webhook path is failing when the poller alone delivered this share "
        "of the last hour's records",
        minimum=0.01,
        maximum=1.0,
    ),
    config.integer(
        A + "POLLER_MIN_RECORDS", 5, "... of at least this many records", minimum=1, maximum=10**6
    ),
    config.integer(
        A + "REFUSALS",
        5,
        "refused records in the last hour that make a runtime 'refusing'",
        minimum=1,
        maximum=10**6,
    ),
)


@dataclasses.dataclass(frozen=True)
class Settings:
    tls_cert_file: str = setting(
        config.file(
            A + "TLS_CERT_FILE", config.REQUIRED, "serving certificate of the pages", "certificate"
        )
    )
    tls_key_file: str = setting(
        config.file(A + "TLS_KEY_FILE", config.REQUIRED, "its private key", "key")
    )
    kubeconfig: str | None = setting(config.kcp_kubeconfig(A + "KUBECONFIG", flag="--kubeconfig"))
    bind: str = setting(
        config.host_port(  # the pages (HTTPS)
            A + "BIND", "0.0.0.0:8443", "HOST:PORT of the pages (HTTPS)"
        )
    )
    ops_bind: str = setting(
        config.host_port(  # /healthz, /readyz, /metrics (plain HTTP)
            A + "OPS_BIND",
            "0.0.0.0:9090",
            "HOST:PORT of /healthz, /readyz and /metrics (plain HTTP)",
        )
    )
    kcp_namespace: str = setting(KCP_NAMESPACE)  # Kyma CRs, enrollments, records, mappings
    heartbeat_namespace: str = setting(config.heartbeat_namespace(), otherwise=KCP_NAMESPACE)
    namespace: str = setting(
        config.object_name(  # Tether's Deployments and leader Leases
            A + "NAMESPACE", "tether-system", "namespace of Tether's Deployments and leader Leases"
        )
    )
    refresh: float = setting(
        config.seconds(
            A + "REFRESH_SECONDS",
            15.0,
            "how often the fleet is listed from the KCP (pages read the last list)",
            minimum=1,
            maximum=3600,
        )
    )
    page_size: int = setting(
        config.integer(A + "PAGE_SIZE", 50, "runtimes per fleet page", minimum=5, maximum=500)
    )
    problem_series: int = setting(
        config.integer(
            A + "PROBLEM_SERIES",
            100,
            "most (runtime, problem) series of tether_fleet_runtime_problem",
            minimum=0,
            maximum=5000,
        )
    )
    runbook_base: str = setting(
        config.https_url(
            A + "RUNBOOK_BASE",
            runbooks.DEFAULT_BASE,
            "where the pages' runbook links point: "
            "BASE/docs/operations.md#ANCHOR (as the alerts' runbook_url base)",
        )
    )
    thresholds: fleet.Thresholds = config.inputs(*THRESHOLDS, default=fleet.Thresholds())
    auth_cache: float = setting(
        config.seconds(
            A + "AUTH_CACHE_SECONDS",
            30.0,
            "how long a TokenReview/SubjectAccessReview answer is reused",
            minimum=0,
            maximum=600,
        )
    )
    session_seconds: float = setting(
        config.seconds(
            A + "SESSION_SECONDS",
            8 * 3600.0,
            "lifetime of a sign-in session (never past the token's own expiry)",
            minimum=60,
            maximum=7 * 86_400,
        )
    )
    token_audience: str = setting(
        config.custom(  # TokenReview spec.audiences
            A + "TOKEN_AUDIENCE",
            "tether-admin",
            "audience a token must be made for (TokenReview "
            "spec.audiences; kubectl create token --audience)",
            _audience,
        )
    )
    max_sessions: int = setting(
        config.integer(
            A + "MAX_SESSIONS",
            2000,
            "sign-in sessions kept (then the oldest ends)",
            minimum=10,
            maximum=100_000,
        )
    )
    sessions_per_user: int = setting(
        config.integer(
            A + "SESSIONS_PER_USER",
            5,
            "sign-in sessions kept per user (then that user's oldest ends, nobody else's)",
            minimum=1,
            maximum=1000,
        )
    )
    reviews_per_minute: float = setting(
        config.number(  # per source (a token bucket)
            A + "REVIEWS_PER_MINUTE",
            10.0,
            "sign-ins and TokenReviews one source address (an "
            "IPv6 /64) may cause a minute; more are answered 429",
            minimum=1,
            maximum=10_000,
        )
    )
    review_sources: int = setting(
        config.integer(  # sources whose buckets are kept
            A + "REVIEW_SOURCES",
            4096,
            "source addresses whose TokenReview budget is remembered",
            minimum=16,
            maximum=1_000_000,
        )
    )
    threads: int = setting(
        config.integer(A + "THREADS", 8, "request threads", minimum=1, maximum=64)
    )
    request_timeout: float = setting(
        config.seconds(
            A + "REQUEST_TIMEOUT_SECONDS", 10.0, "per KCP API request", minimum=0.1, maximum=300
        )
    )
    log_level: str = setting(config.log_level())
    log_format: str = setting(config.log_format())
    audit_destination: str = setting(config.audit_log())
    audit_queue_lines: int = setting(auditwriter.queue_lines(A + "AUDIT_QUEUE_LINES"))


SPEC = config.Spec.of(
    Settings,
    part="admin",
    summary="Admin pages (KCP): the fleet at a glance, for operators with Kubernetes credentials.",
)


def build(v: config.Values) -> Settings:
    return config.fill(
        Settings,
        v,
        thresholds=fleet.Thresholds(
            silent_seconds=v[A + "SILENT_SECONDS"],
            certificate_warning_seconds=v[A + "CERTIFICATE_WARNING_SECONDS"],
            poller_share=v[A + "POLLER_SHARE"],
            poller_min_records=v[A + "POLLER_MIN_RECORDS"],
            refusals=v[A + "REFUSALS"],
        ),
    )
