"""Admin settings: one dataclass, built once in the entry point from ``SPEC``
(``tether admin --help``, docs/admin.md). A bad value stops the process with one line."""

from __future__ import annotations

import dataclasses

from admin import fleet
from tether import config


@dataclasses.dataclass(frozen=True)
class Settings:
    tls_cert_file: str
    tls_key_file: str
    bind: str = "0.0.0.0:8443"             # the pages (HTTPS)
    ops_bind: str = "0.0.0.0:9090"         # /healthz, /readyz, /metrics (plain HTTP)
    kcp_namespace: str = "kcp-system"      # Kyma CRs, enrollments, records, mappings
    heartbeat_namespace: str = "kcp-system"  # the listener's heartbeat Leases (unset: kcp_namespace)
    namespace: str = "tether-system"       # Tether's Deployments and leader Leases
    refresh: float = 15.0
    page_size: int = 50
    problem_series: int = 100
    thresholds: fleet.Thresholds = fleet.Thresholds()
    auth_cache: float = 30.0
    session_seconds: float = 8 * 3600.0
    token_audience: str = "tether-admin"   # TokenReview spec.audiences; tokens must carry it
    max_sessions: int = 2000
    reviews_per_minute: float = 10.0        # TokenReviews per source (a token bucket)
    review_sources: int = 4096              # sources whose buckets are kept
    threads: int = 8
    request_timeout: float = 10.0
    log_level: str = "INFO"
    log_format: str = "json"
    audit_destination: str = "stdout"
    kubeconfig: str | None = None


A = "TETHER_ADMIN_"


def _audience(name: str, raw: str) -> str:
    if not raw or len(raw) > 253 or not all(" " < c < "\x7f" and c != "," for c in raw):
        raise config.SettingError(f"{name}: {raw!r} is not an audience (printable ASCII, no "
                                  "space or comma, at most 253 characters)")
    return raw

