"""The janitor's settings (``tether janitor``): one frozen dataclass, built once in its entry
point, its options declared as the listener's are (``listener.settings``: the shared ones and
the storage options of ``Storage`` are the listener's own). ``SPEC`` collects them;
``tether janitor --help`` and docs/listener.md list them."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from listener import settings as listener_settings
from tether.base import config

setting = config.setting


def _host_port(bind: str) -> tuple[str, int]:
    host, _, port = bind.rpartition(":")
    return host, int(port)


BIND = config.host_port(
    listener_settings.P + "JANITOR_BIND", "0.0.0.0:9091", "host:port of /healthz, /readyz, /metrics"
)


@dataclasses.dataclass(frozen=True)
class JanitorSettings:
    """``tether janitor``: prunes tombstones and orphaned runtimes (``listener.janitor``)."""

    kubeconfig: str | None = setting(listener_settings.KUBECONFIG)
    namespace: str = setting(listener_settings.NAMESPACE)
    heartbeat_namespace: str = setting(
        listener_settings.HEARTBEAT_NAMESPACE, otherwise=listener_settings.NAMESPACE
    )
    kcp_timeout: float = setting(
        config.seconds(
            listener_settings.P + "KCP_TIMEOUT_SECONDS",
            30.0,
            "timeout of each KCP API call",
            minimum=0.5,
            maximum=300,
        )
    )
    storage: listener_settings.Storage = config.group(
        listener_settings.Storage, default_factory=listener_settings.Storage
    )
    orphan_grace: float = setting(
        config.seconds(
            listener_settings.P + "ORPHAN_GRACE_SECONDS",
            86400.0,
            "how long after a runtime's Kyma CR is gone its records and Lease are removed",
            minimum=1,
            maximum=365 * 86400,
        )
    )
    interval: float = setting(
        config.seconds(
            listener_settings.P + "JANITOR_INTERVAL_SECONDS",
            600.0,
            "time between runs",
            minimum=0.1,
            maximum=86400,
        )
    )
    lease_name: str = setting(
        config.object_name(
            listener_settings.P + "JANITOR_LEASE", "tether-janitor", "the election Lease's name"
        )
    )
    lease_namespace: str = setting(
        config.object_name(  # the election Lease
            listener_settings.P + "JANITOR_LEASE_NAMESPACE",
            None,
            "namespace of the election Lease (the manifests: tether-system)",
            shown=listener_settings.P + "NAMESPACE",
        ),
        otherwise=listener_settings.NAMESPACE,
    )
    lease_duration: float = setting(
        config.seconds(
            listener_settings.P + "JANITOR_LEASE_SECONDS",
            15.0,
            "the election Lease's duration",
            minimum=2,
            maximum=600,
        )
    )
    http_host: str = config.inputs(BIND, default=_host_port(BIND.default)[0])
    http_port: int = _host_port(BIND.default)[1]
    audit_log: str = setting(listener_settings.AUDIT_LOG)
    audit_queue_lines: int = setting(listener_settings.AUDIT_QUEUE_LINES)
    log_level: str = setting(listener_settings.LOG_LEVEL)
    log_format: str = setting(listener_settings.LOG_FORMAT)


SPEC = config.Spec.of(
    JanitorSettings,
    part="janitor",
    summary="The listener's storage janitor (KCP): prunes tombstones and orphaned runtimes.",
)


def build(v: config.Values) -> JanitorSettings:
    host, port = _host_port(v[listener_settings.P + "JANITOR_BIND"])
    return config.fill(JanitorSettings, v, http_host=host, http_port=port)


def from_env(env: Mapping[str, str] | None = None) -> JanitorSettings:
    """The janitor's settings (``env`` for tests; default ``os.environ``)."""
    return build(SPEC.read(env))
