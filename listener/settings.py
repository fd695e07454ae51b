"""The listener's settings: one frozen dataclass, built once in the entry point.

Every setting is an environment variable (``TETHER_LISTENER_*``); ``docs/listener.md``
lists them with their defaults. A bad value stops the process at start with a
``config.SettingError`` naming the variable.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import os
import re
from collections.abc import Mapping

from common import config

P = "TETHER_LISTENER_"
MIB = 1024 * 1024
# Python objects of a parsed JSON body take at most ~15x its size once objects, arrays and
# keys per object are capped while parsing (listener.validation.parse_json; shapes measured
# in docs/performance.md); the parse budget is reserved at this rate
PARSE_AMPLIFICATION = 16


@dataclasses.dataclass(frozen=True)
class Storage:
    """What one runtime may keep in the KCP and for how long (``listener.quota``,
    ``listener.retention``); the listener and its janitor read the same variables."""

    quota_records: int = 20_000
    quota_bytes: int = 256 * MIB
    quota_cache_seconds: float = 10.0
    tombstone_retention: float = 7 * 86400.0


@dataclasses.dataclass(frozen=True)
class Settings:
    # server
    bind: str = "0.0.0.0:8443"  # plain HTTP (XFCC mode): 127.0.0.1:8443 unless set
    ops_bind: str = "0.0.0.0:9090"  # health, readiness, metrics: never on the data port
    workers: int = 1
    threads: int = 16
    tls_cert_file: str | None = None  # None: plain HTTP (only allowed behind a trusted proxy)
    tls_key_file: str | None = None
    client_ca_file: str = ""
    xfcc_trusted_proxies: tuple[str, ...] = ()  # CIDRs; empty = X-Forwarded-Client-Cert off
    # KCP
    kubeconfig: str | None = None  # None: in-cluster service account
    namespace: str = "kcp-system"
    kcp_timeout: float = 10.0
    retry_after: int = 5
    kyma_cache_seconds: float = 10.0
    heartbeat_interval: float = 30.0
    silent_thresholds: tuple[int, ...] = (60, 300, 900, 3600)
    silent_cache_seconds: float = 15.0
    # limits
    max_body_bytes: int = 3 * MIB
    rate_per_second: float = 200.0
    rate_burst: int = 1000
    max_in_flight_per_runtime: int = 4
    parse_budget_bytes: int = 128 * MIB
    parse_wait: float = 5.0
    # connections (per worker; common.httpworker)
    handshake_timeout: float = 5.0
    head_timeout: float = 10.0
    body_timeout: float = 30.0
    idle_timeout: float = 10.0
    max_connections: int = 1000
    max_connections_per_runtime: int = 64
    refusal_audit_interval: float = 60.0
    write_cache_entries: int = 10_000
    storage: Storage = dataclasses.field(default_factory=Storage)
    # logging
    audit_log: str = "stdout"
    log_level: str = "INFO"
    log_format: str = "json"

    @property
    def tls(self) -> bool:
        return self.tls_cert_file is not None


def _cidrs(name: str, values: tuple[str, ...]) -> tuple[str, ...]:
    for v in values:
        try:
            ipaddress.ip_network(v, strict=False)
        except ValueError:
            raise config.SettingError(f"{name}: {v!r} is not an IP address or CIDR") from None
    return values


def _thresholds(name: str, values: tuple[str, ...]) -> tuple[int, ...]:
    try:
        out = tuple(sorted({int(v) for v in values}))
    except ValueError:
        raise config.SettingError(f"{name}: thresholds must be integers (seconds)") from None
    if not out or out[0] <= 0 or len(out) > 10:
        raise config.SettingError(f"{name}: give 1 to 10 positive thresholds in seconds")
    return out


def _shared(name: str, shared: str, default: str, e: Mapping[str, str]) -> str:
    """The part's own variable, else the one shared by all parts (e.g. TETHER_KCP_NAMESPACE)."""
    return config.optional(name, env=e) or config.string(shared, default, env=e)