SPEC = config.Spec(
    part="admin",
    summary="Admin pages (KCP): the fleet at a glance, for operators with Kubernetes credentials.",
    options=(
        config.file(A + "TLS_CERT_FILE", config.REQUIRED, "serving certificate of the pages",
                    "certificate"),
        config.file(A + "TLS_KEY_FILE", config.REQUIRED, "its private key", "key"),
        config.kubeconfig(A + "KUBECONFIG", "kubeconfig of the KCP (unset: $KUBECONFIG, else "
                          "the in-cluster service account)", flag="--kubeconfig"),
        config.host_port(A + "BIND", "0.0.0.0:8443", "HOST:PORT of the pages (HTTPS)"),
        config.host_port(A + "OPS_BIND", "0.0.0.0:9090",
                         "HOST:PORT of /healthz, /readyz and /metrics (plain HTTP)"),
        config.object_name("TETHER_KCP_NAMESPACE", "kcp-system",
                           "KCP namespace of the Kyma CRs, RuntimeEnrollments, records, "
                           "RuntimeDeliveries and mappings"),
        config.object_name("TETHER_HEARTBEAT_NAMESPACE", None,
                           "KCP namespace of the listener's heartbeat Leases (the manifests: "
                           "tether-heartbeats)", shown="TETHER_KCP_NAMESPACE"),
        config.object_name(A + "NAMESPACE", "tether-system",
                           "namespace of Tether's Deployments and leader Leases"),
        config.seconds(A + "REFRESH_SECONDS", 15.0,
                       "how often the fleet is listed from the KCP (pages read the last list)",
                       minimum=1, maximum=3600),
        config.integer(A + "PAGE_SIZE", 50, "runtimes per fleet page", minimum=5, maximum=500),
        config.integer(A + "PROBLEM_SERIES", 100,
                       "most (runtime, problem) series of tether_fleet_runtime_problem",
                       minimum=0, maximum=5000),
        config.seconds(A + "SILENT_SECONDS", 300.0,
                       "a runtime without heartbeat this long is silent", minimum=10,
                       maximum=7 * 86_400),
        config.seconds(A + "CERTIFICATE_WARNING_SECONDS", 86_400.0,
                       "a client certificate expiring within this is a problem", minimum=0,
                       maximum=365 * 86_400),
        config.number(A + "POLLER_SHARE", 0.5,
                      "the webhook path is failing when the poller alone delivered this share "
                      "of the last hour's records", minimum=0.01, maximum=1.0),
        config.integer(A + "POLLER_MIN_RECORDS", 5,
                       "... of at least this many records", minimum=1, maximum=10**6),
        config.integer(A + "REFUSALS", 5,
                       "refused records in the last hour that make a runtime 'refusing'",
                       minimum=1, maximum=10**6),
        config.seconds(A + "AUTH_CACHE_SECONDS", 30.0,
                       "how long a TokenReview/SubjectAccessReview answer is reused",
                       minimum=0, maximum=600),
        config.seconds(A + "SESSION_SECONDS", 8 * 3600.0,
                       "lifetime of a sign-in session (never past the token's own expiry)",
                       minimum=60, maximum=7 * 86_400),
        config.custom(A + "TOKEN_AUDIENCE", "tether-admin",
                      "audience a token must be made for (TokenReview spec.audiences; "
                      "kubectl create token --audience)", _audience),
        config.integer(A + "MAX_SESSIONS", 2000,
                       "sign-in sessions kept (then the oldest ends)", minimum=10,
                       maximum=100_000),
        config.number(A + "REVIEWS_PER_MINUTE", 10.0,
                      "TokenReviews one source address (an IPv6 /64) may cause a minute; "
                      "more are answered 429", minimum=1, maximum=10_000),
        config.integer(A + "REVIEW_SOURCES", 4096,
                       "source addresses whose TokenReview budget is remembered",
                       minimum=16, maximum=1_000_000),
        config.integer(A + "THREADS", 8, "request threads", minimum=1, maximum=64),
        config.seconds(A + "REQUEST_TIMEOUT_SECONDS", 10.0, "per KCP API request",
                       minimum=0.1, maximum=300),
        config.log_level(),
        config.log_format(),
        config.text("TETHER_AUDIT_LOG", "stdout", "stdout or a file path for the audit lines"),
    ),
)


def build(v: config.Values) -> Settings:
    return Settings(
        tls_cert_file=v[A + "TLS_CERT_FILE"], tls_key_file=v[A + "TLS_KEY_FILE"],
        bind=v[A + "BIND"], ops_bind=v[A + "OPS_BIND"],
        kcp_namespace=v["TETHER_KCP_NAMESPACE"], namespace=v[A + "NAMESPACE"],
        heartbeat_namespace=v["TETHER_HEARTBEAT_NAMESPACE"] or v["TETHER_KCP_NAMESPACE"],
        refresh=v[A + "REFRESH_SECONDS"], page_size=v[A + "PAGE_SIZE"],
        problem_series=v[A + "PROBLEM_SERIES"],
        thresholds=fleet.Thresholds(
            silent_seconds=v[A + "SILENT_SECONDS"],
            certificate_warning_seconds=v[A + "CERTIFICATE_WARNING_SECONDS"],
            poller_share=v[A + "POLLER_SHARE"], poller_min_records=v[A + "POLLER_MIN_RECORDS"],
            refusals=v[A + "REFUSALS"]),
        auth_cache=v[A + "AUTH_CACHE_SECONDS"], session_seconds=v[A + "SESSION_SECONDS"],
        token_audience=v[A + "TOKEN_AUDIENCE"], max_sessions=v[A + "MAX_SESSIONS"],
        reviews_per_minute=v[A + "REVIEWS_PER_MINUTE"], review_sources=v[A + "REVIEW_SOURCES"],
        threads=v[A + "THREADS"], request_timeout=v[A + "REQUEST_TIMEOUT_SECONDS"],
        log_level=v["TETHER_LOG_LEVEL"], log_format=v["TETHER_LOG_FORMAT"],
        audit_destination=v["TETHER_AUDIT_LOG"], kubeconfig=v[A + "KUBECONFIG"],
    )
