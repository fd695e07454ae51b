"""The delivery canary's settings: one frozen dataclass, built once in the entry point. Every
setting is declared once, as a field with its option (``tether.base.config.setting``);
``SPEC`` collects them (``tether canary --help``, docs/canary.md, docs/configuration.md). A bad
value stops the process with one line naming it. ``TETHER_CANARY_RUNTIME`` empty (the
default): the process runs, leads, and probes nothing (``enabled`` is false)."""

from __future__ import annotations

import dataclasses
import os
import re
import socket
from collections.abc import Mapping

from tether.base import config, parsers
from tether.kube import skr_clients

C = "TETHER_CANARY_"
setting = config.setting
# a label key (an optional DNS-subdomain prefix and a name) and a label value
_LABEL_NAME = r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?"
_LABEL_KEY = re.compile(rf"^([a-z0-9]([-a-z0-9.]{{0,251}}[a-z0-9])?/)?{_LABEL_NAME}$")
_LABEL_VALUE = re.compile(rf"^({_LABEL_NAME})?$")
_DATA_KEY = re.compile(r"^[-._a-zA-Z0-9]{1,253}$")  # a ConfigMap data key


def label(name: str, raw: str) -> tuple[str, str]:
    """``KEY=VALUE``: the label the probe's Watch selects the canary ConfigMap by."""
    key, sep, value = raw.partition("=")
    if not sep or not _LABEL_KEY.match(key) or not _LABEL_VALUE.match(value):
        raise config.SettingError(f"{name}: {raw!r} is not KEY=VALUE (a label key and value)")
    return key, value


def runtime(name: str, raw: str) -> str:
    """A runtime ID, or empty: no probe."""
    return parsers.runtime_id(name, raw) if raw else ""


def data_key(name: str, raw: str) -> str:
    if not _DATA_KEY.match(raw):
        raise config.SettingError(f"{name}: {raw!r} is not a ConfigMap data key")
    return raw


@dataclasses.dataclass(frozen=True)
class Settings:
    kubeconfig: str | None = setting(config.kcp_kubeconfig(C + "KUBECONFIG", flag="--kubeconfig"))
    kcp_namespace: str = setting(
        config.object_name(
            "TETHER_KCP_NAMESPACE",
            "kcp-system",
            "KCP namespace of the Kyma CRs and the Watches (and of the records of a Watch "
            "without spec.storage.namespace)",
        )
    )
    runtime: str = setting(
        config.custom(
            C + "RUNTIME",
            "",
            "runtime ID of the probe runtime (its Kyma CR's kyma-project.io/runtime-id); "
            "empty: no probe",
            runtime,
        )
    )
    watch: str = setting(
        config.object_name(
            C + "WATCH",
            "configuration",
            "the Watch that selects the canary ConfigMap in the probe runtime (where its "
            "records are stored, and its inject target if it has one)",
        )
    )
    namespace: str = setting(
        config.object_name(
            C + "NAMESPACE", "default", "namespace of the canary ConfigMap in the probe runtime"
        )
    )
    name: str = setting(
        config.object_name(C + "NAME", "tether-canary", "name of the canary ConfigMap")
    )
    label: tuple[str, str] = setting(
        config.custom(
            C + "LABEL",
            ("tether.kyma-project.io/configuration", "true"),
            "KEY=VALUE: the label the Watch selects the canary ConfigMap by",
            label,
            shown="tether.kyma-project.io/configuration=true",
        )
    )
    key: str = setting(
        config.custom(
            C + "KEY",
            "tether-canary",
            "the canary ConfigMap's data key that carries the probe's nonce (and the key "
            "injected into the target, where the Watch has inject)",
            data_key,
        )
    )
    injected: bool = setting(
        config.boolean(
            C + "INJECTED",
            True,
            "also measure to the injector's target CR when the Watch has inject",
        )
    )
    interval: float = setting(
        config.seconds(C + "INTERVAL_SECONDS", 60.0, "time between probes", minimum=5, maximum=3600)
    )
    timeout: float = setting(
        config.seconds(
            C + "TIMEOUT_SECONDS",
            45.0,
            "how long a probe waits for each stage after its write (below the interval)",
            minimum=1,
            maximum=3600,
        )
    )
    poll: float = setting(
        config.seconds(
            C + "POLL_SECONDS",
            0.5,
            "time between reads while a probe waits (the resolution of its measurement)",
            minimum=0.05,
            maximum=30,
        )
    )
    kcp_timeout: float = setting(
        config.seconds(
            C + "KCP_TIMEOUT_SECONDS", 10.0, "per KCP API request", minimum=0.5, maximum=300
        )
    )
    skr_timeout: float = setting(
        config.seconds(
            C + "SKR_TIMEOUT_SECONDS",
            10.0,
            "per call into the probe runtime (wall clock)",
            minimum=0.5,
            maximum=300,
        )
    )
    lease_namespace: str = setting(
        config.object_name(
            C + "LEASE_NAMESPACE", "tether-system", "namespace of the election Lease"
        )
    )
    lease_name: str = setting(
        config.object_name(C + "LEASE_NAME", "tether-canary", "the election Lease's name")
    )
    identity: str = setting(
        config.text(
            C + "IDENTITY", None, "this process's name as the Lease holder", shown="HOSTNAME_PID"
        ),
        derived="",
    )
    lease_duration: float = setting(
        config.seconds(
            C + "LEASE_SECONDS", 15.0, "the election Lease's duration", minimum=2, maximum=300
        )
    )
    bind: str = setting(
        config.host_port(C + "BIND", "0.0.0.0:9093", "HOST:PORT of /healthz, /readyz and /metrics")
    )
    log_level: str = setting(config.log_level(C + "LOG_LEVEL", fallback="TETHER_LOG_LEVEL"))
    log_format: str = setting(config.log_format(C + "LOG_FORMAT", fallback="TETHER_LOG_FORMAT"))
    runtimes: skr_clients.Policy = config.inputs(
        *skr_clients.OPTIONS, default_factory=skr_clients.Policy
    )

    @property
    def enabled(self) -> bool:
        return bool(self.runtime)


SPEC = config.Spec.of(
    Settings,
    part="canary",
    summary="The delivery canary: a probe ConfigMap in one runtime, timed to the KCP (KCP).",
)


def build(v: config.Values) -> Settings:
    if v[C + "TIMEOUT_SECONDS"] >= v[C + "INTERVAL_SECONDS"]:
        raise config.SettingError(
            f"{C}TIMEOUT_SECONDS: must be below {C}INTERVAL_SECONDS (one probe at a time)"
        )
    identity = v[C + "IDENTITY"] or f"{socket.gethostname()}_{os.getpid()}"
    return config.fill(
        Settings,
        v,
        identity=identity,
        runtimes=skr_clients.policy(v, v[C + "SKR_TIMEOUT_SECONDS"]),
    )


def from_env(env: Mapping[str, str] | None = None) -> Settings:
    """Raises ``config.SettingError`` naming the first bad variable (``env`` for tests)."""
    return build(SPEC.read(env))
