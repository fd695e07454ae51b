"""``tether mute RUNTIME`` and ``tether unmute RUNTIME``: the operator's switch for a
misbehaving runtime, across every listener replica.

    tether mute rt-4a1f --reason "flooding: ticket OPS-123"
    tether unmute rt-4a1f

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
"""

from __future__ import annotations

import argparse
import os
import sys

from admin import kubeargs
from tether.base import logs
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


def _one(kcp: gateway.Kube, namespace: str, runtime: str) -> kyma.KymaView | str:
    try:
        views = kyma.list_by_runtime_id(kcp, namespace, runtime)
    except ValueError:
        return f"{logs.bounded(runtime, 80)!r} is not a runtime ID"
    if len(views) != 1:
        what = "no Kyma CR" if not views else f"{len(views)} Kyma CRs"
        return f"{what} in {namespace} carry runtime ID {logs.bounded(runtime, 80)}"
    return views[0]


def run(command: str, argv: list[str]) -> int:
    args = parser(command).parse_args(argv)
    value = (kyma.muted_reason(args.reason) or "muted") if command == "mute" else None
    kcp = kubeargs.connect(args)
    if isinstance(kcp, str):
        print(f"tether {command}: {kcp}", file=sys.stderr)
        return 2
    try:
        return _switch(kcp, args, command, value)
    except gateway.GatewayError as e:
        problem = f"cannot read or change the Kyma CR: {logs.bounded(e, 300)}"
        print(f"tether {command}: {problem}", file=sys.stderr)
        return 2
    finally:
        kcp.close()


def _switch(kcp: gateway.Kube, args: argparse.Namespace, command: str, value: str | None) -> int:
    found = _one(kcp, args.namespace, args.runtime)
    if isinstance(found, str):
        print(f"tether {command}: {found}", file=sys.stderr)
        return 1
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
    ref = events.Ref(
        f"{apitypes.KYMAS.group}/{apitypes.KYMAS.version}",
        "Kyma",
        found.namespace,
        found.name,
        found.uid,
    )
    recorder = events.Recorder(kcp, COMPONENT, os.uname().nodename)
    if value is not None:
        message = f"muted with tether mute: the listener answers it 429 ({value})"
        recorder.emit(ref, "TetherMuted", message, warning=True)
        print(f"runtime {found.runtime_id} muted ({where}): {value}")
    else:
        message = "unmuted with tether unmute: the listener takes its records again"
        recorder.emit(ref, "TetherUnmuted", message)
        print(f"runtime {found.runtime_id} unmuted ({where})")
    return 0


def mute(argv: list[str]) -> int:
    return run("mute", argv)


def unmute(argv: list[str]) -> int:
    return run("unmute", argv)
