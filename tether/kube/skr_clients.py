"""Per-runtime (SKR) API clients from the kubeconfig Secrets in the KCP.

Each runtime's admin kubeconfig is a Secret in the KCP, key ``config``, named
``kubeconfig-<kyma name>`` by default (as the infrastructure manager names them, whose Kyma
names are the runtime IDs; ``Policy.secret_name`` and ``Policy.namespace`` change both). It is
read **by name** (one ``get``; no ``list``, which would return every Secret of the namespace
with its data), and its content is tenant input: it is parsed by the allow-list of
``gateway.kubeconfig`` (no ``exec``, auth providers, token files, paths, proxies or internal
addresses) and every call through the gateway built from it is bounded (wall-clock deadline,
answer size, connections, no redirects: ``gateway.bounded``).

``SkrClients.get(kyma)`` returns that runtime's gateway, built once per Secret
resourceVersion; the Secret is read again when the entry is older than ``Policy.max_age``
(a rotated kubeconfig is used from then on, the old pool closed) or after ``forget``.
A refused kubeconfig raises ``KubeconfigRefused`` naming the field (kept for ``max_age`` as
well, so a refused Secret is not re-read on every call).

Kubeconfig content never reaches a log line or an error message.
"""

from __future__ import annotations

import base64
import dataclasses
import threading
import time
from collections.abc import Callable
from typing import NamedTuple

from tether.base import config
from tether.kube import gateway
from tether.kube.gateway import addresses

KUBECONFIG_KEY = "config"


class SkrClientError(Exception):
    """No usable kubeconfig Secret for a runtime; the message says why (no content)."""


class KubeconfigRefused(SkrClientError):
    """The runtime's kubeconfig holds a field the allow-list refuses; ``field`` names it."""

    def __init__(self, message: str, field: str) -> None:
        super().__init__(message)
        self.field = field


@dataclasses.dataclass(frozen=True)
class Policy:
    """Where runtimes' kubeconfigs are and how calls into runtimes are bounded."""

    namespace: str | None = None  # None: the Kyma CRs' namespace
    secret_name: str = "kubeconfig-{kyma}"
    timeout: float = 10.0  # wall clock per call
    max_bytes: int = 16 * 1024 * 1024
    max_connections: int = 2
    denied: tuple[addresses.Network, ...] = addresses.DEFAULT_DENIED
    max_age: float = 300.0

    @property
    def limits(self) -> gateway.Limits:
        return gateway.Limits(self.max_bytes, self.max_connections, self.denied)


def _networks(name: str, raw: str) -> tuple[addresses.Network, ...]:
    try:
        return addresses.networks(raw.split(","))
    except addresses.NetworkError as e:
        raise config.SettingError(f"{name}: {e}") from None


def _template(name: str, raw: str) -> str:
    if raw.count("{kyma}") != 1 or "{" in raw.replace("{kyma}", ""):
        raise config.SettingError(f"{name}: must hold {{kyma}} once and no other braces")
    return raw


# The settings every part that calls into runtimes reads (compass, the enroller).
OPTIONS = (
    config.object_name(
        "TETHER_KUBECONFIG_NAMESPACE",
        None,
        "KCP namespace of the runtimes' kubeconfig Secrets (unset: the Kyma CRs')",
    ),
    config.custom(
        "TETHER_KUBECONFIG_SECRET_NAME",
        "kubeconfig-{kyma}",
        "name of a runtime's kubeconfig Secret ({kyma}: the Kyma CR's name)",
        _template,
    ),
    config.custom(
        "TETHER_RUNTIME_DENIED_NETWORKS",
        addresses.DEFAULT_DENIED,
        "CIDRs a runtime's API server may not resolve to (comma-separated; empty: none)",
        _networks,
        shown="loopback,link-local,metadata,private,CGNAT,multicast",
    ),
    config.integer(
        "TETHER_RUNTIME_MAX_RESPONSE_BYTES",
        16 * 1024 * 1024,
        "largest answer read from a runtime's API server",
        minimum=64 * 1024,
        maximum=512 * 1024 * 1024,
    ),
    config.integer(
        "TETHER_RUNTIME_MAX_CONNECTIONS",
        2,
        "connections open to one runtime at once",
        minimum=1,
        maximum=16,
    ),
    config.seconds(
        "TETHER_KUBECONFIG_MAX_AGE_SECONDS",
        300.0,
        "a runtime's kubeconfig Secret is read again when its client is older",
        minimum=0,
        maximum=86_400,
    ),
)


