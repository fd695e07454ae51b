"""The ``tether`` command: one subcommand per part.

    tether webhook ...      admission webhook + forwarder (SKR)
    tether listener ...     change listener (KCP)
    tether poller ...       polling fallback (SKR)
    tether compass ...      Compass registration scheduler (KCP)
    tether janitor ...      the listener's storage janitor: tombstones, orphaned runtimes (KCP)
    tether enroller ...     certificates and Tether's installation in every runtime (KCP)
    tether injector ...     the configuration injector: a Watch's records into its target
                            CR (KCP, optional)
    tether canary ...       the delivery canary: a probe ConfigMap in one runtime, timed to
                            its record and its injected value in the KCP (KCP, optional)
    tether certs ...        the watcher CA and its certificates, by hand: create-ca, issue,
                            serving, inspect, check (an operator command)
    tether admin ...        the admin pages: fleet, runtime, Compass, parts (KCP)
    tether status [RUNTIME] the fleet in the terminal, as a table or -o json (an operator
                            command, with the operator's kubeconfig)
    tether records RUNTIME [NAMESPACE/NAME]   what the KCP stores for a runtime: its
                            records, by Watch, source and epoch (an operator command)
    tether mute|unmute RUNTIME   the listener answers a runtime 429 on every replica, or
                            not any more; audited (an operator command)
    tether explain RUNTIME NAMESPACE/NAME   why an object was or was not sent: the Watches
                            in force and why each takes it or not, quota, deliveries
    tether resync RUNTIME   its state summary rebuilt from the stored records, so its next
                            poll sends what the KCP lacks; audited (an operator command)
    kubectl tether status|records|explain|certs|mute|unmute|resync   the operator
                            commands as a kubectl plugin
                            (the kubectl-tether script, command/kubectl.py)

Each part's entry point is ``<part>.main:main(argv) -> int``; it builds its settings
(``tether.base.config.load``: every setting, certificate and kubeconfig checked before anything
starts; a problem exits 2 with one line ``tether PART: VARIABLE: problem``), clients and app,
and nothing else does. ``tether PART --help`` lists every setting with its meaning and default.
"""

from __future__ import annotations

import importlib.metadata
import sys
from collections.abc import Callable

Main = Callable[[list[str]], int]


# Each part is imported only when it is started (a part pulls in its own libraries), but by
# name, so the import contracts (setup.cfg) see every edge from the CLI to a part.
def _webhook() -> Main:
    from webhook import main

    return main.main


def _listener() -> Main:
    from listener import main

    return main.main


def _poller() -> Main:
    from poller import main

    return main.main


def _compass() -> Main:
    from compass import main

    return main.main


def _janitor() -> Main:
    from listener.janitor import main as janitor_main

    return janitor_main.main


def _enroller() -> Main:
    from enroller import main

    return main.main


def _injector() -> Main:
    from injector import main

    return main.main


def _canary() -> Main:
    from canary import main

    return main.main


def _certs() -> Main:
    from enroller import certs_cli

    return certs_cli.main


def _admin() -> Main:
    from admin import main

    return main.main


def _status() -> Main:
    from admin import status_cli

    return status_cli.main


def _records() -> Main:
    from admin import records_cli

    return records_cli.main


def _explain() -> Main:
    from admin import explain_cli

    return explain_cli.main


def _mute() -> Main:
    from admin import levers

    return levers.mute


def _unmute() -> Main:
    from admin import levers

    return levers.unmute


def _resync() -> Main:
    from admin import levers

    return levers.resync


PARTS: dict[str, Callable[[], Main]] = {
    "webhook": _webhook,
    "listener": _listener,
    "poller": _poller,
    "compass": _compass,
    "janitor": _janitor,
    "enroller": _enroller,
    "injector": _injector,
    "canary": _canary,
    "certs": _certs,
    "admin": _admin,
    "status": _status,
    "records": _records,
    "explain": _explain,
    "mute": _mute,
    "unmute": _unmute,
    "resync": _resync,
}


def usage() -> str:
    return (
        "usage: tether {" + ",".join(PARTS) + "} [options]  (tether PART --help; tether --version)"
    )


def version() -> str:
    """The installed package's version (its metadata), else "unknown" (a bare checkout)."""
    try:
        return importlib.metadata.version("tether")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def help_or_version(args: list[str], command: str, doc: str | None, usage_line: str) -> int | None:
    """No arguments, ``--help`` or ``--version``: print the answer and return the exit code;
    None for anything else (the ``tether`` and ``kubectl tether`` commands share it)."""
    if not args or args[0] in ("-h", "--help"):
        print(doc)
        print(usage_line)
        return 0 if args else 2
    if args[0] in ("-V", "--version"):
        print(f"{command} {version()}")
        return 0
    return None


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    answered = help_or_version(args, "tether", __doc__, usage())
    if answered is not None:
        return answered
    part, rest = args[0], args[1:]
    if part not in PARTS:
        print(f"tether: unknown part {part!r}; {usage()}", file=sys.stderr)
        return 2
    return PARTS[part]()(rest)


if __name__ == "__main__":
    sys.exit(main())
