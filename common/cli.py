"""The ``tether`` command: one subcommand per part.

    tether webhook ...      admission webhook + forwarder (SKR)
    tether listener ...     change listener (KCP)
    tether poller ...       polling fallback (SKR)
    tether compass ...      Compass registration scheduler (KCP)
    tether janitor ...      the listener's storage janitor: tombstones, orphaned runtimes (KCP)
    tether enroller ...     certificates and Tether's installation in every runtime (KCP)
    tether certs ...        the watcher CA and its certificates, by hand: create-ca, issue,
                            serving, inspect, check (an operator command)
    tether admin ...        the admin pages: fleet, runtime, Compass, parts (KCP)
    tether status [RUNTIME] the fleet in the terminal, as a table or -o json (an operator
                            command, with the operator's kubeconfig)
    tether controlplane     start local SKR and KCP planes and print their kubeconfigs
                            (a developer command: needs a checkout's testing/ package,
                            which the image does not hold)

Each part's entry point is ``<part>.main:main(argv) -> int``; it builds its settings
(``common.config.load``: every setting, certificate and kubeconfig checked before anything
starts; a problem exits 2 with one line ``tether PART: VARIABLE: problem``), clients and app,
and nothing else does. ``tether PART --help`` lists every setting with its meaning and default.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import pathlib
import sys

PARTS = {
    "webhook": "webhook.main",
    "listener": "listener.main",
    "poller": "poller.main",
    "compass": "compass.main",
    "janitor": "listener.janitor_main",
    "enroller": "enroller.main",
    "certs": "enroller.certs_cli",
    "admin": "admin.main",
    "status": "admin.status_cli",
    "controlplane": "testing.controlplane_cli",
}
DEVELOPER = {"controlplane"}  # in a checkout only: testing/ is not in the image


def usage() -> str:
    return "usage: tether {" + ",".join(PARTS) + "} [options]  (tether PART --help; tether --version)"


def version() -> str:
    """The installed package's version (its metadata), else "unknown" (a bare checkout)."""
    try:
        return importlib.metadata.version("tether")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def _add_checkout() -> None:
    """Make a checkout's testing/ importable for a developer command (an editable install
    maps only the product packages)."""
    root = pathlib.Path(__file__).resolve().parents[1]
    if (root / "testing" / "__init__.py").is_file() and str(root) not in sys.path:
        sys.path.insert(0, str(root))


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
    if part in DEVELOPER:
        _add_checkout()
    try:
        module = importlib.import_module(PARTS[part])
    except ModuleNotFoundError as e:
        if part not in DEVELOPER or not (e.name or "").startswith("testing"):
            raise
        print(f"tether: {part} is a developer command and needs a checkout of Tether "
              "(its testing/ package is not installed here)", file=sys.stderr)
        return 2
    rc: int = module.main(rest)
    return rc


if __name__ == "__main__":
    sys.exit(main())
