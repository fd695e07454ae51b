"""The runtime API (v1): POST changes, GET the state digest.

Each request goes through the same steps, cheapest first, and stops at the first refusal
(audited, counted, nothing persisted; a refusal before the caller was authenticated is
audited in aggregate, per reason, source and minute: ``listener.edge.refusalsummary``):

    client certificate (401) -> CN / Kyma CR / SAN (403) -> runtime's in-flight cap (429)
    -> [POST] media type (415) -> runtime's rate, one token (429) -> size (413)
       -> body within its deadline (408) -> parse memory budget (503) -> JSON (400) -> schema (400)
       -> record runtimeId (403) -> record size (413) -> Watches (403, listener.edge.intake)
    -> per-runtime rate (429) -> heartbeat -> [POST] record epochs (409) -> persist / list
       (503 when the KCP fails) -> [GET, a listing's first page] the poller's epoch report

Epochs (``listener.fleet.epochs``): a record without one is given the runtime's current epoch;
the answers carry it (``epoch``), so senders learn it; a poller's report on the first page
of a state listing may start the next one.

Tracing (``tether.base.tracing``): a POST of changes is a span of the KCP's own trace (its own
trace ID and sampling decision); the ``traceparent`` the runtime sent is only linked (and,
well-formed, its trace ID is ``runtime_trace_id`` on the audit lines; malformed: ignored,
never a refusal); each record's audit line and recent entry carry the KCP's trace ID, each
written record the KCP span's ``traceparent`` (annotation).

Once a runtime is authenticated, what happens to its records and refusals is counted per
runtime (``listener.fleet.deliveries``) and merged into its ``RuntimeDelivery`` object after the
answer was sent (``Response.call_on_close``).
"""

from __future__ import annotations

from typing import Any

from flask import Blueprint, Response, request

from listener.edge import intake, responses, services, steps, validation, watchcheck, watchstate
from listener.fleet import epochs
from listener.storage import batch, listing, quota, records, store
from tether.base import numbers, tracing
from tether.kube import gateway
from tether.wire import changes, listenerapi

bp = Blueprint("runtimes", __name__, url_prefix="/v1/runtimes")
DEFAULT_LIMIT, MAX_LIMIT = 500, 5000
CHANGES_SPAN = "tether.listener.changes"


@bp.post("/<runtime_id>/changes")
@steps.guarded
def post_changes(svc: services.Services, runtime_id: str) -> Response:
    # the runtime's trace is linked, never continued: the KCP's own trace ID and sampling
    remote = tracing.parse(request.headers.get(tracing.HEADER))  # malformed: None, ignored
    span = svc.tracer.start(
        CHANGES_SPAN,
        links=tracing.linked(remote),
        kind="server",
        attributes=tracing.remote_attributes(remote, {"tether.runtime_id": runtime_id})
        if svc.tracer.enabled
        else None,
    )
    request.environ[steps.TRACE], request.environ[steps.REMOTE] = span.context, remote
    status = 500
    try:
        result = _post_changes(svc, runtime_id)
        status = result.status_code
        return result
    finally:
        span.end({"http.response.status_code": status}, error=status >= 500)


def _post_changes(svc: services.Services, runtime_id: str) -> Response:
    if not validation.media_type_ok(request.headers.get("Content-Type")):
        return steps.invalid(
            svc,
            runtime_id,
            validation.Problem(
                415, "unsupported media type", "Content-Type must be application/json", "media_type"
            ),
        )
    limited = steps.rate_before_body(svc, runtime_id)
    if limited is not None:
        return limited
    raw = intake.read_body(svc)
    if isinstance(raw, validation.Problem):
        return steps.invalid(svc, runtime_id, raw)
    held = intake.reserve(svc, runtime_id, raw)
    if isinstance(held, validation.Problem):
        return steps.invalid(svc, runtime_id, held)
    try:
        return _post_parsed(svc, runtime_id, raw)
    finally:
        svc.budget.release(runtime_id, held)


