"""``python -m testing.controlplane_cli`` (``make planes``): start local SKR and KCP planes,
print their kubeconfigs, wait.

Ctrl-C (or SIGTERM) stops both planes and removes their folders.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
import time

from testing import controlplane


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m testing.controlplane_cli", description=__doc__)
    parser.add_argument("--names", default="skr,kcp", help="comma-separated plane names")
    parser.add_argument(
        "--once", action="store_true", help="start, print, stop (a smoke check) instead of waiting"
    )
    args = parser.parse_args(argv)
    names = [n.strip() for n in args.names.split(",") if n.strip()]
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    t0 = time.monotonic()
    try:
        with controlplane.planes(*names) as planes:
            print(
                f"{controlplane.kube_apiserver_version()}: {len(planes)} planes ready "
                f"in {time.monotonic() - t0:.1f}s"
            )
            for name, plane in planes.items():
                print(f"  {name}: {plane.url}  KUBECONFIG={plane.kubeconfig}")
            sys.stdout.flush()
            if not args.once:
                print("Ctrl-C stops them.")
                sys.stdout.flush()
                while not stop.wait(1):
                    pass
    except KeyboardInterrupt:
        pass
    except controlplane.ControlPlaneError as e:
        print(f"controlplane: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
