"""The KCP connection of the operator commands (``tether status``, ``records``, ``explain``,
``mute``, ``resync`` and ``kubectl tether ...``): the options as kubectl has them, with
defaults that match the manifests; ``run`` a command on the connection (a failure is one line);
``kyma_of`` the runtime's one Kyma CR.

kubectl does not pass its own flags to a plugin: ``kubectl tether status -n NS --context C``
hands ``-n NS --context C`` to this command, which reads them itself:

- ``--kubeconfig``: else ``$KUBECONFIG`` (a list of files, as kubectl merges it), else
  ``~/.kube/config`` when it exists, else the in-cluster service account;
- ``--context``: a context of that kubeconfig (default: its current context);
- ``-n``/``--namespace``: the KCP namespace of the Kyma CRs and Tether's records (default
  ``$TETHER_KCP_NAMESPACE``, else ``kcp-system``, as lifecycle-manager and the manifests);
- ``--heartbeat-namespace``: the listener's heartbeat Leases (default
  ``$TETHER_HEARTBEAT_NAMESPACE``, else ``tether-heartbeats``, as the manifests);
- ``--tether-namespace``: Tether's Deployments and leader Leases (default ``tether-system``).
"""

from __future__ import annotations

import argparse
import os
import pathlib
import sys
from collections.abc import Callable
from typing import Any

from tether.base import logs
from tether.kube import apitypes, gateway, kyma

KCP_NAMESPACE = "kcp-system"
HEARTBEAT_NAMESPACE = "tether-heartbeats"  # manifests/kcp/listener/heartbeats.yaml
TETHER_NAMESPACE = "tether-system"  # the manifests' namespace of the KCP parts


def add(p: argparse.ArgumentParser, *, heartbeats: bool = False, tether: bool = False) -> None:
    """The connection options on ``p``; ``heartbeats`` and ``tether`` add the namespaces of
    the heartbeat Leases and of Tether's own objects (``tether status`` reads both)."""
    p.add_argument(
        "--kubeconfig",
        help="kubeconfig of the KCP (default: $KUBECONFIG, else ~/.kube/config, else in-cluster)",
    )
    p.add_argument("--context", help="the kubeconfig context to use (default: its current one)")
    p.add_argument(
        "-n",
        "--namespace",
        default=os.environ.get("TETHER_KCP_NAMESPACE") or KCP_NAMESPACE,
        help="KCP namespace of the Kyma CRs and Tether's records "
        f"(default $TETHER_KCP_NAMESPACE, else {KCP_NAMESPACE})",
    )
    if heartbeats:
        p.add_argument(
            "--heartbeat-namespace",
            default=os.environ.get("TETHER_HEARTBEAT_NAMESPACE") or HEARTBEAT_NAMESPACE,
            help="namespace of the listener's heartbeat Leases "
            f"(default $TETHER_HEARTBEAT_NAMESPACE, else {HEARTBEAT_NAMESPACE})",
        )
    if tether:
        p.add_argument(
            "--tether-namespace",
            default=TETHER_NAMESPACE,
            help="namespace of Tether's Deployments and leader Leases "
            f"(default {TETHER_NAMESPACE})",
        )


def kubeconfig_path(given: str | None) -> str | None:
    """The kubeconfig kubectl would load: ``given``, else $KUBECONFIG, else ~/.kube/config when
    it exists; None: in-cluster."""
    if given:
        return given
    if os.environ.get("KUBECONFIG"):
        return os.environ["KUBECONFIG"]
    home = pathlib.Path.home() / ".kube" / "config"
    return str(home) if home.is_file() else None


def connect(args: argparse.Namespace) -> gateway.Kube | str:
    """The KCP gateway for the parsed options, or the one line saying why not."""
    path = kubeconfig_path(args.kubeconfig)
    if args.context and path is None:
        return "--context needs a kubeconfig (--kubeconfig, $KUBECONFIG or ~/.kube/config)"
    try:
        return gateway.from_kubeconfig(path, context=args.context)
    except gateway.KubeConfigError as e:
        return f"--kubeconfig: {e}"


def run(
    command: str,
    args: argparse.Namespace,
    act: Callable[[gateway.Kube], int],
    doing: str = "read",
) -> int:
    """``act`` on a gateway built from the connection options, closed after; a connection or
    KCP failure is one line on stderr (``tether COMMAND: ...``) and exit status 2."""
    kcp = connect(args)
    if isinstance(kcp, str):
        print(f"tether {command}: {kcp}", file=sys.stderr)
        return 2
    try:
        return act(kcp)
    except gateway.GatewayError as e:
        print(f"tether {command}: cannot {doing} the KCP: {logs.bounded(e, 300)}", file=sys.stderr)
        return 2
    finally:
        kcp.close()


def kyma_of(kcp: gateway.Kube, namespace: str, runtime: str) -> dict[str, Any] | str:
    """The one Kyma CR in ``namespace`` that carries the runtime ID, as served; or why not."""
    if not kyma.valid_runtime_id(runtime):
        return f"{logs.bounded(runtime, 80)!r} is not a runtime ID"
    label = f"{apitypes.RUNTIME_ID_LABEL}={runtime}"
    found = kcp.list(apitypes.KYMAS, namespace, label_selector=label).get("items") or []
    if len(found) != 1:
        what = "no Kyma CR" if not found else f"{len(found)} Kyma CRs"
        return f"{what} in {namespace} carry runtime ID {runtime}"
    return dict(found[0])
