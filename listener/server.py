"""gunicorn with TLS for the listener (a bounded gthread worker, ``common.httpworker``).

The TLS context asks for a client certificate but does not require one
(``ssl.CERT_OPTIONAL`` with the client CA bundle loaded): OpenSSL verifies any presented
certificate during the handshake (chain to the bundle, validity period, clientAuth
purpose) and aborts the handshake when it is invalid, so a forged, foreign or expired
certificate never reaches the application; a connection without a certificate is served
and the runtime API answers it 401 with a JSON body. Handshakes, request heads and bodies
run under the deadlines and connection caps of ``common.httpworker`` (settings
``TETHER_LISTENER_*_TIMEOUT_SECONDS``, ``MAX_CONNECTIONS*``); refusals are counted and
audited by ``listener.worker``. The operations port (``OPS_BIND``: health, readiness,
metrics) is plain HTTP. The context is rebuilt when the certificate, key or CA files change
(rotation without restart); TLS 1.2 is the minimum.
"""

from __future__ import annotations

import os
import ssl
import threading
from typing import Any

from flask import Flask
from gunicorn.app.base import BaseApplication

from common import httpworker
from listener import app, settings, worker

# one XFCC header (32 KiB) fits; 1,000 connections' heads stay within 64 MiB
_FIELD_SIZE, _HEAD_FIELDS, _MAX_HEAD = 32768, 32, 64 * 1024
_lock = threading.Lock()
_cache: dict[tuple[Any, ...], ssl.SSLContext] = {}


def _stamp(*paths: str | None) -> tuple[Any, ...]:
    out: list[Any] = []
    for p in paths:
        try:
            st = os.stat(p) if p else None
        except OSError:
            st = None
        out.append((p, st.st_mtime_ns if st else None, st.st_size if st else None))
    return tuple(out)


def tls_context(cert_file: str, key_file: str, ca_file: str) -> ssl.SSLContext:
    """The server context (cached until one of the files changes)."""
    key = _stamp(cert_file, key_file, ca_file)
    with _lock:
        ctx = _cache.get(key)
        if ctx is None:
            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            ctx.minimum_version = ssl.TLSVersion.TLSv1_2
            ctx.load_cert_chain(cert_file, key_file)
            ctx.load_verify_locations(cafile=ca_file)
            ctx.verify_mode = ssl.CERT_OPTIONAL
            _cache.clear()
            _cache[key] = ctx
        return ctx


def gunicorn_options(s: settings.Settings) -> dict[str, Any]:
    # with mTLS the worker's peer is the runtime (its certificate's CN); behind a proxy
    # (XFCC mode) every runtime arrives from the proxy's address, so the per-peer caps are
    # left to the application's per-runtime in-flight cap (429) instead
    per_peer = s.tls
    limits = httpworker.Limits(
        handshake_seconds=s.handshake_timeout, head_seconds=s.head_timeout,
        body_seconds=s.body_timeout, idle_seconds=s.idle_timeout,
        max_connections=s.max_connections,
        max_connections_per_peer=s.max_connections_per_runtime if per_peer else s.max_connections,
        max_busy_per_peer=s.max_in_flight_per_runtime if per_peer else s.threads,
        max_head_bytes=_MAX_HEAD, linger_bytes=s.max_body_bytes + _MAX_HEAD,
        prebuffer_bytes=64 * 1024, prebuffer_budget=16 * 1024 * 1024)
    opts: dict[str, Any] = {
        "bind": [s.bind, s.ops_bind],  # the first is the data port (TLS), then operations
        "workers": s.workers,
        "threads": s.threads,
        "worker_class": httpworker.worker_class(worker.ListenerWorker, limits),
        "keepalive": 75,  # longer than the senders' idle pool timeout
        "timeout": 60,
        "graceful_timeout": 25,
        "limit_request_field_size": _FIELD_SIZE,  # room for an X-Forwarded-Client-Cert header
        "limit_request_fields": _HEAD_FIELDS,
        "accesslog": None,
        "proc_name": "tether-listener",
        "control_socket_disable": True,  # one gunicorn per pod; no shared $HOME socket
    }
    if s.tls:
        cert, key, ca = s.tls_cert_file, s.tls_key_file, s.client_ca_file
        assert cert is not None and key is not None
        opts.update({
            "certfile": cert, "keyfile": key, "ca_certs": ca, "cert_reqs": ssl.CERT_OPTIONAL,
            "ssl_context": lambda conf, default: tls_context(cert, key, ca),
        })
    return opts


class Server(BaseApplication):  # type: ignore[misc]
    def __init__(self, s: settings.Settings) -> None:
        self.settings = s
        super().__init__()

    def load_config(self) -> None:
        for k, v in gunicorn_options(self.settings).items():
            self.cfg.set(k, v)

    def load(self) -> Flask:
        return app.create_app(self.settings)
