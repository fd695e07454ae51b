"""The steps every runtime request passes before its handler, and their refusals.

``guarded`` wraps a route of the runtime API (``listener.edge.api``, ``listener.edge.stateapi``):
the client certificate (401), its CN, the Kyma CR and the SAN (403, ``authenticate``), then the
runtime's in-flight cap (429, ``in_flight``); the handlers then take the runtime's rate
(``rate``, ``rate_before_body``). A refusal before authentication is counted and audited in
aggregate (``refuse``, ``listener.edge.refusalsummary``); after it, per runtime
(``listener.fleet.deliveries``). The KCP API failing is 503 (``unavailable``), logged at most
once per operation and kind every 30 s. ``span_trace_id`` and ``runtime_trace`` read the POST's span
context and the runtime's linked one, which ``listener.edge.api`` puts in the WSGI environ.
"""

from __future__ import annotations

import datetime
import logging
import time
from typing import Any

from flask import Response, request

from listener.edge import auth, peer, ratelimit, responses, services, validation
from listener.fleet import outage
from tether.base import certs, logs, tracing
from tether.kube import gateway
from tether.wire import changes

TRACE = "tether.trace"  # request.environ[TRACE]: the POST's span context (tracing.TraceParent)
REMOTE = "tether.remote_trace"  # request.environ[REMOTE]: the runtime's, a link (or None)


def span_trace_id() -> str:
    """The trace ID of the request's span ("" outside a POST of changes)."""
    ctx = request.environ.get(TRACE)
    return ctx.trace_hex if isinstance(ctx, tracing.TraceParent) else ""


def runtime_trace() -> dict[str, str]:
    """The audit field naming the trace the runtime sent (validated; none without one)."""
    ctx = request.environ.get(REMOTE)
    return {"runtime_trace_id": ctx.trace_hex} if isinstance(ctx, tracing.TraceParent) else {}


def refuse(
    svc: services.Services,
    runtime_id: str,
    status: int,
    reason: str,
    message: str,
    cert: Any = None,
) -> Response:
    """A refusal before the caller was authenticated: counted, and audited in aggregate
    per reason, source and minute (``listener.edge.refusalsummary``), the path's runtime ID
    only as claimed. A refusal of a certificate whose chain verified also counts against the
    runtime its CN names (``auth.attributed``)."""
    svc.metrics.auth_refusals.labels(reason).inc()
    cn = None if cert is None else certs.common_name(cert) or ""
    svc.refusals.record(reason, request.remote_addr, status, runtime_id, cn)
    answer = responses.error(
        status,
        "unauthorized" if status == 401 else "forbidden",
        {"reason": reason, "message": message},
    )
    owner = auth.attributed(reason, cn, _known(svc, cn, runtime_id, reason))
    if owner is not None:  # its page and ``tether status`` show it, after the answer is sent
        svc.metrics.auth_refusals_attributed.labels(reason).inc()
        svc.deliveries.refuse(owner, reason, status)
        answer.call_on_close(lambda: svc.deliveries.flush_if_due(owner))
    return answer


def _known(svc: services.Services, cn: str | None, runtime_id: str, reason: str) -> bool:
    """Whether a Kyma CR carries the runtime ID the verified certificate's CN names: known
    already for the refusals after the lookup of the path's runtime (the CN equals it);
    looked up (the pod's view, else the lookup cache) for ``cn_mismatch``."""
    if not cn or reason not in auth.ATTRIBUTED:
        return False
    if reason != "cn_mismatch":
        return cn == runtime_id
    try:
        return bool(svc.kymas.lookup(cn))
    except (ValueError, gateway.GatewayError):  # not a runtime ID, or the KCP unreachable
        return False


_log = logging.getLogger("tether.listener")
_last_logged: dict[tuple[str, str], float] = {}
_LOG_EVERY = 30.0  # seconds: one line per operation and kind, however many requests fail


def unavailable(
    svc: services.Services, operation: str, e: Exception, runtime_id: str | None = None
) -> Response:
    svc.metrics.kcp_unavailable.labels(operation).inc()
    if runtime_id is not None:  # an authenticated runtime's request
        svc.deliveries.refuse(runtime_id, "kcp_unavailable", 503)
    # Forbidden is the listener's own RBAC or the KCP's admission (policy.yaml): say so, it
    # will not heal (a refused storage namespace is not Forbidden: listener.storage.namespaces
    # logs it naming the Watch and the label)
    kind = "forbidden" if isinstance(e, gateway.Forbidden) else "unavailable"
    now = time.monotonic()
    if now - _last_logged.get((operation, kind), -_LOG_EVERY) >= _LOG_EVERY:
        _last_logged[(operation, kind)] = now
        (_log.error if kind == "forbidden" else _log.warning)(
            "KCP API %s during %s (answered 503, the runtime retries): %s%s",
            kind,
            operation,
            logs.bounded(e, 300),
            "; check the listener's Role and ClusterRoles, and the KCP's "
            "admission policy tether-listener-records"
            if kind == "forbidden"
            else "",
        )
    return responses.error(
        503,
        "KCP API unavailable",
        logs.bounded(e, 200),
        retry_after=outage.retry_after(svc.settings.retry_after),
    )


