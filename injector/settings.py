"""The configuration injector's settings: one frozen dataclass, built once in the entry
point. Every setting is declared once, as a field with its option (``tether.base.config.setting``);
``SPEC`` collects them (``tether injector --help``, docs/configuration.md, "Injector"). A bad
value stops the process with one line naming it."""

from __future__ import annotations

import dataclasses
import os
import socket
from collections.abc import Mapping

from tether.base import config
from tether.wire import storagebudget

J = "TETHER_INJECTOR_"
L = "TETHER_LISTENER_"  # the listener's quota variables: what a runtime may store
setting = config.setting
MIB = 1024 * 1024
RECORDS_PER_RUNTIME = storagebudget.records_per_runtime()  # the listener's records quota
KEYS_PER_RECORD = 1_000  # an injected record's keys (the listener admits 10,000 in a map)


@dataclasses.dataclass(frozen=True)
class Settings:
    kubeconfig: str | None = setting(config.kcp_kubeconfig(J + "KUBECONFIG", flag="--kubeconfig"))
    namespace: str = setting(
        config.object_name(
            "TETHER_KCP_NAMESPACE",
            "kcp-system",
            "KCP namespace of the Watches (and of the "
            "records of a Watch without spec.storage.namespace)",
        )
    )
    watches_interval: float = setting(
        config.seconds(
            J + "WATCH_LIST_SECONDS",
            30.0,
            "time between reads of the Watch list (a new Watch with inject is followed within it)",
            minimum=1,
            maximum=3600,
        )
    )
    resync_interval: float = setting(
        config.seconds(
            J + "RESYNC_SECONDS",
            300.0,
            "time between periodic passes that re-apply "
            "every runtime whose target differs (a missed event, an edited target)",
            minimum=5,
            maximum=86_400,
        )
    )
    coalesce: float = setting(
        config.seconds(
            J + "COALESCE_SECONDS",
            0.1,
            "least time between two applies to one runtime's target (the first is never delayed)",
            minimum=0,
            maximum=60,
        )
    )
    max_watches: int = setting(
        config.integer(
            J + "MAX_WATCHES",
            32,
            "Watches with inject followed at once (two threads each)",
            minimum=1,
            maximum=256,
        )
    )
    # per runtime: what the listener lets a runtime store (its quota variables, shared)
    max_records: int = setting(
        config.integer(
            J + "MAX_RECORDS",
            RECORDS_PER_RUNTIME,
            "records (tombstones included) of one runtime "
            "and Watch read at a reconcile; more: the runtime is refused",
            minimum=1,
            maximum=10_000_000,
            fallback=L + "QUOTA_RECORDS",
        )
    )
    max_bytes: int = setting(
        config.integer(
            J + "MAX_BYTES",
            storagebudget.RECORD_BYTES_FLOOR,
            "bytes (the records' JSON size, as "
            "the listener counts them) of one runtime and Watch read at a reconcile; more: the "
            "runtime is refused",
            minimum=MIB,
            maximum=1024 * MIB,
            fallback=L + "QUOTA_BYTES",
        )
    )
    max_keys_per_record: int = setting(
        config.integer(
            J + "MAX_KEYS_PER_RECORD",
            KEYS_PER_RECORD,
            "keys of one live record's data under a "
            "Watch with inject; more: its runtime is refused",
            minimum=1,
            maximum=storagebudget.MAX_KEYS_PER_RECORD,
        )
    )
    max_keys: int = setting(
        config.integer(
            J + "MAX_KEYS",
            storagebudget.MAX_KEYS_PER_RECORD,
            "merged keys injected into one "
            "target (one map of one object); more: the runtime is refused",
            minimum=1,
            maximum=1_000_000,
        )
    )
    # fleet-wide: what is held at once, whatever the fleet's size (docs/injector.md, "Memory")
    max_runtimes: int = setting(
        config.integer(
            J + "MAX_RUNTIMES",
            2 * storagebudget.RUNTIMES,
            "runtimes remembered per Watch (a "
            "resourceVersion each); more: the rest are reconciled on their changes only and "
            "tether_injector_bound_reached says so",
            minimum=1,
            maximum=1_000_000,
        )
    )
    read_bytes: int = setting(
        config.integer(
            J + "READ_BYTES",
            None,
            "bytes of records (their JSON size) read into memory at once, "
            "all Watches together; a reconcile waits for its runtime's share",
            shown="2 x MAX_BYTES; at least MAX_BYTES",
            minimum=MIB,
            maximum=16 * 1024 * MIB,
        ),
        derived=2 * storagebudget.RECORD_BYTES_FLOOR,
    )
    kcp_timeout: float = setting(
        config.seconds(
            J + "KCP_TIMEOUT_SECONDS", 10.0, "per KCP API request", minimum=0.5, maximum=300
        )
    )
    lease_namespace: str = setting(
        config.object_name(
            J + "LEASE_NAMESPACE", "tether-system", "namespace of the election Lease"
        )
    )
    lease_name: str = setting(
        config.object_name(J + "LEASE_NAME", "tether-injector", "the election Lease's name")
    )
    identity: str = setting(
        config.text(
            J + "IDENTITY",
            None,
            "this process's name as the Lease holder and in Events",
            shown="HOSTNAME_PID",
        ),
        derived="",
    )
    lease_duration: float = setting(
        config.seconds(
            J + "LEASE_SECONDS", 15.0, "the election Lease's duration", minimum=2, maximum=300
        )
    )
    bind: str = setting(
        config.host_port(J + "BIND", "0.0.0.0:9092", "HOST:PORT of /healthz, /readyz and /metrics")
    )
    log_level: str = setting(config.log_level(J + "LOG_LEVEL", fallback="TETHER_LOG_LEVEL"))
    log_format: str = setting(config.log_format(J + "LOG_FORMAT", fallback="TETHER_LOG_FORMAT"))


SPEC = config.Spec.of(
    Settings,
    part="injector",
    summary="The configuration injector: a Watch's records into its target (KCP).",
)


def build(v: config.Values) -> Settings:
    identity = v[J + "IDENTITY"] or f"{socket.gethostname()}_{os.getpid()}"
    max_bytes, read = v[J + "MAX_BYTES"], v[J + "READ_BYTES"]
    if read is not None and read < max_bytes:
        raise config.SettingError(
            f"{J}READ_BYTES: {read} is below the minimum {max_bytes} "
            f"({J}MAX_BYTES: one runtime's records must fit)"
        )
    return config.fill(
        Settings, v, identity=identity, read_bytes=2 * max_bytes if read is None else read
    )


def from_env(env: Mapping[str, str] | None = None) -> Settings:
    """Raises ``config.SettingError`` naming the first bad variable (``env`` for tests)."""
    return build(SPEC.read(env))
