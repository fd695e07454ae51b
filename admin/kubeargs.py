"""The KCP connection options of the operator commands (``tether status``, ``tether records``
and ``kubectl tether ...``), as kubectl has them, with defaults that match the manifests.

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

from tether.kube import gateway

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
