"""gunicorn (gthread) with TLS for the listener.

The TLS context asks for a client certificate but does not require one
(``ssl.CERT_OPTIONAL`` with the client CA bundle loaded): OpenSSL verifies any presented
certificate during the handshake (chain to the bundle, validity period, clientAuth
purpose) and aborts the handshake when it is invalid, so a forged, foreign or expired
certificate never reaches the application; a connection without a certificate is served
and the runtime API answers it 401 with a JSON body (health, readiness and metrics stay
reachable for probes and Prometheus). Handshake refusals are counted and audited by
``listener.worker``. The context is rebuilt when the certificate, key or CA files change
(rotation without restart); TLS 1.2 is the minimum.
"""

from __future__ import annotations

import os
import ssl
import threading
from typing import Any

from flask import Flask
from gunicorn.app.base import BaseApplication

from listener import app, settings

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
    opts: dict[str, Any] = {
        "bind": [s.bind],
        "workers": s.workers,
        "threads": s.threads,
        "worker_class": "listener.worker.ListenerWorker",
        "keepalive": 75,  # longer than the senders' idle pool timeout
        "timeout": 60,
        "graceful_timeout": 25,
        "limit_request_field_size": 32768,  # room for an X-Forwarded-Client-Cert header
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
