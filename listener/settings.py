"""The listener's settings: one frozen dataclass, built once in the entry point.

Every setting is declared once, as a field of ``Settings`` (the janitor's in
``listener.janitor.settings``; both hold the storage options of ``Storage``) with its option
(``tether.base.config.setting``): environment variable (``TETHER_LISTENER_*``), default, bounds and
meaning. ``SPEC`` collects them; ``tether listener --help`` and docs/listener.md list them. A
bad value stops the process at start with one line naming the variable
(``tether.base.config.load``).
"""

from __future__ import annotations

import dataclasses
import ipaddress
from collections.abc import Mapping

from tether.base import auditwriter, config, numbers
from tether.wire import storagebudget

P = "TETHER_LISTENER_"
MIB = 1024 * 1024
# Python objects of a parsed JSON body take at most ~15x its size once objects, arrays and
# keys per object are capped while parsing (listener.edge.validation.parse_json; shapes measured
# in docs/performance.md); the parse budget is reserved at this rate
PARSE_AMPLIFICATION = 16
setting = config.setting


def _cidrs(name: str, raw: str) -> tuple[str, ...]:
    values = tuple(x.strip() for x in raw.split(",") if x.strip())
    for v in values:
        try:
            ipaddress.ip_network(v, strict=False)
        except ValueError:
            raise config.SettingError(f"{name}: {v!r} is not an IP address or CIDR") from None
    return values


def _thresholds(name: str, raw: str) -> tuple[int, ...]:
    values = [x.strip() for x in raw.split(",") if x.strip()]
    out = tuple(sorted({n for n in (numbers.ascii_int(v, 9) for v in values) if n is not None}))
    if len(out) != len(set(values)) or not out or out[0] <= 0 or len(out) > 10:
        raise config.SettingError(f"{name}: {raw!r}: give 1 to 10 positive integers (seconds)")
    return out


def _shared(name: str, shared: str, default: str, meaning: str) -> config.Option:
    """The part's own variable, else the one all parts share (e.g. TETHER_KCP_NAMESPACE)."""
    return config.text(name, default, meaning, fallback=shared)


# read by the listener and its janitor
KUBECONFIG = config.kcp_kubeconfig(P + "KUBECONFIG")
NAMESPACE = _shared(
    P + "NAMESPACE",
    "TETHER_KCP_NAMESPACE",
    "kcp-system",
    "KCP namespace of the Kyma CRs and the RuntimeConfigMaps",
)
HEARTBEAT_NAMESPACE = config.heartbeat_namespace(
    P + "HEARTBEAT_NAMESPACE",
    "KCP namespace of the per-runtime heartbeat Leases (the "
    "manifests: tether-heartbeats, a namespace holding nothing else)",
    fallback="TETHER_HEARTBEAT_NAMESPACE",
    shown=P + "NAMESPACE",
)
AUDIT_LOG = _shared(
    P + "AUDIT_LOG", "TETHER_AUDIT_LOG", "stdout", "stdout or a file path for the audit JSON lines"
)
AUDIT_QUEUE_LINES = auditwriter.queue_lines(P + "AUDIT_QUEUE_LINES")
LOG_LEVEL = config.log_level(P + "LOG_LEVEL", fallback="TETHER_LOG_LEVEL")
LOG_FORMAT = config.log_format(P + "LOG_FORMAT", fallback="TETHER_LOG_FORMAT")


