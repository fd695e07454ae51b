"""The steps of a POST of changes between its head and its records' storage (the I/O
around the pure checks of ``listener.edge.validation`` and ``listener.edge.watchcheck``):
read the body within its cap, reserve its memory, and decide which Watch admits each
record (``unwatched``)."""

from __future__ import annotations

import time

from flask import request

from listener import settings as listener_settings
from listener.edge import services, validation, watchcheck
from tether.wire import changes


def read_body(svc: services.Services) -> bytes | validation.Problem:
    cap = svc.settings.max_body_bytes
    if request.content_length is not None and request.content_length > cap:
        return validation.Problem(
            413, "request too large", f"the limit is {cap} bytes", "too_large"
        )
    try:
        # gunicorn's wsgi.input ends at Content-Length or the last chunk; read one byte
        # over the cap to tell a body of exactly the cap from a longer one. Every read is
        # bounded by the worker's idle timeout and body deadline (tether.http.httpworker).
        raw: bytes = request.environ["wsgi.input"].read(cap + 1)
    except TimeoutError:
        return validation.Problem(
            408,
            "request timeout",
            f"the body did not arrive within {svc.settings.body_timeout:g} s",
            "body_timeout",
        )
    except Exception:  # noqa: BLE001 - a broken chunked body or a peer gone: the client's fault
        return validation.Problem(400, "invalid body", "the body could not be read", "unreadable")
    if len(raw) > cap:
        return validation.Problem(
            413, "request too large", f"the limit is {cap} bytes", "too_large"
        )
    return raw


def reserve(svc: services.Services, runtime_id: str, raw: bytes) -> int | validation.Problem:
    """Reserve the body's memory (``listener.edge.budget``) for as long as its parsed form lives:
    the parse, the validation and the persisting of its records; a ``Problem`` (503) when
    the budget stayed spent for ``parse_wait``."""
    t0 = time.perf_counter()
    held = svc.budget.acquire(
        runtime_id, len(raw) * listener_settings.PARSE_AMPLIFICATION, svc.settings.parse_wait
    )
    svc.metrics.parse_wait_seconds.observe(time.perf_counter() - t0)
    if held is None:
        return validation.Problem(
            503, "busy", "the parse memory budget is spent; retry later", "parse_budget"
        )
    return held


def unwatched(
    svc: services.Services, runtime_id: str, recs: list[changes.ChangeRecord]
) -> list[watchcheck.Refused]:
    """The records no Watch in force for the runtime admits (``watchcheck.check``); when
    there is none, each v1 record is given its compat Watch. The Watches and the runtime's
    Kyma CR come from the worker's caches (the Kyma CR was just read to authenticate);
    raises ``gateway.GatewayError`` when they cannot be read (the client gets 503)."""
    kymas = svc.kymas.lookup(runtime_id)
    if len(kymas) != 1:  # changed since the caller was authenticated: none in force
        return watchcheck.check(recs, ())
    named = {str(r["watch"]) for r in recs if r.get("watch")}
    ws = watchcheck.in_force(svc.watches.current(named), kymas[0].labels, kymas[0].modules)
    refused = watchcheck.check(recs, ws)
    if not refused:
        watchcheck.assign(recs, ws)
    return refused


def state_watch(
    svc: services.Services, runtime_id: str, name: str | None
) -> str | validation.Problem:
    """The Watch whose records ``GET .../state?watch=NAME`` lists: ``name``, in force for
    the runtime; without one, the runtime's compat Watch (the v1 poller's). A ``Problem``
    (404) when there is none; raises ``gateway.GatewayError`` as ``unwatched``."""
    kymas = svc.kymas.lookup(runtime_id)
    ws = (
        ()
        if len(kymas) != 1
        else watchcheck.in_force(
            svc.watches.current(() if name is None else (name,)), kymas[0].labels, kymas[0].modules
        )
    )
    w = watchcheck.compat(ws) if name is None else next((w for w in ws if w.name == name), None)
    if w is not None:
        return w.name
    message = (
        f"the watch {name[:63]} is not in force for this runtime"
        if name is not None
        else "no watch in force for this runtime covers ConfigMap v1 in mode full"
    )
    return validation.Problem(
        404,
        "unknown watch",
        {
            "reason": watchcheck.NOT_IN_FORCE if name is not None else watchcheck.NO_COMPAT,
            "message": message,
        },
        "unknown_watch",
    )
