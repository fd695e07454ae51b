"""JSON answers of the listener: every error is ``{"error": <short text>, "details": <any>}``
(the shapes of every part, ``tether.base.ops``)."""

from __future__ import annotations

from tether.base import ops

error = ops.error
ok = ops.ok
