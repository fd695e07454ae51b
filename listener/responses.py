"""JSON answers of the listener: every error is ``{"error": <short text>, "details": <any>}``
(the shapes of every part, ``common.ops``)."""

from __future__ import annotations

from common import ops

error = ops.error
ok = ops.ok
