"""The operator's levers on one runtime: ``tether mute``, ``tether unmute``, ``tether resync``.

    tether mute rt-4a1f --reason "flooding: ticket OPS-123"
    tether unmute rt-4a1f
    tether resync rt-4a1f

``mute`` sets the annotation ``tether.kyma-project.io/muted`` (the reason) on the runtime's
Kyma CR; every listener replica sees it (the pod's view watches the Kyma CRs, else its lookup
cache within ``TETHER_LISTENER_KYMA_CACHE_SECONDS``) and answers the runtime's authenticated
requests 429 with a Retry-After of ten minutes; nothing it sends is stored meanwhile, and the
poller sends what changed once it is unmuted. ``unmute`` removes the annotation. Each action
is a patch by the operator's own identity (the KCP's API audit log names them) and an Event
on the Kyma CR (``TetherMuted``, ``TetherUnmuted``), which the runtime's page and ``tether
status RUNTIME`` list; the page and the detail view say the runtime is muted, and it is not
reported ``silent`` meanwhile. Connection options as kubectl's (``admin.kubeargs``). Exit
status: 0; 1 when no Kyma CR (or more than one) carries the runtime ID; 2 for a usage error
or when the KCP cannot be read or written.

``resync`` removes the runtime's ``RuntimeStateSummary`` (found by its runtime-ID label in
``--namespace``, the listener's namespace): the listener rebuilds it from a listing of the
stored records at the runtime's next poll, so records deleted or edited in the KCP by hand,
which the summary still counted, differ again, and that poll run lists their buckets and
sends them (a runtime that polls by buckets; a Watch's summary is folded from the stored
records at every request, so a runtime in Watch mode needs no resync). An Event
``TetherResync`` on the Kyma CR records it.
"""

from __future__ import annotations

import argparse
import functools
import os
import sys

from admin import kubeargs
from tether.kube import apitypes, events, gateway, kyma

COMPONENT = "tether-cli"


def parser(command: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=f"tether {command}",
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("runtime", help="the runtime ID")
    if command == "mute":
        p.add_argument(
            "--reason",
            default="",
            help=f"why, kept on the Kyma CR and shown on the runtime's page (at most "
            f"{apitypes.MUTED_MAX} characters; no secrets: the CR is widely readable)",
        )
    kubeargs.add(p)
    return p


def run(command: str, argv: list[str]) -> int:
    args = parser(command).parse_args(argv)
    value = (kyma.muted_reason(args.reason) or "muted") if command == "mute" else None
    act = functools.partial(_switch, args=args, command=command, value=value)
    return kubeargs.run(command, args, act, "read or change")


def _switch(kcp: gateway.Kube, args: argparse.Namespace, command: str, value: str | None) -> int:
    obj = kubeargs.kyma_of(kcp, args.namespace, args.runtime)
    if isinstance(obj, str):
        print(f"tether {command}: {obj}", file=sys.stderr)
        return 1
    found = kyma.view(obj)
    where = f"Kyma CR {found.namespace}/{found.name}"
    if found.muted == value:
        print(f"runtime {found.runtime_id}: already {command}d ({where})")
        return 0
    kcp.patch(
        apitypes.KYMAS,
        found.namespace,
        found.name,
        {"metadata": {"annotations": {apitypes.MUTED_ANNOTATION: value}}},
    )
    recorder, ref = _recorder(kcp, found)
    if value is not None:
        message = f"muted with tether mute: the listener answers it 429 ({value})"
        recorder.emit(ref, "TetherMuted", message, warning=True)
        print(f"runtime {found.runtime_id} muted ({where}): {value}")
    else:
        message = "unmuted with tether unmute: the listener takes its records again"
        recorder.emit(ref, "TetherUnmuted", message)
        print(f"runtime {found.runtime_id} unmuted ({where})")
    return 0


def _recorder(kcp: gateway.Kube, found: kyma.KymaView) -> tuple[events.Recorder, events.Ref]:
    ref = events.Ref(
        f"{apitypes.KYMAS.group}/{apitypes.KYMAS.version}",
        "Kyma",
        found.namespace,
        found.name,
        found.uid,
    )
    return events.Recorder(kcp, COMPONENT, os.uname().nodename), ref


def _resync(kcp: gateway.Kube, args: argparse.Namespace) -> int:
    obj = kubeargs.kyma_of(kcp, args.namespace, args.runtime)
    if isinstance(obj, str):
        print(f"tether resync: {obj}", file=sys.stderr)
        return 1
    found = kyma.view(obj)
    res = apitypes.RUNTIME_STATE_SUMMARIES
    rid = found.runtime_id or args.runtime
    page = kcp.list(res, args.namespace, label_selector=f"{apitypes.RUNTIME_ID_LABEL}={rid}")
    names = [str((o.get("metadata") or {}).get("name")) for o in page.get("items") or []]
    for name in names:
        try:
            kcp.delete(res, args.namespace, name)
        except gateway.NotFound:  # the janitor or another operator was first
            pass
    recorder, ref = _recorder(kcp, found)
    recorder.emit(
        ref,
        "TetherResync",
        "resync with tether resync: its state summary is rebuilt from the stored records "
        "at its next poll",
    )
    what = "its state summary removed" if names else "it had no state summary"
    print(
        f"runtime {rid}: {what}; the listener rebuilds it from the stored records at the "
        "runtime's next poll, whose run sends what the KCP lacks"
    )
    return 0


def resync(argv: list[str]) -> int:
    args = parser("resync").parse_args(argv)
    return kubeargs.run("resync", args, lambda kcp: _resync(kcp, args), "read or change")


def mute(argv: list[str]) -> int:
    return run("mute", argv)


def unmute(argv: list[str]) -> int:
    return run("unmute", argv)