def from_env(env: Mapping[str, str] | None = None) -> Settings:
    """Settings from the environment (``env`` for tests; default ``os.environ``)."""
    e = os.environ if env is None else env
    d = Settings()
    cert = config.optional(P + "TLS_CERT_FILE", env=e)
    key = config.optional(P + "TLS_KEY_FILE", env=e)
    if (cert is None) != (key is None):
        raise config.SettingError(f"{P}TLS_CERT_FILE and {P}TLS_KEY_FILE go together")
    for name, path in ((P + "TLS_CERT_FILE", cert), (P + "TLS_KEY_FILE", key)):
        if path is not None and not os.path.isfile(path):
            raise config.SettingError(f"{name}={path} does not exist or is not a file")
    proxies = _cidrs(P + "XFCC_TRUSTED_PROXIES",
                     config.string_list(P + "XFCC_TRUSTED_PROXIES", env=e))
    if cert is None and not proxies:
        raise config.SettingError(
            f"{P}TLS_CERT_FILE is required (plain HTTP only with {P}XFCC_TRUSTED_PROXIES)")
    burst = config.integer(P + "RATE_BURST", d.rate_burst, minimum=1, maximum=1_000_000, env=e)
    level = _shared(P + "LOG_LEVEL", "TETHER_LOG_LEVEL", d.log_level, e).upper()
    if level not in ("DEBUG", "INFO", "WARNING", "ERROR"):
        raise config.SettingError(f"{P}LOG_LEVEL={level!r} is not DEBUG, INFO, WARNING or ERROR")
    fmt = _shared(P + "LOG_FORMAT", "TETHER_LOG_FORMAT", d.log_format, e).lower()
    if fmt not in ("json", "text"):
        raise config.SettingError(f"{P}LOG_FORMAT={fmt!r} is not json or text")
    threads = config.integer(P + "THREADS", d.threads, minimum=1, maximum=256, env=e)
    if config.optional(P + "MAX_IN_FLIGHT", env=e) is not None:
        raise config.SettingError(f"{P}MAX_IN_FLIGHT was renamed {P}MAX_IN_FLIGHT_PER_RUNTIME "
                                  "(requests of one runtime served at once per worker)")
    bind = config.optional(P + "BIND", env=e) or (d.bind if cert else "127.0.0.1:8443")
    max_body = config.integer(P + "MAX_BODY_BYTES", d.max_body_bytes, minimum=MIB + MIB // 2,
                              maximum=64 * MIB, env=e)
    max_conns = config.integer(P + "MAX_CONNECTIONS", d.max_connections, minimum=threads,
                               maximum=100_000, env=e)
    return Settings(
        bind=bind,
        ops_bind=config.string(P + "OPS_BIND", d.ops_bind, env=e),
        workers=config.integer(P + "WORKERS", d.workers, minimum=1, maximum=64, env=e),
        threads=threads,
        tls_cert_file=cert,
        tls_key_file=key,
        client_ca_file=config.existing_file(P + "CLIENT_CA_FILE", env=e),
        xfcc_trusted_proxies=proxies,
        kubeconfig=config.optional(P + "KUBECONFIG", env=e) or config.optional("KUBECONFIG", env=e),
        namespace=_shared(P + "NAMESPACE", "TETHER_KCP_NAMESPACE", d.namespace, e),
        kcp_timeout=config.number(P + "KCP_TIMEOUT_SECONDS", d.kcp_timeout, minimum=0.5,
                                  maximum=120, env=e),
        retry_after=config.integer(P + "RETRY_AFTER_SECONDS", d.retry_after, minimum=1,
                                   maximum=600, env=e),
        kyma_cache_seconds=config.number(P + "KYMA_CACHE_SECONDS", d.kyma_cache_seconds,
                                         minimum=0, maximum=600, env=e),
        heartbeat_interval=config.number(P + "HEARTBEAT_INTERVAL_SECONDS", d.heartbeat_interval,
                                         minimum=0, maximum=3600, env=e),
        silent_thresholds=_thresholds(
            P + "SILENT_THRESHOLDS_SECONDS",
            config.string_list(P + "SILENT_THRESHOLDS_SECONDS",
                               tuple(str(t) for t in d.silent_thresholds), env=e)),
        silent_cache_seconds=config.number(P + "SILENT_CACHE_SECONDS", d.silent_cache_seconds,
                                           minimum=0, maximum=3600, env=e),
        max_body_bytes=max_body,
        rate_per_second=config.number(P + "RATE_PER_SECOND", d.rate_per_second, minimum=0.01,
                                      maximum=1e6, env=e),
        rate_burst=burst,
        max_in_flight_per_runtime=config.integer(
            P + "MAX_IN_FLIGHT_PER_RUNTIME", min(d.max_in_flight_per_runtime, threads),
            minimum=1, maximum=threads, env=e),
        parse_budget_bytes=config.integer(
            P + "PARSE_BUDGET_BYTES", max(d.parse_budget_bytes, max_body * PARSE_AMPLIFICATION),
            minimum=max_body * PARSE_AMPLIFICATION,
            maximum=16 * 1024 * MIB, env=e),
        parse_wait=config.number(P + "PARSE_WAIT_SECONDS", d.parse_wait, minimum=0.1,
                                 maximum=120, env=e),
        handshake_timeout=config.number(P + "HANDSHAKE_TIMEOUT_SECONDS", d.handshake_timeout,
                                        minimum=0.1, maximum=120, env=e),
        head_timeout=config.number(P + "HEAD_TIMEOUT_SECONDS", d.head_timeout, minimum=0.1,
                                   maximum=300, env=e),
        body_timeout=config.number(P + "BODY_TIMEOUT_SECONDS", d.body_timeout, minimum=0.1,
                                   maximum=600, env=e),
        idle_timeout=config.number(P + "IDLE_TIMEOUT_SECONDS", d.idle_timeout, minimum=0.1,
                                   maximum=300, env=e),
        max_connections=max_conns,
        max_connections_per_runtime=config.integer(
            P + "MAX_CONNECTIONS_PER_RUNTIME", min(d.max_connections_per_runtime, max_conns),
            minimum=1, maximum=max_conns, env=e),
        refusal_audit_interval=config.number(P + "REFUSAL_AUDIT_INTERVAL_SECONDS",
                                             d.refusal_audit_interval, minimum=0, maximum=3600,
                                             env=e),
        storage=storage_from_env(e),
        write_cache_entries=config.integer(P + "WRITE_CACHE_ENTRIES", d.write_cache_entries,
                                           minimum=0, maximum=1_000_000, env=e),
        audit_log=_shared(P + "AUDIT_LOG", "TETHER_AUDIT_LOG", d.audit_log, e),
        log_level=level,
        log_format=fmt,
    )


