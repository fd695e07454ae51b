"""The gunicorn worker of the listener: gthread, plus accounting of refused handshakes.

An invalid client certificate makes the TLS handshake fail inside gunicorn, before any
HTTP request exists; gunicorn reports it to ``handle_error``. Here it is counted
(``tether_listener_tls_handshake_refusals_total{reason}``) and audited (reason and peer
address only: no certificate content is available or logged), then gunicorn's own
handling closes the connection. gunicorn's 501 for an unsupported Transfer-Encoding is
answered 400 instead (a client's mistake is never a 5xx).
"""

from __future__ import annotations

import ssl
from typing import Any

from gunicorn import util
from gunicorn.http import errors as http_errors
from gunicorn.workers import gthread

from listener import services

# OpenSSL verify/alert texts -> bounded reason codes
_REASONS = (
    ("expired", "certificate_expired"),
    ("not yet valid", "certificate_not_yet_valid"),
    ("unable to get local issuer", "unknown_ca"),
    ("self-signed", "unknown_ca"),
    ("self signed", "unknown_ca"),
    ("unsupported certificate purpose", "wrong_purpose"),
    ("signature", "bad_signature"),
)


def tls_reason(exc: ssl.SSLError) -> str:
    """A short code for a failed handshake (a fixed set, fit for a metric label)."""
    text = f"{getattr(exc, 'verify_message', '') or ''} {getattr(exc, 'reason', '') or ''}".lower()
    for needle, code in _REASONS:
        if needle in text:
            return code
    if "certificate" in text:
        return "certificate_invalid"
    if "version" in text or "protocol" in text:
        return "protocol"
    return "handshake_failed"


class ListenerWorker(gthread.ThreadWorker):  # type: ignore[misc]
    def handle_error(self, req: Any, client: Any, addr: Any, exc: BaseException) -> None:
        if isinstance(exc, http_errors.UnsupportedTransferCoding):
            try:
                util.write_error(client, 400, "Bad Request", "unsupported transfer coding")
            except Exception:  # noqa: BLE001 - the peer may be gone
                pass
            return
        if isinstance(exc, ssl.SSLError) and req is None:
            self._count_tls_refusal(exc, addr)
        super().handle_error(req, client, addr, exc)

    def _count_tls_refusal(self, exc: ssl.SSLError, addr: Any) -> None:
        try:
            svc = services.of(self.wsgi)
        except (AttributeError, KeyError, TypeError):
            return
        reason = tls_reason(exc)
        svc.metrics.tls_refusals.labels(reason).inc()
        peer_addr = addr[0] if isinstance(addr, tuple) and addr else str(addr)
        svc.audit_event("refused", reason="tls_" + reason, status=None, remote=peer_addr,
                        route="tls handshake")