@dataclasses.dataclass(frozen=True)
class Storage:
    """What one runtime may keep in the KCP and for how long (``listener.storage.quota``,
    ``listener.storage.rules``); the listener and its janitor read the same variables."""

    # derived from the KCP storage budget (listener/storage/storagebudget.py, docs/performance.md)
    quota_records: int = setting(
        config.integer(
            P + "QUOTA_RECORDS",
            storagebudget.records_per_runtime(),
            "records (tombstones of stored keys "
            "included) one runtime may keep in the KCP (default: the KCP budget's share of one of "
            "5,000 runtimes)",
            minimum=1,
            maximum=10_000_000,
        )
    )
    # a full ConfigMap (1 MiB of binaryData is ~1.4 MiB as a record) must always fit
    quota_bytes: int = setting(
        config.integer(
            P + "QUOTA_BYTES",
            storagebudget.RECORD_BYTES_FLOOR,
            "bytes (the records' JSON size) one runtime "
            "may keep (default: the least in which one maximal ConfigMap fits)",
            minimum=2 * MIB,
            maximum=1024 * 1024 * MIB,
        )
    )
    quota_cache_seconds: float = setting(
        config.seconds(
            P + "QUOTA_CACHE_SECONDS",
            10.0,
            "how long a worker trusts its list of a runtime's usage",
            minimum=0,
            maximum=600,
        )
    )
    tombstone_retention: float = setting(
        config.seconds(
            P + "TOMBSTONE_RETENTION_SECONDS",
            7 * 86400.0,
            "tombstones are pruned after it (listener and janitor must agree)",
            minimum=1,
            maximum=10 * 365 * 86400,
        )
    )
    quota_writers: int = setting(
        config.integer(
            P + "QUOTA_WRITERS",
            1,
            "listener worker processes that may write one runtime's records "
            "(replicas x workers); above 1 every write that grows a runtime's usage "
            "counts it afresh "
            "first, so the quota is exceeded by at most one write per other worker",
            minimum=1,
            maximum=10_000,
        )
    )
    unbacked_tombstones: int = setting(
        config.integer(
            P + "UNBACKED_TOMBSTONES",
            storagebudget.unbacked_per_runtime(),
            "tombstones of keys never "
            "stored one runtime keeps apart from its quota, the oldest evicted first (default: a "
            "tenth of the records quota's default)",
            minimum=1,
            maximum=100_000,
        )
    )


