"""The state summary API (v1): a runtime's bucket hashes, and one bucket's digest.

    GET /v1/runtimes/{id}/state/summary        -> {bucketCount, hashes[B], counts[B]}
    GET /v1/runtimes/{id}/state/buckets/{n}    -> {bucket, hash, count, items[DigestItem]}

The poller compares its own bucket hashes (``tether.wire.statehash``) with the summary and asks
only for the buckets that differ; a runtime in sync costs one summary GET, which is one
KCP read (``listener.fleet.statesummary``). Both count as the runtime's heartbeat, cost one token
of its rate, and go through the same authentication and in-flight cap as the other runtime
routes (``listener.edge.api``). While the KCP API is unreachable the summary is answered
from the one last read (``listener.fleet.outage``). The full digest (``GET .../state``)
stays as it was, for pollers that do not know buckets and for the daily full resync.
Records found without their bucket label are labelled after the answer was sent.
"""

from __future__ import annotations

from flask import Blueprint, Response, request

from listener.edge import responses, services, steps, validation
from listener.fleet import epochs
from tether.base import numbers
from tether.kube import gateway
from tether.wire import statehash

bp = Blueprint("state_summary", __name__, url_prefix="/v1/runtimes")


def _label_after(resp: Response, svc: services.Services, unlabelled: list[tuple[str, int]]) -> None:
    summaries = svc.summaries
    if unlabelled and summaries is not None:
        resp.call_on_close(lambda: summaries.label(unlabelled))


@bp.get("/<runtime_id>/state/summary")
@steps.guarded
def get_summary(svc: services.Services, runtime_id: str) -> Response:
    limited = steps.rate(svc, runtime_id, 1)
    if limited is not None:
        return limited
    if svc.summaries is None:
        return responses.error(404, "not found", "no state summaries in this listener")
    report = epochs.report_of(request.args)
    if isinstance(report, str) or report.epoch is not None:
        problem = (
            report
            if isinstance(report, str)
            else (
                "epoch: a claim goes with the full state listing (GET .../state), not the summary"
            )
        )
        return steps.invalid(
            svc,
            runtime_id,
            validation.Problem(
                400, "invalid query", [{"path": problem.split(":")[0], "message": problem}], "query"
            ),
        )
    try:
        # the runtime's identity first: a rebuilt cluster starts a new epoch, and the hashes
        # are then compared in it (every object differs: the full digest resends them)
        epoch = svc.epochs.settle(runtime_id, report, lambda e: None)
        stored, unlabelled = svc.summaries.read(runtime_id)
        doc = statehash.wire_of(stored)
    except gateway.GatewayError as e:
        last = _last_known(svc, runtime_id, report.identity, e)
        return last if last is not None else steps.unavailable(svc, "state", e, runtime_id)
    # read first, heartbeat after and best-effort: a KCP that refuses writes (etcd over its
    # quota) still answers a runtime in sync
    svc.beats.seen_after_read(runtime_id)
    doc["epoch"] = epoch
    svc.lastknown.remember(runtime_id, report.identity, doc)
    resp = responses.ok(doc)
    _label_after(resp, svc, unlabelled)
    return resp


def _last_known(
    svc: services.Services, runtime_id: str, identity: str, e: gateway.GatewayError
) -> Response | None:
    """The summary last read, while the KCP is unreachable (``listener.fleet.outage``: why
    that answer is safe); None when there is none to give."""
    if not isinstance(e, gateway.Unavailable) or isinstance(e, gateway.Forbidden):
        return None
    doc = svc.lastknown.recall(runtime_id, identity)
    if doc is None:
        return None
    svc.metrics.outage_answers.labels("summary").inc()
    return responses.ok(doc)


@bp.get("/<runtime_id>/state/buckets/<bucket>")
def get_bucket(runtime_id: str, bucket: str) -> Response:
    def handler(svc: services.Services, rid: str) -> Response:
        return _bucket(svc, rid, bucket)

    handler.__name__ = "get_bucket"
    result: Response = steps.guarded(handler)(runtime_id)
    return result


def _bucket(svc: services.Services, runtime_id: str, bucket: str) -> Response:
    n = numbers.ascii_int(bucket, 5)
    if n is None or n >= statehash.BUCKETS:
        return steps.invalid(
            svc,
            runtime_id,
            validation.Problem(
                400,
                "invalid query",
                [
                    {
                        "path": "bucket",
                        "message": f"must be an integer from 0 to {statehash.BUCKETS - 1}",
                    }
                ],
                "query",
            ),
        )
    limited = steps.rate(svc, runtime_id, 1)
    if limited is not None:
        return limited
    if svc.summaries is None:
        return responses.error(404, "not found", "no state summaries in this listener")
    try:
        listed, unlabelled = svc.summaries.bucket(runtime_id, n)
    except gateway.GatewayError as e:
        return steps.unavailable(svc, "state", e, runtime_id)
    svc.beats.seen_after_read(runtime_id)  # best-effort, as for the summary
    resp = responses.ok(
        {
            "bucket": n,
            "hash": statehash.hex16(listed.hash),
            "count": listed.live,
            "items": listed.items,
        }
    )
    _label_after(resp, svc, unlabelled)
    return resp
