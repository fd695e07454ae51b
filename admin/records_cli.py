"""``tether records RUNTIME [NAMESPACE/NAME]``: what the KCP holds for one runtime.

    tether records 4a1f...                      # every record of the runtime, as a table
    tether records 4a1f... --watch configuration -o json
    tether records 4a1f... team-a/app-config    # one record in detail (data keys and sizes)

It lists the runtime's ``RuntimeConfigMap`` objects by the label ``kyma-project.io/runtime-id``
across every namespace (a Watch stores its records in its storage namespace), with the
operator's own kubeconfig, chosen as kubectl chooses it (``--kubeconfig``, ``--context``,
``-n``: ``admin.kubeargs``). When RBAC forbids the cluster-wide list it lists ``--namespace``
(the listener's namespace) only, and says so. A record outside its Watch's storage namespace
(the Watches in ``--namespace`` say where each stores) is marked stray: the listener and the
janitor ignore it. Values are never printed unless ``--show-values`` (the keys and their sizes
are).
Exit status: 0; 1 when nothing is stored for the runtime (or the record); 2 for a usage
error or when the KCP cannot be read. Format and API: docs/api.md "Reading the records".
"""

from __future__ import annotations

import argparse
import datetime
import json
import re
import sys
from collections.abc import Iterable
from typing import Any, NamedTuple

from admin import kubeargs
from admin import recordsview as view
from tether.base import config, logs, parsers
from tether.kube import apitypes, gateway
from tether.wire import watches, watchuse

NAMESPACE_LABEL = "tether.kyma-project.io/namespace"  # listener.storage.records.NAMESPACE_LABEL
PAGE = 50  # objects per list page (whole records: up to ~1.4 MiB each)
DEFAULT_LIMIT = 500
MAX_LIMIT = 10_000
_LABEL_VALUE = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?")
_OBJECT_NAME = re.compile(r"[^\s/\x00-\x1f\x7f]{1,253}")


class Listing(NamedTuple):
    rows: list[view.Row]  # the first ``limit`` found, sorted
    objects: list[dict[str, Any]]  # with a NAMESPACE/NAME: the matching records, whole
    total: int  # how many the runtime has (matching the filter)
    scope: str  # "" (every namespace) or the one namespace listed
    note: str  # why the scope is one namespace
    checked: bool = False  # whether the Watches' storage namespaces were read (stray)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="tether records",
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("runtime", help="the runtime ID")
    p.add_argument(
        "key",
        nargs="?",
        metavar="NAMESPACE/NAME",
        help="one object of the runtime: its record(s) in detail",
    )
    p.add_argument("--watch", help="only the records of this Watch")
    p.add_argument("-o", "--output", choices=("table", "json"), default="table")
    p.add_argument(
        "--show-values",
        action="store_true",
        help="print data values too (default: keys and sizes only)",
    )
    p.add_argument(
        "--limit",
        type=int,
        default=DEFAULT_LIMIT,
        help=f"records shown at most (default {DEFAULT_LIMIT}, at most {MAX_LIMIT})",
    )
    kubeargs.add(p)
    return p


# -- pure: arguments, rows, rendering -----------------------------------------------------


def selector(runtime: str, watch: str | None, namespace: str | None) -> str:
    parts = [f"{apitypes.RUNTIME_ID_LABEL}={runtime}"]
    if watch:
        parts.append(f"{watches.WATCH_LABEL}={watch}")
    if namespace:
        parts.append(f"{NAMESPACE_LABEL}={namespace}")
    return ",".join(parts)


def check_args(args: argparse.Namespace) -> tuple[str, str] | None:
    """The NAMESPACE/NAME asked for (None: the list); raises ``config.SettingError`` naming
    the argument that is wrong (before the KCP is asked)."""
    parsers.runtime_id("RUNTIME", args.runtime)
    if args.watch is not None and not _LABEL_VALUE.fullmatch(args.watch):
        raise config.SettingError(f"--watch: {logs.bounded(args.watch, 80)!r} is not a Watch name")
    if not 1 <= args.limit <= MAX_LIMIT:
        raise config.SettingError(f"--limit: must be 1..{MAX_LIMIT}")
    if args.key is None:
        return None
    ns, sep, name = args.key.partition("/")
    if not sep or not _LABEL_VALUE.fullmatch(ns) or not _OBJECT_NAME.fullmatch(name):
        raise config.SettingError(
            f"NAMESPACE/NAME: {logs.bounded(args.key, 80)!r} is not "
            "a namespace and an object name joined by /"
        )
    return ns, name


def _items(kcp: gateway.Kube, namespace: str | None, sel: str) -> Iterable[dict[str, Any]]:
    return kcp.list_items(
        apitypes.RUNTIME_CONFIGMAPS, namespace, label_selector=sel, page_size=PAGE
    )