@dataclasses.dataclass(frozen=True)
class Settings:
    # server
    bind: str = setting(
        config.host_port(
            P + "BIND",
            None,
            "address:port of the runtime API",
            shown="0.0.0.0:8443; 127.0.0.1:8443 in plain HTTP (XFCC mode)",
        ),
        derived="0.0.0.0:8443",
    )
    ops_bind: str = setting(
        config.host_port(  # health, readiness, metrics: never the data port
            P + "OPS_BIND",
            "0.0.0.0:9090",
            "operations port (plain HTTP): /healthz, /readyz, /metrics",
        )
    )
    workers: int = setting(
        config.integer(P + "WORKERS", 1, "gunicorn worker processes", minimum=1, maximum=64)
    )
    threads: int = setting(
        config.integer(P + "THREADS", 16, "threads per worker", minimum=1, maximum=256)
    )
    graceful_timeout: int = setting(
        config.integer(
            P + "GRACEFUL_TIMEOUT_SECONDS",
            25,
            "at shutdown, how long a worker finishes the requests "
            "it holds and flushes its counts before it is killed",
            minimum=1,
            maximum=300,
            duration=True,
        )
    )
    tls_cert_file: str | None = setting(
        config.file(  # None: plain HTTP (behind a trusted proxy)
            P + "TLS_CERT_FILE",
            None,
            "serving certificate (PEM); required unless XFCC_TRUSTED_PROXIES is set",
            "certificate",
        )
    )
    tls_key_file: str | None = setting(
        config.file(P + "TLS_KEY_FILE", None, "serving certificate's key (PEM)", "key")
    )
    client_ca_file: str = setting(
        config.file(
            P + "CLIENT_CA_FILE",
            config.REQUIRED,
            "CA bundle that issued the runtime client certificates (PEM)",
            "certificate",
        ),
        default="",
    )
    xfcc_trusted_proxies: tuple[str, ...] = setting(
        config.custom(
            P + "XFCC_TRUSTED_PROXIES",
            (),
            "comma-separated IPs/CIDRs whose X-Forwarded-Client-Cert is trusted (empty: off)",
            _cidrs,
        )
    )
    # KCP
    kubeconfig: str | None = setting(KUBECONFIG)  # None: in-cluster service account
    namespace: str = setting(NAMESPACE)
    heartbeat_namespace: str = setting(HEARTBEAT_NAMESPACE, otherwise=NAMESPACE)
    storage_namespaces: tuple[str, ...] = setting(
        config.names(
            P + "STORAGE_NAMESPACES",
            (),
            "the only KCP namespaces records are written in, besides "
            "NAMESPACE (a Watch's spec.storage.namespace elsewhere: its records are answered 503; "
            "empty: wherever a Watch stores and the KCP admits, the manifests: Namespaces labelled "
            "tether.kyma-project.io/record-storage=true)",
        )
    )
    kcp_timeout: float = setting(
        config.seconds(
            P + "KCP_TIMEOUT_SECONDS",
            10.0,
            "timeout of each KCP API call",
            minimum=0.5,
            maximum=120,
        )
    )
    retry_after: int = setting(
        config.integer(
            P + "RETRY_AFTER_SECONDS",
            5,
            "Retry-After of 503 answers (a KCP failure's spread over this to twice this)",
            minimum=1,
            maximum=600,
            duration=True,
        )
    )
    kyma_cache_seconds: float = setting(
        config.seconds(
            P + "KYMA_CACHE_SECONDS",
            10.0,
            "how long a Kyma CR lookup (also 'unknown') is cached",
            minimum=0,
            maximum=600,
        )
    )
    outage_cache_seconds: float = setting(
        config.seconds(
            P + "OUTAGE_CACHE_SECONDS",
            900.0,
            "while the KCP API is unreachable, a runtime's Kyma "
            "CR and state summary last read this long ago still answer its heartbeats (0: off; "
            "docs/operations.md)",
            minimum=0,
            maximum=3600,
        )
    )
    watch_cache_seconds: float = setting(
        config.seconds(
            P + "WATCH_CACHE_SECONDS",
            5.0,
            "how long the list of Watches (what records are admitted) is cached per worker",
            minimum=0,
            maximum=600,
        )
    )
    heartbeat_interval: float = setting(
        config.seconds(
            P + "HEARTBEAT_INTERVAL_SECONDS",
            30.0,
            "a replica writes a runtime's heartbeat Lease at most this often",
            minimum=0,
            maximum=3600,
        )
    )
    view: bool = setting(
        config.boolean(
            P + "VIEW",
            True,
            "one process per pod list+watches the Kyma CRs, heartbeat Leases, state "
            "summaries and records (metadata) and answers the workers over a Unix socket (a "
            "settled runtime's heartbeat reads nothing from the KCP); off: every worker reads "
            "the KCP itself",
        )
    )
    view_timeout: float = setting(
        config.seconds(
            P + "VIEW_TIMEOUT_SECONDS",
            0.5,
            "a worker's wait for the pod's view before it reads the KCP itself",
            minimum=0.01,
            maximum=10,
        )
    )
    view_max_objects: int = setting(
        config.integer(
            P + "VIEW_MAX_OBJECTS",
            60_000,
            "objects of each kind the view holds (more: that kind is read from the KCP directly)",
            minimum=1,
            maximum=1_000_000,
        )
    )
    view_max_bytes: int = setting(
        config.integer(
            P + "VIEW_MAX_BYTES",
            256 * MIB,
            "bytes the view holds in all (its kept fields' JSON "
            "size; a quarter each for Kyma CRs and Leases, half for state summaries)",
            minimum=MIB,
            maximum=16 * 1024 * MIB,
        )
    )
    view_max_records: int = setting(
        config.integer(
            P + "VIEW_MAX_RECORDS",
            100_000,
            "records under Watches the view holds as digest items, over all runtimes (more: "
            "per-Watch summaries and digests are listed from the KCP)",
            minimum=1,
            maximum=10_000_000,
        )
    )
    view_max_record_bytes: int = setting(
        config.integer(
            P + "VIEW_MAX_RECORD_BYTES",
            64 * MIB,
            "bytes the view holds of records' digest items (their JSON size, ~260 a record; "
            "its heap holds ~600)",
            minimum=MIB,
            maximum=16 * 1024 * MIB,
        )
    )
    silent_thresholds: tuple[int, ...] = setting(
        config.custom(
            P + "SILENT_THRESHOLDS_SECONDS",
            (60, 300, 900, 3600),
            "thresholds of tether_listener_runtimes_silent (1 to 10 values)",
            _thresholds,
            duration=True,
        )
    )
    silent_cache_seconds: float = setting(
        config.seconds(
            P + "SILENT_CACHE_SECONDS",
            15.0,
            "how long the Lease list behind that metric is cached",
            minimum=0,
            maximum=3600,
        )
    )
    # limits
    max_body_bytes: int = setting(
        config.integer(
            P + "MAX_BODY_BYTES",
            3 * MIB,
            "body cap (a full 1 MiB ConfigMap always fits)",
            minimum=MIB + MIB // 2,
            maximum=64 * MIB,
        )
    )
    rate_per_second: float = setting(
        config.number(
            P + "RATE_PER_SECOND",
            200.0,
            "per-runtime token refill: records (POST) or requests (GET) per second",
            minimum=0.01,
            maximum=1e6,
        )
    )
    rate_burst: int = setting(
        config.integer(
            P + "RATE_BURST", 1000, "per-runtime bucket size", minimum=1, maximum=1_000_000
        )
    )
    max_in_flight_per_runtime: int = setting(
        config.integer(
            P + "MAX_IN_FLIGHT_PER_RUNTIME",
            None,
            "threads one runtime may hold in a worker at once",
            minimum=1,
            shown="min(4, THREADS); at most THREADS",
        ),
        derived=4,
    )
    parse_budget_bytes: int = setting(
        config.integer(
            P + "PARSE_BUDGET_BYTES",
            None,
            "memory reserved for parsing bodies per worker (16 x each body)",
            maximum=16 * 1024 * MIB,
            shown="max(128 MiB, 16 x MAX_BODY_BYTES); at least 16 x MAX_BODY_BYTES",
        ),
        derived=128 * MIB,
    )
    parse_wait: float = setting(
        config.seconds(
            P + "PARSE_WAIT_SECONDS",
            5.0,
            "how long a body waits for the parse budget before 503",
            minimum=0.1,
            maximum=120,
        )
    )
    # connections (per worker; tether.http.httpworker)
    handshake_timeout: float = setting(
        config.seconds(
            P + "HANDSHAKE_TIMEOUT_SECONDS",
            5.0,
            "a TLS handshake completes within this time after accept",
            minimum=0.1,
            maximum=120,
        )
    )
    head_timeout: float = setting(
        config.seconds(
            P + "HEAD_TIMEOUT_SECONDS",
            10.0,
            "a request head arrives within this time",
            minimum=0.1,
            maximum=300,
        )
    )
    body_timeout: float = setting(
        config.seconds(
            P + "BODY_TIMEOUT_SECONDS",
            30.0,
            "all reads of one request's body (408 after it)",
            minimum=0.1,
            maximum=600,
        )
    )
    idle_timeout: float = setting(
        config.seconds(
            P + "IDLE_TIMEOUT_SECONDS",
            10.0,
            "one read or write that makes no progress",
            minimum=0.1,
            maximum=300,
        )
    )
    max_connections: int = setting(
        config.integer(
            P + "MAX_CONNECTIONS",
            1000,
            "connections per worker (at least THREADS)",
            minimum=1,
            maximum=100_000,
        )
    )
    max_connections_per_runtime: int = setting(
        config.integer(
            P + "MAX_CONNECTIONS_PER_RUNTIME",
            None,
            "connections one runtime may hold per worker",
            minimum=1,
            shown="min(64, MAX_CONNECTIONS); at most MAX_CONNECTIONS",
        ),
        derived=64,
    )
    refusal_audit_interval: float = setting(
        config.seconds(
            P + "REFUSAL_AUDIT_INTERVAL_SECONDS",
            60.0,
            "connection refusals are audited once per reason and interval (0: a line each)",
            minimum=0,
            maximum=3600,
        )
    )
    write_cache_entries: int = setting(
        config.integer(
            P + "WRITE_CACHE_ENTRIES",
            10_000,
            "objects per worker whose last seen version is remembered (0: off)",
            minimum=0,
            maximum=1_000_000,
        )
    )
    persist_concurrency: int = setting(
        config.integer(
            P + "PERSIST_CONCURRENCY",
            8,
            "records of one request persisted at once (different "
            "keys; a key's records in order), and the extra threads per worker (1: one after "
            "another)",
            minimum=1,
            maximum=64,
        )
    )
    delivery_flush_seconds: float = setting(
        config.seconds(
            P + "DELIVERY_FLUSH_SECONDS",
            15.0,
            "a worker merges a runtime's delivery counts into "
            "its RuntimeDelivery at most this often (0: after every request)",
            minimum=0,
            maximum=3600,
        )
    )
    storage: Storage = config.group(Storage, default_factory=Storage)
    # logging
    audit_log: str = setting(AUDIT_LOG)
    audit_queue_lines: int = setting(AUDIT_QUEUE_LINES)
    log_level: str = setting(LOG_LEVEL)
    log_format: str = setting(LOG_FORMAT)

    @property
    def tls(self) -> bool:
        return self.tls_cert_file is not None


