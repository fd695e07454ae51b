"""The gunicorn worker of the listener: ``common.httpworker.BoundedWorker``, plus accounting.

Every connection a limit closes (stalled handshake or head, too many connections, an
invalid client certificate) is counted in ``tether_listener_connection_refusals_total
{reason}`` (TLS refusals also in ``tether_listener_tls_handshake_refusals_total{reason}``)
and audited through one ``logs.Aggregated`` per worker: the first refusal of a reason in an
interval is written at once, the rest as one ``refused_aggregated`` line with the count, so a
flood from the internet cannot flood the audit log. No certificate content is logged.
gunicorn's 501 for an unsupported Transfer-Encoding is answered 400 instead (a client's
mistake is never a 5xx).
"""

from __future__ import annotations

import ssl
from typing import Any

from gunicorn import util
from gunicorn.http import errors as http_errors

from common import httpconn, httpworker, logs
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


def tls_reason(exc: BaseException) -> str:
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


class ListenerWorker(httpworker.BoundedWorker):
    _aggregated: logs.Aggregated | None = None

    def _services(self) -> services.Services | None:
        try:
            return services.of(self.wsgi)
        except (AttributeError, KeyError, TypeError, RuntimeError):
            return None

    def run(self) -> None:
        svc = self._services()
        if svc is not None:
            svc.metrics.export_limits(self.export_limits())
        try:
            super().run()
        finally:
            if self._aggregated is not None:
                self._aggregated.flush()

    def on_refused(self, reason: str, peer: str, exc: BaseException | None = None) -> None:
        svc = self._services()
        if svc is None:
            return
        svc.metrics.connection_refusals.labels(reason).inc()
        detail = reason
        if reason == "tls_refused" and exc is not None:
            detail = tls_reason(exc)
            svc.metrics.tls_refusals.labels(detail).inc()
        if self._aggregated is None:
            self._aggregated = logs.Aggregated(svc.audit, "refused",
                                               svc.settings.refusal_audit_interval)
        self._aggregated.record(reason if reason != "tls_refused" else "tls_" + detail,
                                reason=("tls_" + detail) if reason == "tls_refused" else reason,
                                status=None, remote=peer, route="connection")

    def handle_error(self, req: Any, client: Any, addr: Any, exc: BaseException) -> None:
        if isinstance(exc, http_errors.UnsupportedTransferCoding):
            try:
                util.write_error(client, 400, "Bad Request", "unsupported transfer coding")
            except Exception:  # noqa: BLE001 - the peer may be gone
                pass
            return
        if isinstance(exc, ssl.SSLError) and req is None:
            self.on_refused("tls_refused", httpconn.peer_address(addr), exc)
            return
        super().handle_error(req, client, addr, exc)