def storage_from_env(e: Mapping[str, str]) -> Storage:
    """The storage quota and the tombstone retention (``TETHER_LISTENER_QUOTA_*``,
    ``TETHER_LISTENER_TOMBSTONE_RETENTION_SECONDS``)."""
    d = Storage()
    return Storage(
        quota_records=config.integer(P + "QUOTA_RECORDS", d.quota_records, minimum=1,
                                     maximum=10_000_000, env=e),
        # a full ConfigMap (1 MiB of binaryData is ~1.4 MiB as a record) must always fit
        quota_bytes=config.integer(P + "QUOTA_BYTES", d.quota_bytes, minimum=2 * MIB,
                                   maximum=1024 * 1024 * MIB, env=e),
        quota_cache_seconds=config.number(P + "QUOTA_CACHE_SECONDS", d.quota_cache_seconds,
                                          minimum=0, maximum=600, env=e),
        tombstone_retention=config.number(P + "TOMBSTONE_RETENTION_SECONDS",
                                          d.tombstone_retention, minimum=1,
                                          maximum=10 * 365 * 86400, env=e),
    )


@dataclasses.dataclass(frozen=True)
class JanitorSettings:
    """``tether janitor``: prunes tombstones and orphaned runtimes (``listener.janitor``)."""

    kubeconfig: str | None = None
    namespace: str = "kcp-system"
    kcp_timeout: float = 30.0
    storage: Storage = dataclasses.field(default_factory=Storage)
    orphan_grace: float = 86400.0
    interval: float = 600.0
    lease_name: str = "tether-listener-janitor"
    lease_duration: float = 15.0
    http_host: str = "0.0.0.0"  # noqa: S104 - probes and scrapes
    http_port: int = 9091
    audit_log: str = "stdout"
    log_level: str = "INFO"
    log_format: str = "json"


def _host_port(name: str, value: str) -> tuple[str, int]:
    host, sep, port = value.rpartition(":")
    if not sep or not host or not port.isascii() or not port.isdigit() \
            or not 0 < int(port) < 65536:
        raise config.SettingError(f"{name}={value!r} is not host:port")
    return host, int(port)


def janitor_from_env(env: Mapping[str, str] | None = None) -> JanitorSettings:
    """The janitor's settings (``env`` for tests; default ``os.environ``)."""
    e = os.environ if env is None else env
    d = JanitorSettings()
    level = _shared(P + "LOG_LEVEL", "TETHER_LOG_LEVEL", d.log_level, e).upper()
    if level not in ("DEBUG", "INFO", "WARNING", "ERROR"):
        raise config.SettingError(f"{P}LOG_LEVEL={level!r} is not DEBUG, INFO, WARNING or ERROR")
    fmt = _shared(P + "LOG_FORMAT", "TETHER_LOG_FORMAT", d.log_format, e).lower()
    if fmt not in ("json", "text"):
        raise config.SettingError(f"{P}LOG_FORMAT={fmt!r} is not json or text")
    name = config.string(P + "JANITOR_LEASE", d.lease_name, env=e)
    if len(name) > 253 or not _DNS_NAME.fullmatch(name):
        raise config.SettingError(f"{P}JANITOR_LEASE={name!r} is not a valid object name")
    host, port = _host_port(P + "JANITOR_BIND", config.string(
        P + "JANITOR_BIND", f"{d.http_host}:{d.http_port}", env=e))
    return JanitorSettings(
        kubeconfig=config.optional(P + "KUBECONFIG", env=e) or config.optional("KUBECONFIG", env=e),
        namespace=_shared(P + "NAMESPACE", "TETHER_KCP_NAMESPACE", d.namespace, e),
        kcp_timeout=config.number(P + "KCP_TIMEOUT_SECONDS", d.kcp_timeout, minimum=0.5,
                                  maximum=300, env=e),
        storage=storage_from_env(e),
        orphan_grace=config.number(P + "ORPHAN_GRACE_SECONDS", d.orphan_grace, minimum=1,
                                   maximum=365 * 86400, env=e),
        interval=config.number(P + "JANITOR_INTERVAL_SECONDS", d.interval, minimum=0.1,
                               maximum=86400, env=e),
        lease_name=name,
        lease_duration=config.number(P + "JANITOR_LEASE_SECONDS", d.lease_duration, minimum=2,
                                     maximum=600, env=e),
        http_host=host,
        http_port=port,
        audit_log=_shared(P + "AUDIT_LOG", "TETHER_AUDIT_LOG", d.audit_log, e),
        log_level=level,
        log_format=fmt,
    )


_DNS_NAME = re.compile(r"[a-z0-9]([-a-z0-9.]*[a-z0-9])?")
