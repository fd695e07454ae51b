"""The poller's operations surface (``tether.ops``) over plain HTTP, in a thread.

``create_app(settings, status)`` binds ``/healthz`` (the scheduler and the leader election
thread run), ``/readyz`` (also: the runtime client certificate loads) and ``/metrics``
(``poller.metrics``); ``Server`` runs it with werkzeug in a daemon thread: one process,
leader-elected, its scheduler never forked into workers.
"""

from __future__ import annotations

from typing import Protocol

from flask import Flask

from poller import settings as settings_mod
from tether import ops

Server = ops.Server


class Status(Protocol):
    def healthy(self) -> tuple[bool, str]: ...

    def ready(self) -> tuple[bool, str]: ...

    def exposition(self) -> bytes: ...


def create_app(settings: settings_mod.Settings, status: Status) -> Flask:
    def check(result: tuple[bool, str]) -> str | None:
        ok, why = result
        return None if ok else why or "failed"

    probes = (ops.Probes()
              .live("threads", lambda: check(status.healthy()))
              .ready("client-certificate",
                     lambda: check(status.ready()) if status.healthy()[0] else None))
    return ops.create_app("poller", probes, status.exposition)
