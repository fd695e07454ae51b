"""Digests of values (pure): what a ``digest`` Watch sends instead of a value, and what the
KCP accepts as one.

A digest is ``hmac-sha256:`` and the hex HMAC-SHA256 of the value's bytes under the
runtime's own key (``KEY`` in the runtime's client Secret, written by the enroller,
``enroller.render``; read by the webhook and the poller, ``tether.wire.watchset``), so the KCP can
test no guess of a short value and equal values do not correlate across runtimes. A runtime
the enroller has not given a key yet sends the unkeyed ``sha256:`` of earlier releases, which
the KCP accepts for one more release (docs/watches.md, "Digests"). The value never leaves.
"""

from __future__ import annotations

import hashlib
import hmac
import re
from collections.abc import Mapping
from typing import Any

KEY = "digest-key"  # in the runtime's client Secret (enroller.render), never sent
MIN_KEY_BYTES = 32
_SHAPE = re.compile(r"(hmac-sha256|sha256):[0-9a-f]{64}")  # fullmatch: no trailing newline


def of(value: bytes, key: bytes | None = None) -> str:
    """What a ``digest`` Watch sends for a value: ``hmac-sha256:`` and the HMAC-SHA256 of
    its bytes under the runtime's ``key``; without a key (a runtime the enroller has not
    given one yet) the unkeyed ``sha256:`` of earlier releases, never the value."""
    if key:
        return "hmac-sha256:" + hmac.new(key, value, hashlib.sha256).hexdigest()
    return "sha256:" + hashlib.sha256(value).hexdigest()


def only(data: Mapping[str, Any]) -> bool:
    """Whether every value of ``data`` is a digest (of either shape), and nothing else."""
    return all(isinstance(v, str) and _SHAPE.fullmatch(v) for v in data.values())