def policy(v: config.Values, timeout: float) -> Policy:
    """The policy of the ``OPTIONS``' values; ``timeout``: the part's per-call deadline."""
    return Policy(
        namespace=v["TETHER_KUBECONFIG_NAMESPACE"],
        secret_name=v["TETHER_KUBECONFIG_SECRET_NAME"],
        timeout=timeout,
        max_bytes=v["TETHER_RUNTIME_MAX_RESPONSE_BYTES"],
        max_connections=v["TETHER_RUNTIME_MAX_CONNECTIONS"],
        denied=tuple(v["TETHER_RUNTIME_DENIED_NETWORKS"]),
        max_age=v["TETHER_KUBECONFIG_MAX_AGE_SECONDS"],
    )


class _Entry(NamedTuple):
    resource_version: str
    read_at: float
    api: gateway.Kube | None
    error: SkrClientError | None


class SkrClients:
    """Thread-safe cache: kyma name -> (Secret resourceVersion, gateway or refusal)."""

    def __init__(
        self,
        kcp: gateway.Kube,
        namespace: str,
        policy: Policy | None = None,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._kcp = kcp
        self.policy = policy or Policy()
        self.namespace = self.policy.namespace or namespace
        self._clock = clock
        self._lock = threading.Lock()
        self._entries: dict[str, _Entry] = {}
        self.builds = 0  # gateways built (for tests of the cache)
        self.reads = 0  # Secrets read (for tests of the cache)

    def secret_name(self, kyma: str) -> str:
        return self.policy.secret_name.format(kyma=kyma)

    def _read(self, kyma: str) -> tuple[str, bytes]:
        name = self.secret_name(kyma)
        self.reads += 1
        try:
            secret = self._kcp.get(gateway.SECRETS, self.namespace, name)
        except gateway.NotFound:
            raise SkrClientError(f"no kubeconfig Secret {self.namespace}/{name}") from None
        except gateway.GatewayError as e:
            raise SkrClientError(f"reading the kubeconfig Secret {name}: {e}") from None
        rv = str((secret.get("metadata") or {}).get("resourceVersion") or "")
        raw = (secret.get("data") or {}).get(KUBECONFIG_KEY)
        try:
            content = base64.b64decode(raw, validate=True) if isinstance(raw, str) and raw else b""
        except ValueError:
            content = b""
        if not content:
            raise SkrClientError(
                f"kubeconfig Secret {self.namespace}/{name} has no key {KUBECONFIG_KEY!r}"
            )
        return rv, content

    def _build(self, kyma: str, content: bytes) -> gateway.Kube:
        name = self.secret_name(kyma)
        try:
            api = gateway.from_runtime_kubeconfig(
                content, self.policy.limits, timeout=self.policy.timeout
            )
        except gateway.KubeconfigRefused as e:
            raise KubeconfigRefused(f"kubeconfig Secret {name}: {e}", e.field) from None
        except gateway.KubeConfigError as e:
            raise SkrClientError(f"kubeconfig Secret {name}: {e}") from None
        self.builds += 1
        return api

    def get(self, kyma: str) -> gateway.Kube:
        """The runtime's gateway (``SkrClientError``, ``KubeconfigRefused`` when there is
        none)."""
        now = self._clock()
        with self._lock:
            entry = self._entries.get(kyma)
        if entry is not None and now - entry.read_at < self.policy.max_age:
            if entry.error is not None:
                raise entry.error
            assert entry.api is not None
            return entry.api
        rv, content = self._read(kyma)
        if entry is not None and entry.resource_version == rv:  # unchanged: keep what was built
            with self._lock:
                self._entries[kyma] = entry._replace(read_at=now)
            if entry.error is not None:
                raise entry.error
            assert entry.api is not None
            return entry.api
        try:
            api: gateway.Kube | None = self._build(kyma, content)
            error: SkrClientError | None = None
        except SkrClientError as e:
            api, error = None, e
        with self._lock:
            old = self._entries.get(kyma)
            self._entries[kyma] = _Entry(rv, now, api, error)
        if old is not None:
            self._close(old)
        if error is not None:
            raise error
        assert api is not None
        return api

    def forget(self, kyma: str) -> None:
        """The runtime's client is closed; its Secret is read again at the next ``get``."""
        with self._lock:
            entry = self._entries.pop(kyma, None)
        if entry is not None:
            self._close(entry)

    def close(self) -> None:
        with self._lock:
            entries = list(self._entries.values())
            self._entries.clear()
        for e in entries:
            self._close(e)

    @staticmethod
    def _close(entry: _Entry) -> None:
        if entry.api is not None:
            try:
                entry.api.close()
            except Exception:  # noqa: BLE001 - closing a pool must not fail a run
                pass
