"""``kubectl tether``: the operator commands as a kubectl plugin.

kubectl runs an executable named ``kubectl-tether`` found on ``PATH`` for ``kubectl tether
...`` (kubectl's plugin mechanism: the rest of the line as arguments, kubectl's environment,
so ``$KUBECONFIG``); this package installs one (setup.cfg, ``console_scripts``). It offers
the commands an operator runs from a workstation, as ``tether`` does:

    kubectl tether status [RUNTIME]     the fleet, or one runtime in detail (admin.status_cli)
    kubectl tether records RUNTIME      what the KCP stores for a runtime (admin.records_cli)
    kubectl tether explain RUNTIME NS/NAME  why an object was or was not sent (admin.explain_cli)
    kubectl tether certs ...            the watcher CA and its certificates (enroller.certs_cli)
    kubectl tether mute|unmute RUNTIME  the listener answers a runtime 429, or not (admin.levers)
    kubectl tether resync RUNTIME       its state summary rebuilt at its next poll (admin.levers)

The parts themselves (``tether listener``, ...) are not plugins: they run in pods.
"""

from __future__ import annotations

import sys

from command import cli

COMMANDS = ("status", "records", "explain", "certs", "mute", "unmute", "resync")


def usage() -> str:
    return (
        "usage: kubectl tether {" + ",".join(COMMANDS) + "} [options]  "
        "(kubectl tether COMMAND --help; kubectl tether --version)"
    )


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    answered = cli.help_or_version(args, "kubectl tether", __doc__, usage())
    if answered is not None:
        return answered
    if args[0] not in COMMANDS:
        print(f"kubectl tether: unknown command {args[0]!r}; {usage()}", file=sys.stderr)
        return 2
    return cli.main(args)
