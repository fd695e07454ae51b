"""Running the webhook app under gunicorn: gthread workers over TLS with keep-alive.

The worker is ``tether.http.httpworker.BoundedWorker``: handshakes, request heads and bodies have
deadlines (``TETHER_WEBHOOK_*_TIMEOUT_SECONDS``) and connections are capped per worker and
per client address, so no pod of the runtime can hold the threads the API server needs.

The master forks the forwarder process in ``when_ready``, before any worker
(``webhook.forwardproc``: the one queue, the read-backs and the sends), with the local
channel to it (``webhook.channel``); each worker builds its own app after the fork and hands
forwarded keys over that channel. On shutdown the master stops the forwarder process in
``on_exit``, after the workers: it drains within ``TETHER_WEBHOOK_DRAIN_SECONDS`` and is
killed if it has not ended a few seconds later. The serving certificate is an
``ssl.SSLContext`` kept per worker and rebuilt when the files change.
"""

from __future__ import annotations

import gc
import logging
import ssl
from typing import Any

from gunicorn.app.base import BaseApplication

from tether.base import logs, ops, tlsreload
from tether.http import gunicornlog, httpconn, httpworker
from webhook import app as app_mod
from webhook import channel, forwarder, forwardproc
from webhook import services as services_mod
from webhook import settings as settings_mod

log = logging.getLogger(__name__)
STOP_MARGIN = 3.0  # seconds the forwarder process has past its drain before it is killed


def gunicorn_options(s: settings_mod.Settings) -> dict[str, Any]:
    sv = s.server
    limits = httpconn.Limits(
        handshake_seconds=sv.handshake_timeout,
        head_seconds=sv.head_timeout,
        body_seconds=sv.body_timeout,
        idle_seconds=sv.idle_timeout,
        max_connections=sv.max_connections,
        max_connections_per_peer=sv.max_connections_per_peer,
        # peers are client addresses: the API server (one per replica) and any pod; each may
        # hold half the threads (a review takes microseconds), the rest is served round-robin.
        # Reviews up to 1 MiB are read whole before a thread takes them
        max_busy_per_peer=max(1, sv.threads // 2),
        prebuffer_bytes=1024 * 1024,
        prebuffer_budget=32 * 1024 * 1024,
    )
    return {
        "bind": [sv.bind],
        "workers": sv.workers,
        "worker_class": httpworker.worker_class(WebhookWorker, limits),
        "threads": sv.threads,
        "keepalive": sv.keepalive,
        "graceful_timeout": sv.graceful_timeout,
        "timeout": 30,
        "certfile": sv.cert_file,
        "keyfile": sv.key_file,
        "preload_app": False,
        "accesslog": None,
        "logger_class": gunicornlog.Logger,  # its lines as JSON, with their real schemes
        "errorlog": "-",
        "loglevel": s.log_level.lower(),
        "proc_name": "tether-webhook",
        # gunicorn >= 25 opens a management socket at one path per user ($HOME/.gunicorn):
        # shared by every gunicorn of the user, needs a writable home; not used here
        "control_socket_disable": True,
        "worker_tmp_dir": "/dev/shm" if _exists("/dev/shm") else None,
    }


class WebhookWorker(httpworker.BoundedWorker):
    """Counts the connections its limits close (``tether_webhook_connection_refusals_total``)."""

    def on_refused(self, reason: str, peer: str, exc: BaseException | None = None) -> None:
        svc = WebhookServer._services(self)
        if svc is not None:
            svc.metrics.connection_refusals.labels(reason).inc()


def _exists(path: str) -> bool:
    import os

    return os.path.isdir(path)


def _serving_context(sv: settings_mod.ServerSettings) -> ssl.SSLContext:
    """The serving context; with a client CA (``webhook.caller``) a presented client
    certificate must chain to it (``CERT_OPTIONAL``: the probes present none)."""
    ctx = tlsreload.server_context(sv.cert_file, sv.key_file, sv.client_ca_file)
    if sv.client_ca_file:
        ctx.verify_mode = ssl.CERT_OPTIONAL
    return ctx


class WebhookServer(BaseApplication):  # type: ignore[misc]
    def __init__(self, s: settings_mod.Settings) -> None:
        self.settings = s
        self.serving = tlsreload.Watched(
            (
                s.server.cert_file,
                s.server.key_file,
                *((s.server.client_ca_file,) if s.server.client_ca_file else ()),
            ),
            lambda: _serving_context(s.server),
            check_interval=s.listener.reload_check_seconds,
        )
        self.channel: channel.Sender | None = None
        self.forwarder: forwardproc.Handle | None = None
        super().__init__()

    def load_config(self) -> None:
        for key, value in gunicorn_options(self.settings).items():
            if value is not None:
                self.cfg.set(key, value)
        self.cfg.set("ssl_context", self._ssl_context)
        self.cfg.set("post_worker_init", self._post_worker_init)
        self.cfg.set("worker_exit", self._worker_exit)
        self.cfg.set("child_exit", self._child_exit)
        self.cfg.set("when_ready", self._when_ready)
        self.cfg.set("on_exit", self._on_exit)

    def load(self) -> Any:
        logs.configure(self.settings.log_level, self.settings.log_format)

        handed = None
        if self.channel is not None and self.forwarder is not None:
            handed = (self.channel, self.forwarder)
        svc = services_mod.build(self.settings, self.serving, handed)
        return app_mod.create_app(self.settings, svc)

    # -- hooks (run in the worker, except child_exit in the arbiter) -------------------------

    def _ssl_context(self, conf: Any, default_factory: Any) -> ssl.SSLContext:
        return self.serving.get()

    @staticmethod
    def _services(worker: Any) -> services_mod.Services | None:
        wsgi = getattr(worker, "wsgi", None)
        svc = getattr(wsgi, "extensions", {}).get("tether.webhook")
        return svc if isinstance(svc, services_mod.Services) else None

    def _post_worker_init(self, worker: Any) -> None:
        # The app, the Kubernetes client and their modules are long-lived: move them out of
        # the cyclic collector's reach, so full collections stay cheap on the request path.
        gc.collect()
        gc.freeze()
        svc = self._services(worker)
        if svc is not None and svc.watch_scope is not None:
            svc.watch_scope.start()  # reads the runtime's Watches every watches_ttl
        if svc is not None and isinstance(svc.forwarder, forwarder.Forwarder):
            svc.forwarder.start()  # in this worker (a server without the forwarder process)

    def _worker_exit(self, server: Any, worker: Any) -> None:
        svc = self._services(worker)
        if svc is not None and svc.watch_scope is not None:
            svc.watch_scope.stop()
        if svc is not None and isinstance(svc.forwarder, forwarder.Forwarder):
            svc.forwarder.stop()

    def _when_ready(self, server: Any) -> None:
        send, recv = channel.pair()
        self.channel = channel.Sender(send, self.settings.queue_size)
        self.forwarder = forwardproc.spawn(
            self.settings, recv, close=[send, *(lst.sock for lst in server.LISTENERS)]
        )

    def _on_exit(self, server: Any) -> None:
        if self.forwarder is not None:
            code = self.forwarder.stop(self.settings.forwarder.drain_seconds + STOP_MARGIN)
            ops.mark_worker_dead(self.forwarder.pid)
            log.info("forwarder process %d ended (%s)", self.forwarder.pid, code)

    @staticmethod
    def _child_exit(server: Any, worker: Any) -> None:
        ops.mark_worker_dead(worker.pid)