def homes(kcp: gateway.Kube, namespace: str) -> dict[str, str] | None:
    """Each Watch's storage namespace (``namespace``, the listener's, when it names none);
    None when the Watches cannot be read (then no record is called stray)."""
    try:
        out = {}
        for w in kcp.list_items(apitypes.WATCHES, namespace, page_size=PAGE):
            name = (w.get("metadata") or {}).get("name")
            try:
                home = watchuse.storage_namespace(w.get("spec") or {})
            except watchuse.UseError:
                continue
            if isinstance(name, str):
                out[name] = home or namespace
        return out
    except gateway.GatewayError:
        return None


def stray(row: view.Row, homes: dict[str, str] | None, namespace: str) -> bool:
    """Whether a record is where its Watch does not store (a legacy record's home is the
    listener's ``namespace``): the listener, the janitor and consumers ignore it."""
    if homes is None or (row.watch and row.watch not in homes):
        return False
    return row.kcp_namespace != (homes[row.watch] if row.watch else namespace)


def _collect(
    items: Iterable[dict[str, Any]],
    limit: int,
    name: str | None,
) -> tuple[list[view.Row], list[dict[str, Any]], int]:
    """The first ``limit`` rows (and, for ``name``, the matching objects) and the count;
    one page of whole objects in memory at a time."""
    rows: list[view.Row] = []
    objects: list[dict[str, Any]] = []
    total = 0
    for obj in items:
        row = view.row_of(obj)
        if name is not None and row.name != name:
            continue
        total += 1
        if len(rows) < limit:
            rows.append(row)
            if name is not None:
                objects.append(obj)
    rows.sort(key=lambda r: (r.watch, r.namespace, r.name, r.kcp_namespace))
    objects.sort(key=lambda o: view.row_of(o).watch)
    return rows, objects, total


def load(kcp: gateway.Kube, args: argparse.Namespace, key: tuple[str, str] | None) -> Listing:
    """The runtime's records across namespaces; the listener's namespace only when the
    cluster-wide list is forbidden. Raises ``gateway.GatewayError``."""
    sel = selector(args.runtime, args.watch, key[0] if key else None)
    name = key[1] if key else None
    scope, note = "", ""
    try:
        rows, objects, total = _collect(_items(kcp, None, sel), args.limit, name)
    except gateway.Forbidden:
        scope = args.namespace
        note = (
            f"the cluster-wide list of runtimeconfigmaps is forbidden to you: only "
            f"namespace {scope} was listed (records of Watches that store "
            "elsewhere are not shown)"
        )
        rows, objects, total = _collect(_items(kcp, scope, sel), args.limit, name)
    where = homes(kcp, args.namespace) if total else None
    rows = [r._replace(stray=stray(r, where, args.namespace)) for r in rows]
    return Listing(rows, objects, total, scope, note, where is not None)


def _fetch(args: argparse.Namespace, key: tuple[str, str] | None) -> Listing | str:
    kcp = kubeargs.connect(args)
    if isinstance(kcp, str):
        return kcp
    try:
        return load(kcp, args, key)
    except gateway.GatewayError as e:
        return f"cannot read the KCP: {logs.bounded(e, 300)}"
    finally:
        kcp.close()


def _print_list(args: argparse.Namespace, got: Listing, now: datetime.datetime) -> None:
    more = got.total - len(got.rows)
    if args.output == "json":
        doc = {
            "runtime": args.runtime,
            "listedAt": now.strftime("%Y-%m-%dT%H:%M:%SZ"),
            "namespace": got.scope or None,
            "note": got.note or None,
            "total": got.total,
            "storageChecked": got.checked,
            "records": [view.row_json(r) for r in got.rows],
        }
        json.dump(doc, sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        view.render_table(got.rows, now, sys.stdout)
    if any(r.stray for r in got.rows):
        print(
            f"({view.STRAY}: not in its Watch's storage namespace; the listener, the janitor "
            "and consumers ignore it: delete it by hand)",
            file=sys.stderr,
        )
    if more > 0:
        print(f"({more} more of {got.total} not shown: --limit, --watch)", file=sys.stderr)


def main(argv: list[str]) -> int:
    args = parser().parse_args(argv)
    try:
        key = check_args(args)
    except config.SettingError as e:
        print(f"tether records: {e}", file=sys.stderr)
        return 2
    got = _fetch(args, key)
    if isinstance(got, str):
        print(f"tether records: {got}", file=sys.stderr)
        return 2
    now = datetime.datetime.now(datetime.UTC)
    if got.note:
        print(f"tether records: {got.note}", file=sys.stderr)
    if got.total == 0:
        what = f"record {args.key}" if key else "record"
        print(
            f"tether records: no {what} stored for runtime {args.runtime}"
            f"{' under Watch ' + args.watch if args.watch else ''}",
            file=sys.stderr,
        )
        return 1
    if key is None:
        _print_list(args, got, now)
    elif args.output == "json":
        json.dump(
            [view.detail_json(o, args.show_values) for o in got.objects], sys.stdout, indent=2
        )
        sys.stdout.write("\n")
    else:
        blocks = [view.detail_lines(o, now, args.show_values) for o in got.objects]
        sys.stdout.write("\n\n".join("\n".join(b) for b in blocks) + "\n")
    return 0
