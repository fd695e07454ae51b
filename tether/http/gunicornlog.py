"""gunicorn's own log lines (its master's and workers': booting, listening, signals, worker
timeouts) through the process's logging, so they are JSON lines with the same keys as every
other line (``tether.base.logs.configure``), not gunicorn's plain text in the middle of them.

    "logger_class": gunicornlog.Logger      # in a part's gunicorn options

gunicorn writes "Listening at: https://…" for every bind address when a certificate is set;
the bounded worker (``tether.http.httpworker``) serves only the first bind in TLS and the others
(the operations port) in plain HTTP, so the line is rewritten with each address's real
scheme.
"""

from __future__ import annotations

from typing import Any

from gunicorn import glogging

LISTENING = "Listening at: %s (%s)"


def listening(addresses: str) -> str:
    """gunicorn's comma-separated listener addresses with their real schemes: the first as
    given, the further ones plain HTTP (pure)."""
    first, *rest = addresses.split(",")
    return ",".join([first, *(a.replace("https://", "http://", 1) for a in rest)])


class Logger(glogging.Logger):  # type: ignore[misc]
    """gunicorn's error and access loggers without handlers of their own: their records
    propagate to the root logger the part configured."""

    def setup(self, cfg: Any) -> None:
        super().setup(cfg)
        for log in (self.error_log, self.access_log):
            for handler in list(log.handlers):
                log.removeHandler(handler)
            log.propagate = True

    def info(self, msg: str, *args: Any, **kwargs: Any) -> None:
        if msg == LISTENING and len(args) == 2:
            args = (listening(str(args[0])), args[1])
        super().info(msg, *args, **kwargs)
