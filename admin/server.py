"""gunicorn with TLS for the admin pages (the bounded gthread worker, ``tether.http.httpworker``).

One worker (the fleet snapshot and the sign-in sessions, ``admin.sessions``, live in the
process, so every request finds them; more capacity comes from ``TETHER_ADMIN_THREADS`` or
more replicas, each with its own snapshot and sessions), the pages on the first bind
(HTTPS, the serving certificate reloaded when its files change), the operations port in
plain HTTP. Handshakes and heads run under deadlines and connection caps, so a
stalled client holds no thread.
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


class Server(BaseApplication):  # type: ignore[misc]
    def __init__(self, s: settings_mod.Settings) -> None:
        self.settings = s
        self.serving = tlsreload.Watched(
            (s.tls_cert_file, s.tls_key_file),
            lambda: tlsreload.server_context(s.tls_cert_file, s.tls_key_file),
        )
        super().__init__()

    def load_config(self) -> None:
        for k, v in gunicorn_options(self.settings, self.serving).items():
            self.cfg.set(k, v)

    def load(self) -> Flask:
        logs.configure(self.settings.log_level, self.settings.log_format)
        return app_mod.create_app(self.settings, serving=self.serving)