def _post_parsed(svc: services.Services, runtime_id: str, raw: bytes) -> Response:
    doc = validation.parse_json(raw)
    if isinstance(doc, validation.Problem):
        return steps.invalid(svc, runtime_id, doc)
    recs = validation.records(doc, runtime_id)
    if isinstance(recs, validation.Problem):
        return steps.invalid(svc, runtime_id, recs)
    try:
        refused = intake.unwatched(svc, runtime_id, recs)
    except gateway.GatewayError as e:  # no Watch list read yet, or the Kyma CR: retry later
        return steps.unavailable(svc, "watches", e, runtime_id)
    if refused:
        return _unwatched(svc, runtime_id, recs, refused, doc.get("kind") in changes.LIST_KINDS)
    limited = steps.rate(svc, runtime_id, len(recs))
    if limited is not None:
        return limited
    current: changes.ChangeRecord | None = None
    try:
        svc.beats.seen(runtime_id)
        svc.deliveries.seen(runtime_id)
        epoch = _tag_epochs(svc, recs)
        if isinstance(epoch, validation.Problem):
            return steps.invalid(svc, runtime_id, epoch)
        ctx = request.environ.get(steps.TRACE)  # the batch's, read here (persists run on a pool)
        trace = ctx.header() if isinstance(ctx, tracing.TraceParent) else ""
        done = svc.persists.run(recs, lambda rec: svc.store.persist(rec, trace))  # keys at once
        results = _account(svc, recs, done, trace[3:35])
        if done.failed is not None:  # the earliest failing record's error is the answer
            current = recs[done.failed.position]
            raise done.failed.error
    except gateway.Rejected as e:
        return steps.invalid(
            svc,
            runtime_id,
            validation.Problem(400, "rejected by the KCP API", str(e), "kcp_rejected"),
            current,
        )
    except gateway.GatewayError as e:  # Unavailable, Forbidden, or unexpected: retry later
        return steps.unavailable(svc, "persist", e, runtime_id)
    except quota.Exceeded as e:
        return _over_quota(svc, runtime_id, e, current)
    return responses.ok({"results": results, "epoch": epoch})


def _unwatched(
    svc: services.Services,
    runtime_id: str,
    recs: list[changes.ChangeRecord],
    refused: list[watchcheck.Refused],
    batch: bool,
) -> Response:
    """403 for a request with records no Watch admits: nothing of it is stored (like the
    other checks of a body's records); each refused record is counted and is its reason's
    last refused object, the request is one audit line with the count per reason."""
    trace_id = steps.span_trace_id()
    counts: dict[str, int] = {}
    for r in refused:
        svc.metrics.watch_refusals.labels(r.reason).inc()
        svc.deliveries.record(runtime_id, recs[r.position], "refused", r.reason, 403, trace_id)
        counts[r.reason] = counts.get(r.reason, 0) + 1
    svc.audit_event(
        "refused",
        runtime=runtime_id,
        reason="watch",
        status=403,
        reasons=counts,
        records=len(refused),
        route=request.method + " " + str(request.url_rule),
        **({"trace_id": trace_id} if trace_id else {}),
        **steps.runtime_trace(),
    )
    first = refused[0]
    return responses.error(
        403,
        listenerapi.WATCH_REFUSAL,
        {
            "reason": first.reason,
            "message": first.message,
            "records": watchcheck.details(refused, batch),
        },
    )


def _tag_epochs(
    svc: services.Services, recs: list[changes.ChangeRecord]
) -> int | validation.Problem:
    """The runtime's current epoch, given to every record that carries none (one Lease
    read per worker and ``heartbeat.EPOCH_TTL`` at most); a ``Problem`` (409) when a
    record names an epoch the KCP has not started (only the KCP starts epochs)."""
    runtime_id = recs[0]["runtimeId"]
    ahead = max((changes.epoch_of(r.get("epoch")) for r in recs if "epoch" in r), default=0)
    epoch = svc.epochs.current(runtime_id, at_least=ahead)
    if ahead > epoch:
        return validation.Problem(
            409,
            "epoch not started",
            {
                "reason": "future_epoch",
                "epoch": epoch,
                "message": f"a record names epoch {ahead}; the runtime's current epoch is {epoch} "
                "(only the listener starts epochs: take it from its answers)",
            },
            "future_epoch",
        )
    for r in recs:
        r.setdefault("epoch", epoch)
    return epoch


def _over_quota(
    svc: services.Services, runtime_id: str, e: quota.Exceeded, rec: changes.ChangeRecord | None
) -> Response:
    """413 for a record that does not fit the runtime's storage quota: the senders drop it
    with an error (a batch is re-sent record by record first) and the poller offers it again
    at its next run, so it is stored once there is room (docs/listener.md, Storage quota)."""
    r = e.refusal
    svc.metrics.quota_refusals.labels(r.limit).inc()
    if rec is not None:
        svc.deliveries.record(
            runtime_id, rec, "refused", "quota_" + r.limit, 413, steps.span_trace_id()
        )
    svc.audit_event(
        "refused",
        runtime=runtime_id,
        reason="quota_" + r.limit,
        status=413,
        object=e.object,
        records=r.used.records,
        bytes=r.used.bytes,
        route=request.method + " " + str(request.url_rule),
    )
    return responses.error(
        413,
        "exceeded quota",
        {
            "reason": "quota_" + r.limit,
            "message": r.message(),
            "object": e.object,
            "used": r.used._asdict(),
            "limits": r.limits._asdict(),
        },
    )


