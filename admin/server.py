"""gunicorn with TLS for the admin pages (the bounded gthread worker, ``tether.http.httpworker``).

One worker (the fleet snapshot lives in the process; the sign-in sessions are sealed
cookies any replica opens, ``admin.sessions``; more capacity comes from
``TETHER_ADMIN_THREADS`` or more replicas, each with its own snapshot), the pages on the first
bind (HTTPS, the serving certificate reloaded when its files change), the operations port in
plain HTTP. Handshakes and heads run under deadlines and connection caps, so a
stalled client holds no thread.

With ``TETHER_ADMIN_PROXY_CA_FILE`` the pages' TLS asks for a client certificate and
verifies one that is sent against that CA alone (``CERT_OPTIONAL``, no system CAs; OpenSSL
checks the chain, the validity and the clientAuth purpose during the handshake, a bad one
fails it): the authenticating proxy's (``admin.proxyauth``). Browsers that send none are
served as before.
"""

from __future__ import annotations

import ssl
from typing import Any

from flask import Flask
from gunicorn.app.base import BaseApplication

from admin import app as app_mod
from admin import settings as settings_mod
from tether.base import logs, tlsreload
from tether.http import gunicornlog, httpconn, httpworker


def gunicorn_options(
    s: settings_mod.Settings, serving: tlsreload.Watched[ssl.SSLContext]
) -> dict[str, Any]:
    limits = httpconn.Limits(
        handshake_seconds=5.0,
        head_seconds=10.0,
        body_seconds=10.0,
        idle_seconds=10.0,
        max_connections=256,
        max_connections_per_peer=64,
        max_busy_per_peer=max(1, s.threads // 2),
        max_head_bytes=64 * 1024,
        linger_bytes=app_mod.MAX_FORM + 64 * 1024,
        prebuffer_bytes=app_mod.MAX_FORM,
        prebuffer_budget=8 * 1024 * 1024,
    )
    return {
        "bind": [s.bind, s.ops_bind],
        "workers": 1,
        "threads": s.threads,
        "worker_class": httpworker.worker_class(httpworker.BoundedWorker, limits),
        "keepalive": 30,
        "timeout": 60,
        "graceful_timeout": 10,
        "accesslog": None,
        "logger_class": gunicornlog.Logger,  # its lines as JSON, with their real schemes
        "proc_name": "tether-admin",
        "control_socket_disable": True,
        "certfile": s.tls_cert_file,
        "keyfile": s.tls_key_file,
        "ssl_context": lambda conf, default: serving.get(),
    }


def server_context(cert_file: str, key_file: str, proxy_ca_file: str | None) -> ssl.SSLContext:
    """TLS 1.2+; with ``proxy_ca_file`` a client certificate is asked for and, when sent,
    verified against that file alone."""
    if proxy_ca_file is None:
        return tlsreload.server_context(cert_file, key_file)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.load_cert_chain(cert_file, key_file)
    ctx.load_verify_locations(cafile=proxy_ca_file)
    ctx.verify_mode = ssl.CERT_OPTIONAL
    return ctx


def serving(s: settings_mod.Settings) -> tlsreload.Watched[ssl.SSLContext]:
    """The pages' TLS context, rebuilt when the certificate, key or proxy CA changes."""
    cert, key, ca = s.tls_cert_file, s.tls_key_file, s.proxy_ca_file
    paths = (cert, key) if ca is None else (cert, key, ca)
    return tlsreload.Watched(paths, lambda: server_context(cert, key, ca))


class Server(BaseApplication):  # type: ignore[misc]
    def __init__(self, s: settings_mod.Settings) -> None:
        self.settings = s
        self.serving = serving(s)
        super().__init__()

    def load_config(self) -> None:
        for k, v in gunicorn_options(self.settings, self.serving).items():
            self.cfg.set(k, v)

    def load(self) -> Flask:
        logs.configure(self.settings.log_level, self.settings.log_format)
        return app_mod.create_app(self.settings, serving=self.serving)
