"""Per-runtime (SKR) API clients from the kubeconfig Secrets in the KCP.

Each runtime's admin kubeconfig is a Secret in the KCP namespace labelled
``operator.kyma-project.io/kyma-name=<kyma>``, key ``config`` (as lifecycle-manager keeps
it). ``SkrClients.get(kyma)`` returns a gateway (``gateway.Kube``) for that runtime, built once per
Secret resourceVersion and reused until the Secret changes (rotated credentials give a
new client, the old one is closed). ``refresh()`` lists all such Secrets in one call
(paginated) so that a run over thousands of runtimes does not read them one by one; a
``get`` for a runtime missing from the index triggers such a refresh (at most once per
``min_refresh_seconds``) before it falls back to reading that runtime's Secret alone.

Kubeconfig content never reaches a log line or an error message.
"""

from __future__ import annotations

import base64
import threading
import time
from collections.abc import Iterator
from typing import Any, NamedTuple

from common import gateway

KYMA_NAME_LABEL = "operator.kyma-project.io/kyma-name"
KUBECONFIG_KEY = "config"
# Concurrent kubeconfig loads are serialized in common.gateway (a race in the client).


class SkrClientError(Exception):
    """No usable kubeconfig Secret for a runtime; the message says why (no content)."""


class _Entry(NamedTuple):
    secret_name: str
    resource_version: str
    api: gateway.Kube | None  # built lazily


class SkrClients:
    """Thread-safe cache: kyma name -> (Secret resourceVersion, gateway)."""

    def __init__(self, kcp: gateway.Kube, namespace: str, *, page_size: int = 500,
                 min_refresh_seconds: float = 10.0) -> None:
        self._kcp = kcp
        self.namespace = namespace
        self._page = page_size
        self._min_refresh = min_refresh_seconds
        self._last_refresh = float("-inf")
        self._refresh_lock = threading.Lock()
        self._lock = threading.Lock()
        self._index: dict[str, tuple[str, str, bytes]] = {}  # kyma -> (secret, rv, content)
        self._clients: dict[str, _Entry] = {}
        self.builds = 0  # gateways built (for tests of the cache)

    # -- reading Secrets -------------------------------------------------------------------------

    def _secrets(self, selector: str) -> Iterator[dict[str, Any]]:
        return self._kcp.list_items(gateway.SECRETS, self.namespace, label_selector=selector,
                                    page_size=self._page)

    @staticmethod
    def _meta(secret: dict[str, Any]) -> tuple[str, str]:
        meta = secret.get("metadata") or {}
        return str(meta.get("name") or ""), str(meta.get("resourceVersion") or "")

    @staticmethod
    def _content(secret: dict[str, Any]) -> bytes | None:
        raw = (secret.get("data") or {}).get(KUBECONFIG_KEY)
        if not raw:
            return None
        try:
            return base64.b64decode(raw)
        except ValueError:
            return None

    def refresh(self) -> int:
        """Re-read every runtime kubeconfig Secret (one paginated list). Returns the count."""
        index: dict[str, tuple[str, str, bytes]] = {}
        self._last_refresh = time.monotonic()
        for s in self._secrets(KYMA_NAME_LABEL):
            kyma = ((s.get("metadata") or {}).get("labels") or {}).get(KYMA_NAME_LABEL)
            content = self._content(s)
            if kyma and content is not None:
                index[kyma] = (*self._meta(s), content)
        with self._lock:
            self._index = index
            for gone in set(self._clients) - set(index):
                self._close(self._clients.pop(gone))
        return len(index)

    def _read_one(self, kyma: str) -> tuple[str, str, bytes]:
        try:
            found = list(self._secrets(f"{KYMA_NAME_LABEL}={kyma}"))
        except gateway.GatewayError as e:
            raise SkrClientError(f"reading the kubeconfig Secret of {kyma}: {e}") from e
        usable = [(*self._meta(s), self._content(s)) for s in found]
        usable = [u for u in usable if u[2] is not None]
        if not usable:
            raise SkrClientError(
                f"no Secret labelled {KYMA_NAME_LABEL}={kyma} with key {KUBECONFIG_KEY!r} "
                f"in {self.namespace}")
        name, rv, content = sorted(usable)[0]
        assert content is not None
        return name, rv, content

    # -- clients ----------------------------------------------------------------------------------

    def get(self, kyma: str, *, fresh: bool = False) -> gateway.Kube:
        """The runtime's gateway. Uses the index of the last ``refresh`` unless
        ``fresh`` or the runtime is not in it; then reads its Secret."""
        with self._lock:
            known = None if fresh else self._index.get(kyma)
        if known is None and not fresh:
            with self._refresh_lock:  # concurrent misses wait for one refresh
                with self._lock:
                    known = self._index.get(kyma)
                if known is None and time.monotonic() - self._last_refresh >= self._min_refresh:
                    self.refresh()
                    with self._lock:
                        known = self._index.get(kyma)
        if known is None:
            known = self._read_one(kyma)
            with self._lock:
                self._index[kyma] = known
        name, rv, content = known
        with self._lock:
            entry = self._clients.get(kyma)
            if entry is not None and entry.resource_version == rv and entry.api is not None:
                return entry.api
        try:
            api = gateway.from_kubeconfig_bytes(content)
        except gateway.KubeConfigError as e:
            raise SkrClientError(f"kubeconfig Secret {name} of {kyma}: {e}") from None
        with self._lock:
            self.builds += 1
            old = self._clients.get(kyma)
            self._clients[kyma] = _Entry(name, rv, api)
        if old is not None and old.api is not None and old.api is not api:
            self._close(old)
        return api

    def forget(self, kyma: str) -> None:
        with self._lock:
            self._index.pop(kyma, None)
            entry = self._clients.pop(kyma, None)
        if entry is not None:
            self._close(entry)

    def close(self) -> None:
        with self._lock:
            entries = list(self._clients.values())
            self._clients.clear()
        for e in entries:
            self._close(e)

    @staticmethod
    def _close(entry: _Entry) -> None:
        if entry.api is not None:
            try:
                entry.api.close()
            except Exception:  # noqa: BLE001 - closing a pool must not fail a run
                pass