def _account(
    svc: services.Services,
    recs: list[changes.ChangeRecord],
    done: batch.Done[store.Outcome],
    trace_id: str,
) -> list[dict[str, Any]]:
    """Metrics, delivery counts and audit of each record that was tried, in batch order (on
    the request thread; ``trace_id``: the batch's, "" without one); the answer's results."""
    results: list[dict[str, Any]] = []
    for rec, fin in zip(recs, done.outcomes, strict=True):
        if fin is None:
            continue
        svc.metrics.persist_seconds.labels(fin.outcome).observe(fin.seconds)
        svc.metrics.records.labels(fin.outcome).inc()
        svc.deliveries.record(rec["runtimeId"], rec, fin.outcome, trace_id=trace_id)
        svc.audit_event(
            "change",
            runtime=rec["runtimeId"],
            watch=rec.get("watch", ""),
            object=f"{rec['namespace']}/{rec['name']}",
            resourceVersion=rec["resourceVersion"],
            deleted=rec["deleted"],
            source=rec["source"],
            outcome=fin.outcome,
            trace_id=trace_id,
            **steps.runtime_trace(),
        )
        results.append(
            {
                "namespace": rec["namespace"],
                "name": rec["name"],
                "resourceVersion": rec["resourceVersion"],
                "outcome": fin.outcome,
            }
        )
    for f in (f for f in done.failures if isinstance(f.error, gateway.GatewayError)):
        svc.metrics.persist_seconds.labels("error").observe(f.seconds)
        svc.metrics.records.labels("error").inc()
    return results


def _query_limit(raw: str | None) -> int | None:
    if raw is None or raw == "":
        return DEFAULT_LIMIT
    value = numbers.ascii_int(raw, max_digits=6)  # '٣' or '²' is not a limit: 400, never 500
    return value if value is not None and 1 <= value <= MAX_LIMIT else None


@bp.get("/<runtime_id>/state")
@steps.guarded
def get_state(svc: services.Services, runtime_id: str) -> Response:
    limit = _query_limit(request.args.get("limit"))
    if limit is None:
        return steps.invalid(
            svc,
            runtime_id,
            validation.Problem(
                400,
                "invalid query",
                [{"path": "limit", "message": f"must be an integer from 1 to {MAX_LIMIT}"}],
                "query",
            ),
        )
    try:
        after = records.decode_continue(request.args.get("continue", ""))
    except ValueError as e:
        return steps.invalid(
            svc,
            runtime_id,
            validation.Problem(
                400, "invalid query", [{"path": "continue", "message": str(e)}], "query"
            ),
        )
    report = epochs.report_of(request.args)
    if isinstance(report, str):
        return steps.invalid(
            svc,
            runtime_id,
            validation.Problem(
                400, "invalid query", [{"path": report.split(":")[0], "message": report}], "query"
            ),
        )
    limited = steps.rate(svc, runtime_id, 1)
    if limited is not None:
        return limited
    try:
        watch = intake.state_watch(svc, runtime_id, request.args.get("watch"))
    except gateway.GatewayError as e:
        return steps.unavailable(svc, "state", e, runtime_id)
    if isinstance(watch, validation.Problem):
        return steps.invalid(svc, runtime_id, watch)
    loaded: list[list[changes.DigestItem]] = []
    surveys: list[listing.Survey] = []
    named = bool(request.args.get("watch"))

    def load() -> list[changes.DigestItem]:
        if named:  # one Watch's records: the pod's view, else its storage namespace only
            items = watchstate.watch_items(svc, runtime_id, watch)
        else:  # the compat Watch of a v1 poller: all of the runtime's records listed, so
            # that the listing also corrects the runtime's state summary (listed_all)
            items, survey = svc.store.survey(runtime_id, watch)
            surveys.append(survey)
        loaded.append(items)
        return items

    try:
        svc.deliveries.seen(runtime_id)
        chunk, position = svc.digests.page(f"{runtime_id}/{watch}", after, limit, load)
        if after is None and loaded:  # a listing's first page: the poller's report
            epoch = svc.epochs.settle(
                runtime_id, report, lambda e: epochs.high_water(loaded[-1], e)
            )
        else:
            epoch = svc.epochs.current(runtime_id)
    except gateway.GatewayError as e:
        return steps.unavailable(svc, "state", e, runtime_id)
    svc.beats.seen_after_read(runtime_id)  # a read answers even when the KCP refuses writes
    resp = responses.ok(
        {"items": chunk, "continue": records.encode_continue(position), "epoch": epoch}
    )
    summaries = svc.summaries
    if surveys and summaries is not None:  # the listing sets the summary's buckets it contradicts
        got = surveys[-1]
        resp.call_on_close(
            lambda: summaries.listed_all(runtime_id, got.folded, got.held, got.revision)
        )
    return resp
