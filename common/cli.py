"""The ``tether`` command: one subcommand per part.

    tether webhook ...      admission webhook + forwarder (SKR)
    tether listener ...     change listener (KCP)
    tether poller ...       polling fallback (SKR)
    tether compass ...      Compass registration scheduler (KCP)
    tether janitor ...      the listener's storage janitor: tombstones, orphaned runtimes (KCP)
    tether controlplane     start local SKR and KCP planes and print their kubeconfigs

Each part's entry point is ``<part>.main:main(argv) -> int``; it builds its settings
(``common.config.load``: every setting, certificate and kubeconfig checked before anything
starts; a problem exits 2 with one line ``tether PART: VARIABLE: problem``), clients and app,
and nothing else does. ``tether PART --help`` lists every setting with its meaning and default.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import sys

PARTS = {
    "webhook": "webhook.main",
    "listener": "listener.main",
    "poller": "poller.main",
    "compass": "compass.main",
    "janitor": "listener.janitor_main",
    "controlplane": "common.controlplane_cli",
}


def usage() -> str:
    return "usage: tether {" + ",".join(PARTS) + "} [options]  (tether PART --help; tether --version)"


def version() -> str:
    """The installed package's version (its metadata), else "unknown" (a bare checkout)."""
    try:
        return importlib.metadata.version("tether")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if not args or args[0] in ("-h", "--help"):
        print(__doc__)
        print(usage())
        return 0 if args else 2
    if args[0] in ("-V", "--version"):
        print(f"tether {version()}")
        return 0
    part, rest = args[0], args[1:]
    if part not in PARTS:
        print(f"tether: unknown part {part!r}; {usage()}", file=sys.stderr)
        return 2
    module = importlib.import_module(PARTS[part])
    rc: int = module.main(rest)
    return rc


if __name__ == "__main__":
    sys.exit(main())