def authenticate(svc: services.Services, runtime_id: str) -> Response | None:
    """None when the caller may act for ``runtime_id``, else the refusal."""
    try:
        p = peer.from_environ(
            request.environ,
            trusted_proxies=svc.settings.xfcc_trusted_proxies,
            cas=svc.cas.get(),
            now=datetime.datetime.now(datetime.UTC),
        )
    except peer.NoCertificate as e:
        return refuse(svc, runtime_id, 401, e.reason, "a valid client certificate is required")
    cn = certs.common_name(p.cert)
    refusal = auth.check_cn(cn, runtime_id)
    if refusal is not None:
        return refuse(svc, runtime_id, refusal.status, refusal.reason, refusal.message, p.cert)
    try:
        kymas = svc.kymas.lookup(runtime_id)
    except ValueError:  # not a label value: no Kyma CR can carry it
        return refuse(svc, runtime_id, 403, "unknown_runtime", "invalid runtime ID", p.cert)
    except gateway.GatewayError as e:
        return unavailable(svc, "kyma_lookup", e)
    refusal = auth.authorize(cn, certs.dns_sans(p.cert), runtime_id, kymas)
    if refusal is not None:
        return refuse(svc, runtime_id, refusal.status, refusal.reason, refusal.message, p.cert)
    if kymas[0].muted is not None:
        return muted(svc, runtime_id)
    return None


MUTED_RETRY_AFTER = 600  # seconds: a muted runtime's senders wait this long between offers


def muted(svc: services.Services, runtime_id: str) -> Response:
    """An authenticated runtime an operator muted (``tether mute``: the annotation
    ``tether.kyma-project.io/muted`` on its Kyma CR, seen by every replica): 429 with a long
    Retry-After, counted on its delivery (the operator's reason stays in the KCP)."""
    svc.metrics.rate_limited.labels("muted").inc()
    svc.deliveries.refuse(runtime_id, "muted", 429)
    answer = responses.error(
        429,
        "muted",
        {"reason": "muted", "message": "an operator of the KCP muted this runtime"},
        retry_after=MUTED_RETRY_AFTER,
    )
    answer.call_on_close(lambda: svc.deliveries.flush_if_due(runtime_id))
    return answer


def rate(svc: services.Services, runtime_id: str, cost: int) -> Response | None:
    wait = svc.buckets.take(runtime_id, cost)
    if wait <= 0:
        return None
    svc.metrics.rate_limited.labels("runtime").inc()
    svc.deliveries.refuse(runtime_id, "rate", 429)
    svc.audit_event("rate_limited", runtime=runtime_id, limit="runtime", cost=cost)
    return responses.error(
        429, "rate limited", "per-runtime rate exceeded", retry_after=ratelimit.retry_after(wait)
    )


def invalid(
    svc: services.Services,
    runtime_id: str,
    problem: validation.Problem,
    rec: changes.ChangeRecord | None = None,
) -> Response:
    """A refused request (``rec``: the one record it refuses)."""
    svc.metrics.validation_failures.labels(problem.reason).inc()
    trace_id = span_trace_id()
    if rec is None:
        svc.deliveries.refuse(runtime_id, problem.reason, problem.status)
    else:
        svc.deliveries.record(runtime_id, rec, "refused", problem.reason, problem.status, trace_id)
    svc.audit_event(
        "refused",
        runtime=runtime_id,
        reason=problem.reason,
        status=problem.status,
        remote=request.remote_addr,
        route=request.method + " " + str(request.url_rule),
        **({"trace_id": trace_id} if trace_id else {}),
        **runtime_trace(),
    )
    retry = svc.settings.retry_after if problem.status == 503 else None
    return responses.error(problem.status, problem.error, problem.details, retry_after=retry)


def guarded(handler: Any) -> Any:
    """Authenticate, then apply the runtime's in-flight cap around a handler.

    Authentication first: the cap is per runtime, and an unauthenticated caller must not
    be able to spend another runtime's share by naming it in the URL. Both run before the
    body is read (tether.http.httpworker gives a thread only to a complete request head)."""

    def wrapper(runtime_id: str) -> Response:
        svc = services.of()
        refused = authenticate(svc, runtime_id)
        if refused is not None:
            return refused
        result = in_flight(svc, runtime_id, handler)
        # the runtime's delivery counts go to the KCP once the answer is sent: no client
        # waits for that write (at most once per DELIVERY_FLUSH_SECONDS per worker)
        result.call_on_close(lambda: svc.deliveries.flush_if_due(runtime_id))
        summaries = svc.summaries
        if summaries is not None:  # what its writes changed in the state summary
            result.call_on_close(lambda: summaries.flush_if_due(runtime_id))
        return result

    wrapper.__name__ = handler.__name__
    return wrapper


def in_flight(svc: services.Services, runtime_id: str, handler: Any) -> Response:
    if not svc.in_flight.acquire(runtime_id):
        svc.metrics.rate_limited.labels("in_flight").inc()
        svc.deliveries.refuse(runtime_id, "in_flight", 429)
        svc.audit_event("rate_limited", runtime=runtime_id, limit="in_flight")
        return responses.error(
            429,
            "too many requests in flight",
            f"at most {svc.in_flight.limit} requests of one runtime are served at once",
            retry_after=1,
        )
    try:
        result: Response = handler(svc, runtime_id)
        return result
    finally:
        svc.in_flight.release(runtime_id)


def rate_before_body(svc: services.Services, runtime_id: str) -> Response | None:
    """429 before anything is read when the runtime's bucket is empty."""
    wait = svc.buckets.empty(runtime_id)
    if wait <= 0:
        return None
    svc.metrics.rate_limited.labels("runtime").inc()
    svc.deliveries.refuse(runtime_id, "rate", 429)
    svc.audit_event("rate_limited", runtime=runtime_id, limit="runtime", cost=1)
    return responses.error(
        429, "rate limited", "per-runtime rate exceeded", retry_after=ratelimit.retry_after(wait)
    )
