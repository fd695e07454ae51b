"""``tether enroller --dry-run`` (issue 42 item 3, docs/enroller.md "Pilot, dry run and
uninstall"): per runtime the enroller works on (``Enroller.selected``), what one run would
install or change and where, with reads only. It runs the installer up to the point where
it would first write (``Installer.enroll``'s ``before_write``) and stops there: the plans
of a run (``decide.plan``, ``decide.apply``) printed instead of performed."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from enroller import castore, decide, render, watching
from enroller.install import Failure, Memory
from tether.kube import apitypes, kyma

if TYPE_CHECKING:
    from enroller import reconcile

log = logging.getLogger("tether.enroller")


class _Planned(Exception):  # noqa: N818 - not an error: the dry run stops before a write
    def __init__(self, cause: str | None) -> None:
        super().__init__(cause)
        self.cause = cause


def dry_run(e: reconcile.Enroller) -> list[str]:
    """``tether enroller --dry-run``: what one run (``--once``, a fresh process) would do
    to each runtime the enroller works on, one line each; reads only: nothing is written
    to the KCP or to any runtime (the CA is read, or made in memory when there is none;
    certificates are issued in memory and dropped). The bundle is the enroller's own
    (a rollout in progress is not consulted)."""
    ns = e.s.kcp_namespace
    ca, note = e.cas.peek()
    everyone = list(e.kcp.list_items(apitypes.KYMAS, ns))
    chosen = [k for k in everyone if e.selected(k)]
    lines = [f"{len(chosen)} of {len(everyone)} Kyma CRs in {ns} selected"]
    if note:
        lines.append(f"KCP {ns}: {note}")
    listed, unreadable = e._watches()
    lines += [_plan(e, obj, ca, listed, unreadable) for obj in chosen]
    return lines


def _plan(
    e: reconcile.Enroller,
    obj: Mapping[str, Any],
    ca: castore.CA,
    listed: watching.Listed | None,
    unreadable: Failure | None,
) -> str:
    meta = obj["metadata"]
    view = kyma.view(obj)
    who = f"Kyma {view.name} (runtime {view.runtime_id or '-'})"
    facts = e.facts(obj, Memory(), unreadable)  # a fresh process: nothing remembered
    plan = decide.plan(facts)
    if plan.kind == "remove":
        return (
            f"{who}: being deleted: "
            "would remove Tether from its runtime, then release the finalizer"
        )
    if plan.kind == "forget":
        return f"{who}: being deleted: nothing to remove (no finalizer)"

    def stop(cause: str | None) -> None:
        raise _Planned(cause)

    try:
        if plan.failure is not None:
            raise Failure(*plan.failure)
        ws = None
        if listed is not None:
            ws = e._discovered(view, listed.for_runtime(obj)[0])
        e.installer.enroll(
            view,
            ca,
            Memory(),
            ws,
            None,
            (meta.get("annotations") or {}).get(decide.TAKE_OVER_ANNOTATION),
            before_write=stop,
        )
        cause: str | None = None
        stopped = False  # Tether is in the runtime already, or about to be
    except _Planned as p:
        cause, stopped = p.cause, True
    except Failure as f:
        return f"{who}: would fail: {f.reason}: {f.message}"
    where = e.skrs.get(view.name).server
    image = render.image(e.bundle, e.s.image)
    if cause is None:
        what = "nothing to change"
    elif cause == "watches":
        what = "would apply its Watch list and webhook configuration"
    else:
        what = f"would apply {len(e.bundle)} objects, image {image} ({cause})"
    fin = "; would add the finalizer first" if stopped and not facts.finalizer else ""
    return f"{who} at {where}: {what}{fin}"
