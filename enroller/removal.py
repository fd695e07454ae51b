"""Tether removed from runtimes (docs/enroller.md, "Removal" and "Pilot, dry run and
uninstall"): ``remove`` for a Kyma CR being deleted (``decide.removal``: delete the
bundle's objects, retry until the timeout, release the finalizer), ``uninstall`` for every
runtime the enroller works on (``tether enroller --uninstall``: the same deletion, each
finalizer released, each RuntimeEnrollment deleted)."""

from __future__ import annotations

import datetime
import logging
from collections import Counter
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from enroller import decide
from enroller.enrollment import logged
from tether.base import logs, times
from tether.kube import apitypes, kyma

if TYPE_CHECKING:
    from enroller import reconcile

log = logging.getLogger("tether.enroller")


def remove(
    e: reconcile.Enroller, obj: Mapping[str, Any], enrollment: Mapping[str, Any] | None
) -> str:
    """Tether removed from the runtime of a Kyma CR being deleted that carries the finalizer
    (``decide.plan``'s ``remove``): its objects deleted, then ``decide.removal`` asked once
    what comes next (retry, or release the finalizer)."""
    meta = obj["metadata"]
    name = meta["name"]
    view = kyma.view(obj)
    since = times.parse_time(meta.get("deletionTimestamp", "")) or e.now()
    waited = e.now() - since  # before the attempt: a slow runtime does not shorten the timeout
    facts = decide.RemovalFacts(
        finalizer=decide.FINALIZER in (meta.get("finalizers") or []),
        attempted=True,
        problem=e.installer.remove_objects(name, view.runtime_id or ""),
        waited=waited,
        timeout=datetime.timedelta(seconds=e.s.removal_timeout),
        installed=installed(e, name, enrollment),
    )
    verdict = decide.removal(facts)
    if verdict.kind == "retry":
        log.warning(
            "Kyma %s deleted: removing Tether from its runtime failed (%s); retried until "
            "the %ds timeout",
            name,
            facts.problem,
            e.s.removal_timeout,
        )
        return "Removing"
    if not release_finalizer(e, obj):
        return "Removing"
    removed(e, obj, view, verdict.outcome, facts.problem)
    return "Removing"


def installed(e: reconcile.Enroller, name: str, enrollment: Mapping[str, Any] | None) -> bool:
    """Whether Tether was ever installed into the runtime, as far as is known: this process
    saw its client certificate, or its RuntimeEnrollment records one."""
    return e._mem(name).held is not None or bool(
        ((enrollment or {}).get("status") or {}).get("certificate")
    )


def release_finalizer(e: reconcile.Enroller, obj: Mapping[str, Any]) -> bool:
    """The enroller's finalizer taken off the Kyma CR (if it has it); False: failed."""
    meta = obj["metadata"]
    if decide.FINALIZER not in (meta.get("finalizers") or []):
        return True
    return logged(
        f"Kyma {meta['name']}: releasing the finalizer failed",
        lambda: e.kcp.patch(
            apitypes.KYMAS,
            e.s.kcp_namespace,
            meta["name"],
            {
                "metadata": {
                    "finalizers": [
                        f for f in meta.get("finalizers") or [] if f != decide.FINALIZER
                    ],
                    "resourceVersion": meta["resourceVersion"],
                }
            },
        ),
    )


def removed(
    e: reconcile.Enroller,
    obj: Mapping[str, Any],
    view: kyma.KymaView,
    outcome: str,
    problem: str | None,
) -> None:
    """After the runtime's objects and the finalizer went: audit, Event, the
    RuntimeEnrollment deleted and what this process held of the runtime forgotten."""
    name = view.name
    logs.audit(
        e.audit,
        "runtime_removed",
        runtime=view.runtime_id,
        kyma=name,
        outcome=outcome,
    )
    if problem is None:
        reason, message = "Removed", "Tether removed from the runtime"
    elif outcome == "nothing_installed":
        reason, message = "Released", f"nothing was installed in the runtime ({problem})"
    else:
        reason = "RemovalTimedOut"
        message = f"the runtime was not reachable for {e.s.removal_timeout:.0f}s: {problem}"
    e.enrollments.event(
        obj,
        "Kyma",
        reason,
        message,
        warning=reason == "RemovalTimedOut",
        api_version=f"{apitypes.KYMAS.group}/{apitypes.KYMAS.version}",
    )
    e.enrollments.delete(name)
    e.skrs.forget(name)
    e.discoveries.forget(name)


def uninstall(e: reconcile.Enroller) -> dict[str, int]:
    """``tether enroller --uninstall``: Tether removed from every runtime the enroller
    works on (``selected``: the selector's and every one carrying its finalizer), each
    finalizer released and each RuntimeEnrollment deleted; a runtime that cannot be
    reached keeps its finalizer (``Failed``, run it again) unless nothing was ever
    installed there. The count of runtimes by outcome (``Uninstalled``, ``Failed``)."""
    ns = e.s.kcp_namespace
    kymas = [k for k in e.kcp.list_items(apitypes.KYMAS, ns) if e.selected(k)]
    enrollments = {
        e["metadata"]["name"]: e for e in e.kcp.list_items(apitypes.RUNTIME_ENROLLMENTS, ns)
    }
    out: Counter[str] = Counter()
    for obj in kymas:
        view = kyma.view(obj)
        name = view.name
        problem = e.installer.remove_objects(name, view.runtime_id or "")
        enrollment = enrollments.get(name)
        if problem is not None and installed(e, name, enrollment):
            log.warning("Kyma %s: Tether not removed from its runtime: %s", name, problem)
            out["Failed"] += 1
            continue
        if not release_finalizer(e, obj):
            out["Failed"] += 1
            continue
        if enrollment is not None or decide.FINALIZER in (obj["metadata"].get("finalizers") or []):
            removed(
                e, obj, view, "uninstalled" if problem is None else "nothing_installed", problem
            )
        out["Uninstalled"] += 1
    return dict(out)
