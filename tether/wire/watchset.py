"""The Watches in force in this runtime, as the enroller left them (the webhook's and the
poller's view; I/O).

The enroller writes the Watches that apply to a runtime into the ConfigMap
``tether-watches`` (key ``watches.json``, ``tether.wire.watchwire.to_wire``) in ``tether-system``.
``WatchSet.current()`` reads it at most every ``ttl`` seconds and answers:

* a tuple of Watches (maybe empty: nothing is watched here, nothing is sent);
* None when the ConfigMap does not exist: a KCP of the previous version enrolled this
  runtime, and the senders keep the environment's scope (``tether.wire.filters``) and v1 records.

A read that fails, or a ConfigMap that cannot be used (written by hand, cut short), keeps
the last answer (logged once per cause): a runtime never starts sending what its Watches
leave out because the API was briefly unavailable. Before the first good read the answer
is the empty tuple when the ConfigMap exists but is unusable, None when it is absent and
while no read has answered yet (``settled()`` tells these apart: the poller does not run
on an unknown list).

The Watches are given the runtime's digest key (``read_digest_key``: the ``digest-key`` of
the runtime's client Secret, mounted as a file; ``TETHER_DIGEST_KEY_FILE``), with which a
``digest`` Watch's values are keyed (``tether.wire.digests.of``). Without a key (a Secret
an older enroller wrote) the digests stay unkeyed, as before; a value is never sent.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Callable

from tether.base import config, parsers
from tether.kube import apitypes, gateway
from tether.wire import digests, watches, watchwire

log = logging.getLogger(__name__)
NAMESPACE = "tether-system"
DEFAULT_TTL = 10.0
ENV_CONFIGMAP = "TETHER_WATCHES_CONFIGMAP"
DEFAULT_CONFIGMAP = f"{NAMESPACE}/{watchwire.WIRE_CONFIGMAP}"


def configmap_ref(name: str, raw: str) -> tuple[str, str]:
    """``namespace/name`` of the runtime's Watch list (a settings parser)."""
    ns, sep, cm = raw.partition("/")
    if not sep:
        raise parsers.SettingError(f"{name}: {raw!r} is not NAMESPACE/NAME")
    return parsers.object_name(name, ns), parsers.object_name(name, cm)


# the setting of the senders (webhook, poller) that read the runtime's Watches
OPTION = config.custom(
    ENV_CONFIGMAP,
    configmap_ref(ENV_CONFIGMAP, DEFAULT_CONFIGMAP),
    "NAMESPACE/NAME of the ConfigMap of the runtime's Watches (absent: the "
    "environment's scope, v1 records)",
    configmap_ref,
    shown=DEFAULT_CONFIGMAP,
)


ENV_DIGEST_KEY = "TETHER_DIGEST_KEY_FILE"
KEY_OPTION = config.text(
    ENV_DIGEST_KEY,
    None,
    "file of the runtime's digest key (the digest-key of its client "
    "Secret); absent or unset: digest Watches send unkeyed sha256 digests",
)


def read_digest_key(path: str | None) -> bytes | None:
    """The runtime's digest key from ``path``; None (unkeyed digests, logged without the
    key) when unset, absent, unreadable or shorter than ``digests.MIN_KEY_BYTES``.
    At most 4 KiB are read."""
    if not path:
        return None
    try:
        with open(path, "rb") as f:
            key = f.read(4096)
    except OSError as e:
        log.warning(
            "no digest key (%s: %s): digest Watches send unkeyed sha256 digests",
            path,
            e.strerror or type(e).__name__,
        )
        return None
    if len(key) < digests.MIN_KEY_BYTES:
        log.warning(
            "the digest key in %s is shorter than %d bytes: digest Watches send unkeyed "
            "sha256 digests",
            path,
            digests.MIN_KEY_BYTES,
        )
        return None
    return key


class WatchSet:
    def __init__(
        self,
        skr: gateway.Kube,
        namespace: str = NAMESPACE,
        ttl: float = DEFAULT_TTL,
        timeout: float = 5.0,
        clock: Callable[[], float] = time.monotonic,
        *,
        name: str = watchwire.WIRE_CONFIGMAP,
        digest_key: bytes | None = None,
    ) -> None:
        self._skr, self._namespace, self._ttl, self._timeout = skr, namespace, ttl, timeout
        self._name = name
        self._digest_key = digest_key
        self._clock = clock
        self._lock = threading.Lock()
        self._value: tuple[watches.Watch, ...] | None = None
        self._read_at: float | None = None
        self._warned: str | None = None
        self._settled = False  # a read answered (the ConfigMap, or its absence)

    def current(self) -> tuple[watches.Watch, ...] | None:
        with self._lock:
            now = self._clock()
            if self._read_at is None or now - self._read_at >= self._ttl:
                self._refresh()
                self._read_at = now
            return self._value

    def settled(self) -> bool:
        """Whether a read ever answered: until then ``current()``'s None means "unknown",
        not "absent" (a sender must not fall back to the environment's scope on it)."""
        with self._lock:
            return self._settled

    def refresh(self) -> tuple[watches.Watch, ...] | None:
        """Read now, whatever the ttl (tests, and a sender told its scope changed)."""
        with self._lock:
            self._refresh()
            self._read_at = self._clock()
            return self._value

    def _refresh(self) -> None:
        try:
            cm = self._skr.get_or_none(
                apitypes.CONFIGMAPS, self._namespace, self._name, timeout=self._timeout
            )
        except gateway.GatewayError as e:
            self._warn(f"cannot read {self._namespace}/{self._name}: {e}")
            return
        self._settled = True
        if cm is None:
            self._value = None
            return
        text = (cm.get("data") or {}).get(watchwire.WIRE_KEY)
        try:
            read = watchwire.from_wire(text if isinstance(text, str) else "")
            self._value = tuple(dataclasses.replace(w, digest_key=self._digest_key) for w in read)
            self._warned = None
        except watches.WatchError as e:
            self._warn(
                f"{self._namespace}/{self._name} cannot be used, keeping the last Watches: {e}"
            )
            if self._value is None:
                self._value = ()

    def _warn(self, message: str) -> None:
        if message != self._warned:
            log.warning(message)
            self._warned = message
