"""The configuration injector's settings: one frozen dataclass, built once in the entry
point. Every setting is declared once, as a field with its option (``tether.config.setting``);
``SPEC`` collects them (``tether injector --help``, docs/configuration.md, "Injector"). A bad
value stops the process with one line naming it."""

from __future__ import annotations

import dataclasses
import os
import socket
from collections.abc import Mapping

from tether import config

J = "TETHER_INJECTOR_"
setting = config.setting
MIB = 1024 * 1024
# the listener's records quota default (listener.storage.budget.records_per_runtime; a test
# keeps the two equal): a runtime never stores more records of all its Watches together
RECORDS_PER_RUNTIME = 200


@dataclasses.dataclass(frozen=True)
class Settings:
    kubeconfig: str | None = setting(config.kcp_kubeconfig(J + "KUBECONFIG", flag="--kubeconfig"))
    namespace: str = setting(config.object_name(
        "TETHER_KCP_NAMESPACE", "kcp-system", "KCP namespace of the Watches (and of the "
        "records of a Watch without spec.storage.namespace)"))
    watches_interval: float = setting(config.seconds(
        J + "WATCH_LIST_SECONDS", 30.0, "time between reads of the Watch list (a new "
        "Watch with inject is followed within it)", minimum=1, maximum=3600))
    resync_interval: float = setting(config.seconds(
        J + "RESYNC_SECONDS", 300.0, "time between periodic passes that re-apply "
        "every runtime whose target differs (a missed event, an edited target)", minimum=5,
        maximum=86_400))
    coalesce: float = setting(config.seconds(
        J + "COALESCE_SECONDS", 0.1, "least time between two applies to one runtime's target "
        "(the first is never delayed)", minimum=0, maximum=60))
    max_watches: int = setting(config.integer(
        J + "MAX_WATCHES", 32, "Watches with inject followed at once (two threads each)",
        minimum=1, maximum=256))
    max_records: int = setting(config.integer(
        J + "MAX_RECORDS", RECORDS_PER_RUNTIME, "live records of one runtime kept per Watch "
        "(default: the listener's records quota)", minimum=1, maximum=1_000_000))
    max_runtimes: int = setting(config.integer(
        J + "MAX_RUNTIMES", 10_000, "runtimes kept per Watch", minimum=1, maximum=1_000_000))
    max_bytes: int = setting(config.integer(
        J + "MAX_BYTES", 256 * MIB, "bytes of values kept in memory per Watch", minimum=MIB,
        maximum=64 * 1024 * MIB))
    kcp_timeout: float = setting(config.seconds(
        J + "KCP_TIMEOUT_SECONDS", 10.0, "per KCP API request", minimum=0.5, maximum=300))
    lease_namespace: str = setting(config.object_name(J + "LEASE_NAMESPACE", "tether-system",
                                                      "namespace of the election Lease"))
    lease_name: str = setting(config.object_name(J + "LEASE_NAME", "tether-injector",
                                                 "the election Lease's name"))
    identity: str = setting(config.text(
        J + "IDENTITY", None, "this process's name as the Lease holder and in Events",
        shown="HOSTNAME_PID"), derived="")
    lease_duration: float = setting(config.seconds(
        J + "LEASE_SECONDS", 15.0, "the election Lease's duration", minimum=2, maximum=300))
    bind: str = setting(config.host_port(J + "BIND", "0.0.0.0:9092",
                                         "HOST:PORT of /healthz, /readyz and /metrics"))
    log_level: str = setting(config.log_level(J + "LOG_LEVEL", fallback="TETHER_LOG_LEVEL"))
    log_format: str = setting(config.log_format(J + "LOG_FORMAT", fallback="TETHER_LOG_FORMAT"))


SPEC = config.Spec.of(Settings, part="injector",
                      summary="The configuration injector: a Watch's records into its target (KCP).")


def build(v: config.Values) -> Settings:
    identity = v[J + "IDENTITY"] or f"{socket.gethostname()}_{os.getpid()}"
    return config.fill(Settings, v, identity=identity)


def from_env(env: Mapping[str, str] | None = None) -> Settings:
    """Raises ``config.SettingError`` naming the first bad variable (``env`` for tests)."""
    return build(SPEC.read(env))
