"""The per-Watch state API (v1): a runtime's records of one Watch as bucket hashes, one
bucket's digest, and the Watch's digest that ``GET .../state?watch=NAME`` pages.

    GET /v1/runtimes/{id}/watches/{watch}/summary       -> {watch, bucketCount, hashes[B],
                                                            counts[B], epoch}
    GET /v1/runtimes/{id}/watches/{watch}/buckets/{n}   -> {watch, bucket, hash, count, items}

Where the records come from (``watch_items``): the pod's view (``listener.view``: every
record under a Watch as its digest item, fed by one metadata-only watch per pod), so a
runtime in sync costs the KCP no read; the view answers only what lies in the Watch's
storage namespace. When the view does not answer (not running, not synced, over its bounds:
``tether_listener_view_fallbacks_total{what="records"}``) one label-selected listing in the
Watch's storage namespace (``Store.watch_digest``), never across namespaces.

The refusals are the runtime routes' (``listener.edge.api``): the authenticated runtime only
(another runtime's path is 403, ``steps.guarded``), then the Watch in force for it (404
``watch_not_in_force``, as the state listing), then its rate (one token; each call counts as
its heartbeat). The summary carries the runtime's epoch (the runtime's identity may go with
it, as with the runtime's summary; a claim goes with the state listing). A listener before
these routes answers 404 to them; the poller then reads the Watch's digest
(``poller.watchrun``).
"""

from __future__ import annotations

from typing import Any

from flask import Blueprint, Response, request

from listener.edge import intake, responses, services, steps, validation
from listener.fleet import epochs
from tether.base import numbers
from tether.kube import gateway
from tether.wire import changes, statehash

bp = Blueprint("watch_state", __name__, url_prefix="/v1/runtimes")


def watch_items(svc: services.Services, runtime_id: str, watch: str) -> list[changes.DigestItem]:
    """The digest items of the runtime's records of ``watch`` (in force: checked by the
    caller): from the pod's view, else listed in the Watch's storage namespace. Raises
    ``gateway.GatewayError``."""
    home = svc.store.home(watch)
    held = None if svc.view is None else svc.view.records(runtime_id, watch, home)
    if held is None:
        return svc.store.watch_digest(runtime_id, watch)
    return [i for i in map(_item, held) if i is not None]


def _item(v: object) -> changes.DigestItem | None:
    """A digest item from the view's row (``listener.view.serve``); None for a malformed one."""
    if not isinstance(v, list) or len(v) != 7:
        return None
    ns, name, uid, rv, observed, deleted, epoch = v
    if not all(isinstance(x, str) for x in (ns, name, uid, rv, observed)):
        return None
    return changes.DigestItem(
        namespace=ns,
        name=name,
        uid=uid,
        resourceVersion=rv,
        observedAt=observed,
        deleted=deleted is True,
        epoch=changes.epoch_of(epoch),
    )


def _guard(handler: Any, runtime_id: str, *args: str) -> Response:
    def bound(svc: services.Services, rid: str) -> Response:
        out: Response = handler(svc, rid, *args)
        return out

    bound.__name__ = handler.__name__
    result: Response = steps.guarded(bound)(runtime_id)
    return result


def _watch(svc: services.Services, runtime_id: str, name: str) -> str | Response:
    """The Watch named, in force for the runtime; else the refusal (404; 503 when the
    runtime's Kyma CR or the Watch list cannot be read)."""
    try:
        watch = intake.state_watch(svc, runtime_id, name)
    except gateway.GatewayError as e:
        return steps.unavailable(svc, "state", e, runtime_id)
    if isinstance(watch, validation.Problem):
        return steps.invalid(svc, runtime_id, watch)
    return watch


@bp.get("/<runtime_id>/watches/<watch>/summary")
def get_watch_summary(runtime_id: str, watch: str) -> Response:
    return _guard(_summary, runtime_id, watch)


def _summary(svc: services.Services, runtime_id: str, name: str) -> Response:
    report = epochs.report_of(request.args)
    if isinstance(report, str) or report.epoch is not None:
        problem = (
            report
            if isinstance(report, str)
            else "epoch: a claim goes with the full state listing (GET .../state), not a summary"
        )
        return steps.invalid(
            svc,
            runtime_id,
            validation.Problem(
                400, "invalid query", [{"path": problem.split(":")[0], "message": problem}], "query"
            ),
        )
    limited = steps.rate(svc, runtime_id, 1)
    if limited is not None:
        return limited
    watch = _watch(svc, runtime_id, name)
    if isinstance(watch, Response):
        return watch
    try:
        epoch = svc.epochs.settle(runtime_id, report, lambda e: None)
        folded = statehash.fold(watch_items(svc, runtime_id, watch))
    except gateway.GatewayError as e:
        return steps.unavailable(svc, "state", e, runtime_id)
    svc.beats.seen_after_read(runtime_id)  # best-effort, as for the runtime's summary
    return responses.ok({"watch": watch, **folded.wire(), "epoch": epoch})


@bp.get("/<runtime_id>/watches/<watch>/buckets/<bucket>")
def get_watch_bucket(runtime_id: str, watch: str, bucket: str) -> Response:
    return _guard(_bucket, runtime_id, watch, bucket)


def _bucket(svc: services.Services, runtime_id: str, name: str, bucket: str) -> Response:
    n = numbers.ascii_int(bucket, 5)
    if n is None or n >= statehash.BUCKETS:
        message = f"must be an integer from 0 to {statehash.BUCKETS - 1}"
        return steps.invalid(
            svc,
            runtime_id,
            validation.Problem(
                400, "invalid query", [{"path": "bucket", "message": message}], "query"
            ),
        )
    limited = steps.rate(svc, runtime_id, 1)
    if limited is not None:
        return limited
    watch = _watch(svc, runtime_id, name)
    if isinstance(watch, Response):
        return watch
    try:
        items = [
            i
            for i in watch_items(svc, runtime_id, watch)
            if statehash.bucket_of(i["namespace"], i["name"]) == n
        ]
    except gateway.GatewayError as e:
        return steps.unavailable(svc, "state", e, runtime_id)
    svc.beats.seen_after_read(runtime_id)
    items.sort(key=lambda i: (i["namespace"], i["name"]))
    h, count = statehash.bucket_hash(items)
    return responses.ok(
        {"watch": watch, "bucket": n, "hash": statehash.hex16(h), "count": count, "items": items}
    )
