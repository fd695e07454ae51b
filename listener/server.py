"""gunicorn with TLS for the listener (a bounded gthread worker, ``tether.http.httpworker``).

The TLS context asks for a client certificate but does not require one
(``ssl.CERT_OPTIONAL`` with the client CA bundle loaded): OpenSSL verifies any presented
certificate during the handshake (chain to the bundle, validity period, clientAuth
purpose) and aborts the handshake when it is invalid, so a forged, foreign or expired
certificate never reaches the application; a connection without a certificate is served
and the runtime API answers it 401 with a JSON body. Handshakes, request heads and bodies
run under the deadlines and connection caps of ``tether.http.httpworker`` (settings
``TETHER_LISTENER_*_TIMEOUT_SECONDS``, ``MAX_CONNECTIONS*``); refusals are counted and
audited by ``listener.edge.worker``. The operations port (``OPS_BIND``: health, readiness,
metrics) is plain HTTP. The context is a ``tether.base.tlsreload.Watched`` like the webhook's:
rebuilt when the certificate, key or CA files change (rotation without restart), the
previous one kept when a rebuild fails, which ``/readyz`` then reports; TLS 1.2 is the
minimum.
"""

from __future__ import annotations

import ssl
from typing import Any

from flask import Flask
from gunicorn.app.base import BaseApplication

from listener import app, settings
from listener.edge import worker
from tether.base import tlsreload
from tether.http import gunicornlog, httpconn, httpworker

# one XFCC header (32 KiB) fits; 1,000 connections' heads stay within 64 MiB
_FIELD_SIZE, _HEAD_FIELDS, _MAX_HEAD = 32768, 32, 64 * 1024


def server_context(cert_file: str, key_file: str, ca_file: str) -> ssl.SSLContext:
    """TLS 1.2+, a client certificate asked for, verified when presented (CERT_OPTIONAL)
    against ``ca_file`` only (no system CAs)."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.load_cert_chain(cert_file, key_file)
    ctx.load_verify_locations(cafile=ca_file)
    ctx.verify_mode = ssl.CERT_OPTIONAL
    return ctx


def serving(s: settings.Settings) -> tlsreload.Watched[ssl.SSLContext] | None:
    """The serving context, rebuilt when the certificate, key or CA file changes (None
    without TLS: behind a proxy in XFCC mode)."""
    if not s.tls:
        return None
    cert, key, ca = s.tls_cert_file, s.tls_key_file, s.client_ca_file
    assert cert is not None and key is not None
    return tlsreload.Watched((cert, key, ca), lambda: server_context(cert, key, ca))


def gunicorn_options(
    s: settings.Settings, watched: tlsreload.Watched[ssl.SSLContext] | None = None
) -> dict[str, Any]:
    # with mTLS the worker's peer is the runtime (its certificate's CN); behind a proxy
    # (XFCC mode) every runtime arrives from the proxy's address, so the per-peer caps are
    # left to the application's per-runtime in-flight cap (429) instead
    per_peer = s.tls
    limits = httpconn.Limits(
        handshake_seconds=s.handshake_timeout,
        head_seconds=s.head_timeout,
        body_seconds=s.body_timeout,
        idle_seconds=s.idle_timeout,
        max_connections=s.max_connections,
        max_connections_per_peer=s.max_connections_per_runtime if per_peer else s.max_connections,
        max_busy_per_peer=s.max_in_flight_per_runtime if per_peer else s.threads,
        max_head_bytes=_MAX_HEAD,
        linger_bytes=s.max_body_bytes + _MAX_HEAD,
        prebuffer_bytes=64 * 1024,
        prebuffer_budget=16 * 1024 * 1024,
    )
    opts: dict[str, Any] = {
        "bind": [s.bind, s.ops_bind],  # the first is the data port (TLS), then operations
        "workers": s.workers,
        "threads": s.threads,
        "worker_class": httpworker.worker_class(worker.ListenerWorker, limits),
        "keepalive": 75,  # longer than the senders' idle pool timeout
        "timeout": 60,
        "graceful_timeout": s.graceful_timeout,
        "limit_request_field_size": _FIELD_SIZE,  # room for an X-Forwarded-Client-Cert header
        "limit_request_fields": _HEAD_FIELDS,
        "accesslog": None,
        "logger_class": gunicornlog.Logger,  # its lines as JSON, with their real schemes
        "proc_name": "tether-listener",
        "control_socket_disable": True,  # one gunicorn per pod; no shared $HOME socket
    }
    if s.tls:
        ctx = watched or serving(s)
        assert ctx is not None
        opts.update(
            {
                "certfile": s.tls_cert_file,
                "keyfile": s.tls_key_file,
                "ca_certs": s.client_ca_file,
                "cert_reqs": ssl.CERT_OPTIONAL,
                "ssl_context": lambda conf, default: ctx.get(),
            }
        )
    return opts


class Server(BaseApplication):  # type: ignore[misc]
    def __init__(self, s: settings.Settings, view_socket: str | None = None) -> None:
        self.settings = s
        self.view_socket = view_socket  # the pod's view (listener.view), None: none
        self.serving = serving(s)
        super().__init__()

    def load_config(self) -> None:
        for k, v in gunicorn_options(self.settings, self.serving).items():
            self.cfg.set(k, v)

    def load(self) -> Flask:
        return app.create_app(self.settings, serving=self.serving, view_socket=self.view_socket)
