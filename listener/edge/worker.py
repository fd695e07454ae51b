"""The gunicorn worker of the listener: ``tether.http.httpworker.BoundedWorker``, plus accounting.

Every connection a limit closes (stalled handshake or head, too many connections, an
invalid client certificate) is counted in ``tether_listener_connection_refusals_total
{reason}`` (TLS refusals also in ``tether_listener_tls_handshake_refusals_total{reason}``)
and audited through one ``logs.Aggregated`` per worker: the first refusal of a reason in an
interval is written at once, the rest as one ``refused_aggregated`` line with the count, so a
flood from the internet cannot flood the audit log. No certificate content is logged.
gunicorn's 501 for an unsupported Transfer-Encoding is answered 400 instead (a client's
mistake is never a 5xx). A 429 answered in the main loop counts as throttled in the
runtime's delivery counts (``listener.fleet.deliveries``), which the worker flushes at exit.
A request on a connection whose client certificate expired after the handshake is answered
421 and the connection closed (``connection_refusals_total{reason="certificate_expired"}``):
a keep-alive connection used more often than its idle timeout would otherwise outlive the
certificate for good.
"""

from __future__ import annotations

import re
import ssl
import time
from typing import Any

from gunicorn import util
from gunicorn.http import errors as http_errors

from listener.edge import ratelimit, services
from tether.base import logs
from tether.http import httpconn, httpworker

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


_RUNTIME_REQUEST = re.compile(
    rb"(POST|GET) /v1/runtimes/([A-Za-z0-9_.-]{1,63})/(changes|state)[ ?]"
)
_RATE_LIMITED_HEAD = (
    b"HTTP/1.1 429 Too Many Requests\r\nContent-Type: application/json\r\n"
    b"Cache-Control: no-store\r\nRetry-After: %d\r\n"
)
_RATE_LIMITED_BODY = b'{"details":"per-runtime rate exceeded","error":"rate limited"}\n'
# a verified client certificate that expired after its connection's handshake: the request
# is refused and the connection closed, so that the sender connects again (its handshake is
# then refused as certificate_expired, or succeeds with the renewed certificate)
_EXPIRED_HEAD = (
    b"HTTP/1.1 421 Misdirected Request\r\nContent-Type: application/json\r\n"
    b"Cache-Control: no-store\r\nConnection: close\r\n"
)
_EXPIRED_BODY = (
    b'{"details":"the client certificate of this connection expired after its handshake; '
    b'connect again","error":"certificate expired"}\n'
)
EXIT_FLUSH_SECONDS = (
    5.0  # delivery counts still in memory at worker exit (listener.fleet.deliveries)
)


def expired(not_after: str | None, now: float) -> bool:
    """Whether a connection's verified client certificate (``getpeercert()['notAfter']``)
    has expired by ``now`` (pure): the handshake checked it once, a keep-alive connection
    outlives it."""
    at = not_after_seconds(not_after)
    return at is not None and at < now


def not_after_seconds(not_after: str | None) -> float | None:
    if not not_after:
        return None
    try:
        return float(ssl.cert_time_to_seconds(not_after))
    except ValueError:
        return None


def _expires_at(conn: Any) -> float | None:
    """The connection's client certificate's notAfter (epoch seconds), read once per
    connection (its certificate cannot change: no renegotiation)."""
    at = getattr(conn, "client_not_after", False)
    if at is False:
        sock, text = conn.sock, None
        if isinstance(sock, ssl.SSLSocket):
            try:
                value = (sock.getpeercert() or {}).get("notAfter")
            except (ValueError, OSError):
                value = None
            text = value if isinstance(value, str) else None
        at = conn.client_not_after = not_after_seconds(text)
    return at if isinstance(at, float) else None


class ListenerWorker(httpworker.BoundedWorker):
    """Also answers a runtime over its rate in the main loop (429, no thread, no Flask), so a
    runtime sending far above its limit costs little more than its TLS records."""

    _aggregated: dict[str, logs.Aggregated] | None = None  # by audit event

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
            for aggregated in (self._aggregated or {}).values():
                aggregated.flush()
            if svc is not None:  # best effort, within gunicorn's graceful timeout
                svc.refusals.flush()  # the unauthenticated refusals counted this minute
                svc.deliveries.flush_all(min(EXIT_FLUSH_SECONDS, self.cfg.graceful_timeout / 2))
                if svc.summaries is not None:  # what is lost heals when its bucket is listed
                    svc.summaries.flush_all(min(EXIT_FLUSH_SECONDS, self.cfg.graceful_timeout / 4))

    def early_answer(self, conn: Any) -> tuple[bytes, bytes] | None:
        key = conn.key or ""
        if not key.startswith("cn:"):  # only a verified runtime's own bucket is consulted
            return None
        if (at := _expires_at(conn)) is not None and at < time.time():
            self.on_refused("certificate_expired", httpconn.peer_address(conn.client))
            return _EXPIRED_HEAD, _EXPIRED_BODY
        m = _RUNTIME_REQUEST.match(conn.buf)
        if m is None or m.group(2).decode() != key[3:]:
            return None  # another runtime's path: the application answers it 403
        svc = self._services()
        runtime_id = key[3:]
        wait = svc.buckets.empty(runtime_id) if svc is not None else 0.0
        if svc is None or wait <= 0:
            return None
        method = m.group(1).decode()
        svc.metrics.rate_limited.labels("runtime").inc()
        svc.deliveries.refuse(runtime_id, "rate", 429)  # in memory; flushed at a later request
        svc.metrics.requests.labels(
            f"/v1/runtimes/<runtime_id>/{m.group(3).decode()}", method, "429"
        ).inc()
        # keyed by runtime (a verified CN whose bucket it drained: bounded by the fleet), so
        # each runtime's first refusal in an interval is written at once
        self._audit(
            "rate_limited", runtime_id, runtime=runtime_id, limit="runtime", route=method + " early"
        )
        return _RATE_LIMITED_HEAD % ratelimit.retry_after(wait), _RATE_LIMITED_BODY

    def _audit(self, event: str, key: str, **fields: Any) -> None:
        """One audit line per event, key and interval, with a count (logs.Aggregated)."""
        svc = self._services()
        if svc is None:
            return
        if self._aggregated is None:
            self._aggregated = {}
        if event not in self._aggregated:
            self._aggregated[event] = logs.Aggregated(
                svc.audit, event, svc.settings.refusal_audit_interval
            )
        self._aggregated[event].record(key, **fields)

    def on_refused(self, reason: str, peer: str, exc: BaseException | None = None) -> None:
        svc = self._services()
        if svc is None:
            return
        svc.metrics.connection_refusals.labels(reason).inc()
        detail = reason
        if reason == "tls_refused" and exc is not None:
            detail = tls_reason(exc)
            svc.metrics.tls_refusals.labels(detail).inc()
        code = "tls_" + detail if reason == "tls_refused" else reason
        self._audit("refused", code, reason=code, status=None, remote=peer, route="connection")

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
