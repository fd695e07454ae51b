"""``tether status [RUNTIME]``: the admin pages' facts in the terminal.

    tether status                      # every runtime, worst first, as a table
    tether status 4a1f...              # one runtime in detail (admin.detail)
    tether status 4a1f... -o json      # one runtime, as JSON
    tether status --problem silent     # only runtimes with that problem

It lists the same objects as the admin pages (``admin.snapshot.load``) with the operator's
own kubeconfig, chosen as kubectl chooses it (``--kubeconfig``, ``--context``, ``-n``:
``admin.kubeargs``), so it shows what RBAC lets them read; one runtime's RuntimeDelivery is
read whole and its Events listed, as its page does (``snapshot.delivery_of``,
``snapshot.events``). Problems and refusal reasons link their runbooks under
``--runbook-base`` (``$TETHER_ADMIN_RUNBOOK_BASE``, else the running version's docs,
``runbooks.DEFAULT_BASE``). Exit status: 0; 1 when a runtime was asked for and not found or
(``--fail-on-problems``) any shown runtime has a problem; 2 for a usage error or when the KCP
cannot be read.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import sys
from collections.abc import Sequence
from typing import NamedTuple, TextIO

from admin import detail, fleet, kubeargs, parts, runbooks, snapshot, views
from admin import settings as settings_mod
from tether.base import config, logs, parsers
from tether.kube import gateway

COLUMNS = (
    "RUNTIME",
    "PROBLEMS",
    "ENROLLED",
    "CERT-EXPIRY",
    "HEARTBEAT",
    "LAST-CHANGE",
    "LAG-P50",
    "LAG-P99",
    "POLLER-ONLY",
    "REFUSED",
    "429",
    "STORED",
    "COMPASS",
)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="tether status",
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("runtime", nargs="?", help="one runtime ID (default: every runtime)")
    p.add_argument("-o", "--output", choices=("table", "json"), default="table")
    p.add_argument("--problem", choices=fleet.PROBLEMS, help="only runtimes with this problem")
    kubeargs.add(p, heartbeats=True, tether=True)
    p.add_argument(
        "--fail-on-problems",
        action="store_true",
        help="exit 1 when any shown runtime has a problem",
    )
    p.add_argument(
        "--runbook-base",
        default=os.environ.get("TETHER_ADMIN_RUNBOOK_BASE", runbooks.DEFAULT_BASE),
        help="base of the runbook links, <base>/docs/operations.md#<anchor> "
        "(default $TETHER_ADMIN_RUNBOOK_BASE, else " + runbooks.DEFAULT_BASE + ")",
    )
    return p


def table(rows: Sequence[fleet.Row], now: datetime.datetime) -> list[list[str]]:
    out = []
    for r in rows:
        d = r.delivery
        out.append(
            [
                r.runtime_id,
                ",".join(r.problems) or "-",
                "Ready" if r.enrolled == "True" else r.enrollment_reason or r.enrolled,
                views.until(r.certificate_not_after, now),
                views.ago(r.heartbeat, now),
                views.ago(d.last_change, now),
                views.seconds(d.lag_p50),
                views.seconds(d.lag_p99),
                views.share(d.poller_share),
                str(d.refusals),
                str(d.throttled),
                str(r.stored_records),
                r.compass_state or "-",
            ]
        )
    return out


def render_table(rows: Sequence[fleet.Row], now: datetime.datetime, out: TextIO) -> None:
    cells = [list(COLUMNS), *table(rows, now)]
    widths = [max(len(row[i]) for row in cells) for i in range(len(COLUMNS))]
    for row in cells:
        out.write("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() + "\n")


def one_json(
    row: fleet.Row, links: runbooks.Links, events: Sequence[parts.Event] = ()
) -> dict[str, object]:
    """One runtime as JSON: its row, each problem's runbook, its refusals in detail, its
    newest Events."""
    return {
        **fleet.as_json(row),
        "problemRunbooks": {p: links.problem(p) for p in row.problems},
        "refused": [runbooks.as_json(r) for r in runbooks.refusals(row.delivery, links)],
        "recentEvents": [parts.event_json(e) for e in events],
    }


class Loaded(NamedTuple):
    snap: snapshot.Snapshot
    row: fleet.Row | None  # the asked runtime's, its RuntimeDelivery read whole
    events: list[parts.Event]  # the newest Events about its Kyma CR and its objects
    note: str  # what could not be read


def _load(args: argparse.Namespace, s: settings_mod.Settings) -> Loaded | str:
    """The snapshot and the asked runtime's row and Events, as its page reads them; or the
    one line of a failure."""
    kcp = kubeargs.connect(args)
    if isinstance(kcp, str):
        return kcp
    notes: list[str] = []
    found: list[parts.Event] = []
    try:
        snap = snapshot.load(kcp, s)
        row = snap.by_id.get(args.runtime) if args.runtime else None
        if row is not None:
            try:
                row = row._replace(delivery=snapshot.delivery_of(kcp, s, row, snap.taken))
            except gateway.GatewayError as e:
                notes.append(
                    "its RuntimeDelivery could not be read (the listing's totals shown): "
                    + logs.bounded(e, 160)
                )
            try:
                found = snapshot.events(kcp, s, row.kyma.partition("/")[2])
            except gateway.GatewayError as e:
                notes.append("its Events could not be read: " + logs.bounded(e, 160))
    except gateway.GatewayError as e:
        return f"cannot read the KCP: {logs.bounded(e, 300)}"
    finally:
        kcp.close()
    return Loaded(snap, row, found, "; ".join(notes))


def main(argv: list[str]) -> int:
    args = parser().parse_args(argv)
    try:
        links = runbooks.Links(parsers.https_url("--runbook-base", args.runbook_base))
    except config.SettingError as e:
        print(f"tether status: {e}", file=sys.stderr)
        return 2
    s = settings_mod.Settings(
        tls_cert_file="",
        tls_key_file="",
        kcp_namespace=args.namespace,
        heartbeat_namespace=args.heartbeat_namespace,
        namespace=args.tether_namespace,
        kubeconfig=args.kubeconfig,
    )
    loaded = _load(args, s)
    if isinstance(loaded, str):
        print(f"tether status: {loaded}", file=sys.stderr)
        return 2
    snap, row, found, note = loaded
    if args.runtime is not None:
        if row is None:
            print(
                f"tether status: no Kyma CR in {args.namespace} carries runtime ID "
                f"{logs.bounded(args.runtime, 80)}",
                file=sys.stderr,
            )
            return 1
        if args.output == "json":
            json.dump(one_json(row, links, found), sys.stdout, indent=2)
            sys.stdout.write("\n")
        else:
            mapping = snap.mapping_by_kyma.get(row.kyma.partition("/")[2])
            lines = detail.lines(row, mapping, links, snap.taken, note, found)
            sys.stdout.write("\n".join(lines) + "\n")
        return 1 if args.fail_on_problems and row.problems else 0
    rows = [r for r in snap.rows if not args.problem or args.problem in r.problems]
    if args.output == "json":
        doc = {
            "listedAt": snap.taken.strftime("%Y-%m-%dT%H:%M:%SZ"),
            "missing": list(snap.missing),
            "counts": fleet.counts(snap.rows),
            "runtimes": [fleet.as_json(r) for r in rows],
        }
        json.dump(doc, sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        render_table(rows, snap.taken, sys.stdout)
        if snap.missing:
            print(f"(not served by the KCP: {', '.join(snap.missing)})", file=sys.stderr)
    return 1 if args.fail_on_problems and any(r.problems for r in rows) else 0
