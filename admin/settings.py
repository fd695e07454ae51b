"""Admin settings: one dataclass, built once in the entry point. Every setting is declared
once, as a field with its option (``tether.base.config.setting``); ``SPEC`` collects them
(``tether admin --help``, docs/admin.md). A bad value stops the process with one line."""

from __future__ import annotations

import dataclasses
import os
import re

from admin import fleet, runbooks, sessioncookie
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


_TOKEN = re.compile(r"[A-Za-z0-9!#$%&'*+.^_`|~-]{1,64}")


def _headers(name: str, raw: str) -> tuple[str, ...]:
    """HTTP header names, comma-separated, at least one."""
    found = tuple(h.strip() for h in raw.split(",") if h.strip())
    if not found or len(found) > 8 or not all(_TOKEN.fullmatch(h) for h in found):
        raise config.SettingError(f"{name}: {raw[:100]!r} is not a list of 1 to 8 header names")
    return found


def _names(name: str, raw: str) -> tuple[str, ...]:
    """Certificate common names, comma-separated."""
    found = tuple(n.strip() for n in raw.split(",") if n.strip())
    if len(found) > 32 or not all(len(n) <= 64 and n.isprintable() for n in found):
        raise config.SettingError(f"{name}: at most 32 names of at most 64 characters")
    return found


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
            shown=runbooks.DEFAULT_TEXT,
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
    session_key_file: str | None = setting(
        config.custom(  # None or absent: a key of the process alone (sessions end with it)
            A + "SESSION_KEY_FILE",
            None,
            "keys sealing the session cookies, one a line (openssl rand -base64 32), the "
            "first seals, all open; the same file on every replica (unset or absent: a key "
            "of this process alone, sessions end with it)",
            lambda name, raw: raw or None,
        )
    )
    signout_cache: float = setting(
        config.seconds(
            A + "SIGNOUT_CACHE_SECONDS",
            5.0,
            "how long a replica reuses its read of the sign-out ConfigMap: a sign-out ends "
            "the session on the other replicas within this",
            minimum=1,
            maximum=60,
        )
    )
    max_signouts: int = setting(
        config.integer(
            A + "MAX_SIGNOUTS",
            2000,
            "sign-outs the ConfigMap tether-admin-signouts holds (then a sign-out ends all "
            "sessions of its user)",
            minimum=10,
            maximum=10_000,
        )
    )
    signouts_per_user: int = setting(
        config.integer(
            A + "SIGNOUTS_PER_USER",
            5,
            "sign-outs of one user kept one by one (the next ends all sessions of that user)",
            minimum=1,
            maximum=1000,
        )
    )
    proxy_ca_file: str | None = setting(
        config.file(  # None: no proxy is trusted
            A + "PROXY_CA_FILE",
            None,
            "CA of the authenticating proxy's client certificate: identity headers are "
            "trusted only over TLS with a certificate it issued (unset: from nobody)",
            "certificate",
        )
    )
    proxy_allowed_names: tuple[str, ...] = setting(
        config.custom(
            A + "PROXY_ALLOWED_NAMES",
            (),
            "common names of the proxy's client certificate that are trusted (required "
            "with PROXY_CA_FILE)",
            _names,
        )
    )
    proxy_user_headers: tuple[str, ...] = setting(
        config.custom(
            A + "PROXY_USER_HEADERS",
            ("X-Remote-User",),
            "headers naming the user, the first set counts (oauth2-proxy: X-Forwarded-User)",
            _headers,
        )
    )
    proxy_group_headers: tuple[str, ...] = setting(
        config.custom(
            A + "PROXY_GROUP_HEADERS",
            ("X-Remote-Group",),
            "headers naming the groups, comma-separated (oauth2-proxy: X-Forwarded-Groups)",
            _headers,
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
    renamed={
        A + "MAX_SESSIONS": A + "MAX_SIGNOUTS",  # sessions are cookies now: no store to bound
        A + "SESSIONS_PER_USER": A + "SIGNOUTS_PER_USER",
    },
)


def build(v: config.Values) -> Settings:
    if v[A + "PROXY_CA_FILE"] is not None and not v[A + "PROXY_ALLOWED_NAMES"]:
        raise config.SettingError(
            f"{A}PROXY_CA_FILE is set but {A}PROXY_ALLOWED_NAMES is empty: name the "
            "proxy's client certificate (its CN), or any certificate of that CA would be trusted"
        )
    if v[A + "SESSION_KEY_FILE"] is not None and os.path.exists(v[A + "SESSION_KEY_FILE"]):
        try:
            sessioncookie.read_keys(v[A + "SESSION_KEY_FILE"])
        except (OSError, ValueError) as e:
            raise config.SettingError(f"{A}SESSION_KEY_FILE: {e}") from None
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
