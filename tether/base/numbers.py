"""The one way to read a number from a string a client or a stored object gave us (pure).

``str.isdigit`` and ``int`` accept far more than Kubernetes writes: superscripts
(``'²'.isdigit()`` is True but ``int('²')`` raises), Arabic-Indic and full-width digits,
signs, underscores and surrounding whitespace. Kubernetes numbers (resourceVersions,
limits, counts) are plain ASCII digits; anything else is "not a number" here, never an
exception.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

_DIGITS = re.compile(r"[0-9]+")


def ascii_int(text: object, max_digits: int = 20) -> int | None:
    """``text`` as a non-negative integer when it is 1..``max_digits`` ASCII digits, else None."""
    if not isinstance(text, str) or not 0 < len(text) <= max_digits:
        return None
    if _DIGITS.fullmatch(text) is None:
        return None
    return int(text)


def revision_of(meta: Any) -> int | None:
    """An object's metadata's resourceVersion as a number (None: no metadata, absent, or
    not 1..32 ASCII digits; the apiserver's are etcd revisions, far shorter)."""
    rv = meta.get("resourceVersion") if isinstance(meta, Mapping) else None
    return ascii_int(rv, 32)
