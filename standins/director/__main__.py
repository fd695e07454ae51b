"""Run the stand-in Director for the local demo:

    python -m standins.director --port 8443 --cert tls.crt --key tls.key
    python -m standins.director --port 8443            # self-signed, files in a temp dir

Prints the GraphQL URL, the OAuth token URL and the client credentials (a local
stand-in's own credentials, meant to be pasted into ``tether compass`` settings).
"""

from __future__ import annotations

import argparse
import json
import pathlib
import signal
import sys
import tempfile
import threading

from standins.director import server as server_mod
from standins.director import store as store_mod


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="python -m standins.director")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--cert", help="serving certificate (PEM); self-signed if omitted")
    p.add_argument("--key", help="serving key (PEM)")
    p.add_argument("--client-id", default="tether")
    p.add_argument("--client-secret", default=None)
    p.add_argument("--token-ttl", type=int, default=600, help="one-time token lifetime (s)")
    args = p.parse_args(argv)
    if bool(args.cert) != bool(args.key):
        p.error("--cert and --key go together")
    ca_file = None
    if args.cert:
        cert, key = pathlib.Path(args.cert), pathlib.Path(args.key)
    else:
        ca_file, cert, key = server_mod.self_signed(
            pathlib.Path(tempfile.mkdtemp(prefix="director-"))
        )
    store = store_mod.Store(
        client_id=args.client_id,
        client_secret=args.client_secret,
        one_time_token_ttl=args.token_ttl,
    )
    srv = server_mod.DirectorServer(store, cert, key, host=args.host, port=args.port).start()
    store.connector_url = f"{srv.url}/connector/graphql"
    print(
        json.dumps(
            {
                "graphql_url": f"{srv.url}/graphql",
                "token_url": f"{srv.url}/oauth2/token",
                "client_id": store.client_id,
                "client_secret": store.client_secret,
                "ca_file": str(ca_file) if ca_file else None,
                "faults_url": f"{srv.url}/admin/faults",
            },
            indent=1,
        ),
        flush=True,
    )
    done = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: done.set())
    try:
        done.wait()
    except KeyboardInterrupt:
        pass
    srv.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