SPEC = config.Spec.of(
    Settings,
    part="listener",
    summary="Change listener (KCP): authenticates runtimes, persists their change records.",
    renamed={
        P + "MAX_IN_FLIGHT": P + "MAX_IN_FLIGHT_PER_RUNTIME",
        P + "SILENT_THRESHOLDS": P + "SILENT_THRESHOLDS_SECONDS",
    },
    pairs=((P + "TLS_CERT_FILE", P + "TLS_KEY_FILE"),),
)


def _at_most(name: str, value: int, limit: int, what: str) -> int:
    if value > limit:
        raise config.SettingError(f"{name}: {value} is above the maximum {limit} ({what})")
    return value


def build(v: config.Values) -> Settings:
    """The settings from the options' values, with the checks between them."""
    d = Settings()
    cert, key = v[P + "TLS_CERT_FILE"], v[P + "TLS_KEY_FILE"]
    if (cert is None) != (key is None):
        raise config.SettingError(
            f"{P}TLS_KEY_FILE: {P}TLS_CERT_FILE and {P}TLS_KEY_FILE go together"
        )
    if cert is None and not v[P + "XFCC_TRUSTED_PROXIES"]:
        raise config.SettingError(
            f"{P}TLS_CERT_FILE: not set; it is required (plain HTTP only with "
            f"{P}XFCC_TRUSTED_PROXIES)"
        )
    threads = v[P + "THREADS"]
    max_body = v[P + "MAX_BODY_BYTES"]
    max_conns = v[P + "MAX_CONNECTIONS"]
    if max_conns < threads:
        raise config.SettingError(
            f"{P}MAX_CONNECTIONS: {max_conns} is below the minimum {threads} ({P}THREADS)"
        )
    in_flight = v[P + "MAX_IN_FLIGHT_PER_RUNTIME"]
    budget = v[P + "PARSE_BUDGET_BYTES"]
    if budget is not None and budget < max_body * PARSE_AMPLIFICATION:
        raise config.SettingError(
            f"{P}PARSE_BUDGET_BYTES: {budget} is below the minimum "
            f"{max_body * PARSE_AMPLIFICATION} (16 x {P}MAX_BODY_BYTES)"
        )
    per_runtime = v[P + "MAX_CONNECTIONS_PER_RUNTIME"]
    return config.fill(
        Settings,
        v,
        bind=v[P + "BIND"] or (d.bind if cert else "127.0.0.1:8443"),
        max_in_flight_per_runtime=min(d.max_in_flight_per_runtime, threads)
        if in_flight is None
        else _at_most(P + "MAX_IN_FLIGHT_PER_RUNTIME", in_flight, threads, f"{P}THREADS"),
        parse_budget_bytes=max(d.parse_budget_bytes, max_body * PARSE_AMPLIFICATION)
        if budget is None
        else budget,
        max_connections_per_runtime=min(d.max_connections_per_runtime, max_conns)
        if per_runtime is None
        else _at_most(
            P + "MAX_CONNECTIONS_PER_RUNTIME", per_runtime, max_conns, f"{P}MAX_CONNECTIONS"
        ),
    )


def from_env(env: Mapping[str, str] | None = None) -> Settings:
    """Settings from the environment (``env`` for tests; default ``os.environ``). Files are
    only checked to exist here (their content: ``SPEC.check_files``)."""
    return build(SPEC.read(env))


def storage(v: config.Values) -> Storage:
    """The storage quota and the tombstone retention (``Storage``)."""
    return config.fill(Storage, v)
