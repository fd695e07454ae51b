"""The poller's operations surface (``tether.base.ops``) over plain HTTP, in a thread.

``create_app(settings, status)`` binds ``/healthz`` (the scheduler and the leader election
thread run), ``/readyz`` (also: the runtime client certificate loads) and ``/metrics``
(``poller.metrics``); ``Server`` runs it with werkzeug in a daemon thread: one process,
leader-elected, its scheduler never forked into workers.
"""

from __future__ import annotations

from typing import Protocol

from flask import Flask

from poller import metrics, service
from poller import settings as settings_mod
from tether.base import ops
from tether.runtime import leader, sender

Server = ops.Server


class Status(Protocol):
    def healthy(self) -> tuple[bool, str]: ...

    def ready(self) -> tuple[bool, str]: ...

    def exposition(self) -> bytes: ...


class Running:
    """The running poller's ``Status``: its scheduler and elector threads, its client
    certificate, its metrics."""

    def __init__(
        self,
        svc: service.Service,
        elector: leader.LeaderElector,
        client: sender.ListenerClient,
        m: metrics.Metrics,
    ) -> None:
        self.svc, self.elector, self.client, self.metrics = svc, elector, client, m

    def healthy(self) -> tuple[bool, str]:
        if not self.svc.running():
            return False, "scheduler not running"
        if not self.elector.alive():
            return False, "leader election not running"
        return True, ""

    def ready(self) -> tuple[bool, str]:
        ok, why = self.healthy()
        if ok and not self.client.certs_loaded():
            return False, "runtime client certificate cannot be loaded"
        return ok, why

    def exposition(self) -> bytes:
        return self.metrics.exposition()


def create_app(settings: settings_mod.Settings, status: Status) -> Flask:
    def check(result: tuple[bool, str]) -> str | None:
        ok, why = result
        return None if ok else why or "failed"

    probes = (
        ops.Probes()
        .live("threads", lambda: check(status.healthy()))
        .ready("client-certificate", lambda: check(status.ready()) if status.healthy()[0] else None)
    )
    return ops.create_app("poller", probes, status.exposition)
