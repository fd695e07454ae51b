"""``tether records RUNTIME [NAMESPACE/NAME]``: what the KCP holds for one runtime.

    tether records 4a1f...                      # every record of the runtime, as a table
    tether records 4a1f... --watch configuration -o json
    tether records 4a1f... team-a/app-config    # one record in detail (data keys and sizes)

It lists the runtime's ``RuntimeConfigMap`` objects by the label ``kyma-project.io/runtime-id``
across every namespace (a Watch stores its records in its storage namespace), with the
operator's own kubeconfig (``--kubeconfig``, else ``$KUBECONFIG``, else in-cluster). When RBAC
forbids the cluster-wide list it lists ``--namespace`` (the listener's namespace) only, and
says so. Values are never printed unless ``--show-values`` (the keys and their sizes are).
Exit status: 0; 1 when nothing is stored for the runtime (or the record); 2 for a usage
error or when the KCP cannot be read. Format and API: docs/api.md "Reading the records".
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import sys
from collections.abc import Iterable, Mapping
from typing import Any, NamedTuple, TextIO

from admin import detail, views
from tether import apitypes, config, gateway, logs, parsers, watches

COLUMNS = ("WATCH", "NAMESPACE/NAME", "STATE", "EPOCH", "SOURCE", "OBSERVED", "KCP-NAMESPACE",
           "AGE")
NAMESPACE_LABEL = "tether.kyma-project.io/namespace"  # listener.storage.records.NAMESPACE_LABEL
PAGE = 50  # objects per list page (whole records: up to ~1.4 MiB each)
DEFAULT_LIMIT = 500
MAX_LIMIT = 10_000
VALUE_CHARS = 1000  # a value shown with --show-values in the table view, at most
_LABEL_VALUE = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?")
_OBJECT_NAME = re.compile(r"[^\s/\x00-\x1f\x7f]{1,253}")


class Row(NamedTuple):
    """One stored record, as the list shows it (no data)."""

    watch: str
    namespace: str
    name: str
    deleted: bool
    epoch: int
    source: str
    observed: str
    kcp_namespace: str
    created: str
    kyma: str


class Listing(NamedTuple):
    rows: list[Row]          # the first ``limit`` found, sorted
    objects: list[dict[str, Any]]  # with a NAMESPACE/NAME: the matching records, whole
    total: int               # how many the runtime has (matching the filter)
    scope: str               # "" (every namespace) or the one namespace listed
    note: str                # why the scope is one namespace


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="tether records", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("runtime", help="the runtime ID")
    p.add_argument("key", nargs="?", metavar="NAMESPACE/NAME",
                   help="one object of the runtime: its record(s) in detail")
    p.add_argument("--watch", help="only the records of this Watch")
    p.add_argument("-o", "--output", choices=("table", "json"), default="table")
    p.add_argument("--show-values", action="store_true",
                   help="print data values too (default: keys and sizes only)")
    p.add_argument("--limit", type=int, default=DEFAULT_LIMIT,
                   help=f"records shown at most (default {DEFAULT_LIMIT}, at most {MAX_LIMIT})")
    p.add_argument("--kubeconfig", help="kubeconfig of the KCP (default: $KUBECONFIG, else "
                   "in-cluster)")
    p.add_argument("--namespace", default=os.environ.get("TETHER_KCP_NAMESPACE", "kcp-system"),
                   help="the listener's KCP namespace, listed alone when the cluster-wide list "
                   "is forbidden (default kcp-system, or $TETHER_KCP_NAMESPACE)")
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
        raise config.SettingError(f"NAMESPACE/NAME: {logs.bounded(args.key, 80)!r} is not "
                                  "a namespace and an object name joined by /")
    return ns, name


def _str(value: object) -> str:
    return value if isinstance(value, str) else ""


def _map(obj: Mapping[str, Any], field: str) -> dict[str, Any]:
    value = obj.get(field)
    return value if isinstance(value, dict) else {}


def _epoch(value: object) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0


def row_of(obj: Mapping[str, Any]) -> Row:
    """A stored object as a row, whatever it holds (a hand-written object never raises)."""
    meta = _map(obj, "metadata")
    spec = _map(obj, "spec")
    labels = _map(meta, "labels")
    return Row(watch=_str(spec.get("watch")) or _str(labels.get(watches.WATCH_LABEL)),
               namespace=_str(spec.get("namespace")), name=_str(spec.get("name")),
               deleted=spec.get("deleted") is True, epoch=_epoch(spec.get("epoch")),
               source=_str(spec.get("source")), observed=_str(spec.get("observedAt")),
               kcp_namespace=_str(meta.get("namespace")),
               created=_str(meta.get("creationTimestamp")),
               kyma=_str(labels.get(apitypes.KYMA_NAME_LABEL)))


def parse_time(text: str) -> datetime.datetime | None:
    try:
        t = datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    return t if t.tzinfo is not None else t.replace(tzinfo=datetime.UTC)


def _when(text: str, now: datetime.datetime) -> str:
    t = parse_time(text)
    return views.ago(t, now) if t is not None else (detail.clean(logs.bounded(text, 40)) or "-")


def table(rows: Iterable[Row], now: datetime.datetime) -> list[list[str]]:
    return [[detail.clean(r.watch) or "(legacy)",
             detail.clean(logs.bounded(f"{r.namespace}/{r.name}", 120)),
             "tombstone" if r.deleted else "live", str(r.epoch),
             detail.clean(logs.bounded(r.source, 20)) or "-", _when(r.observed, now),
             detail.clean(r.kcp_namespace), _when(r.created, now).removesuffix(" ago")]
            for r in rows]


def render_table(rows: Iterable[Row], now: datetime.datetime, out: TextIO) -> None:
    cells = [list(COLUMNS), *table(rows, now)]
    widths = [max(len(row[i]) for row in cells) for i in range(len(COLUMNS))]
    for row in cells:
        out.write("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() + "\n")


def row_json(r: Row) -> dict[str, Any]:
    return {"watch": r.watch, "namespace": r.namespace, "name": r.name,
            "state": "tombstone" if r.deleted else "live", "epoch": r.epoch, "source": r.source,
            "observedAt": r.observed, "kcpNamespace": r.kcp_namespace, "created": r.created,
            "kyma": r.kyma}


def value_size(field: str, value: object) -> int:
    """Bytes of one value: ``data`` as UTF-8, ``binaryData`` decoded from base64."""
    text = value if isinstance(value, str) else ""
    if field == "binaryData":
        return len(text) * 3 // 4 - text[-2:].count("=")
    return len(text.encode())


def keys_of(spec: Mapping[str, Any]) -> list[tuple[str, str, int]]:
    """(field, key, size) of every value a record holds, sorted."""
    out = []
    for field in ("data", "binaryData"):
        values = spec.get(field)
        if isinstance(values, dict):
            out += [(field, str(k), value_size(field, v)) for k, v in values.items()]
    return sorted(out)


def _pairs(values: object, show_values: bool, indent: str = "  ") -> list[str]:
    """``key=value`` lines, each value on one line and bounded; the annotation holding a copy
    of the object (values included) is shown by its size unless ``show_values``."""
    if not isinstance(values, dict) or not values:
        return [indent + "(none)"]
    out = []
    for k, v in sorted(values.items(), key=lambda kv: str(kv[0])):
        text = _str(v)
        if k == watches.LAST_APPLIED and not show_values:
            text = f"(a copy of the object, values included, {views.size(len(text.encode()))}:" \
                " --show-values)"
        out.append(f"{indent}{detail.clean(logs.bounded(k, 253))}="
                   f"{detail.clean(logs.bounded(text, VALUE_CHARS))}")
    return out


def _facts(obj: Mapping[str, Any], row: Row, now: datetime.datetime) -> list[str]:
    meta, spec = _map(obj, "metadata"), _map(obj, "spec")
    res = _map(spec, "resource")
    kind = "/".join(x for x in (_str(res.get("group")), _str(res.get("version"))) if x)
    owners = [f"{_str(o.get('kind'))}/{_str(o.get('name'))}"
              for o in meta.get("ownerReferences") or [] if isinstance(o, dict)]
    c = detail.clean
    return [f"Stored as:   {c(_str(meta.get('name')))} in {c(row.kcp_namespace)} (KCP "
            f"resourceVersion {c(_str(meta.get('resourceVersion')))}, created "
            f"{_when(row.created, now)})",
            f"Kyma CR:     {c(row.kyma) or '- (no label ' + apitypes.KYMA_NAME_LABEL + ')'}"
            f"{'; owners: ' + c(', '.join(owners)) if owners else ''}",
            f"Kind:        {c(_str(res.get('kind')) or 'ConfigMap')} {c(kind or 'v1')}",
            f"State:       {'tombstone (the object was deleted)' if row.deleted else 'live'}",
            f"Epoch:       {row.epoch}",
            f"Source:      {c(logs.bounded(row.source, 40)) or '-'}",
            f"Version:     resourceVersion {c(logs.bounded(_str(spec.get('resourceVersion')), 40))}"
            f" in the runtime, uid {c(logs.bounded(_str(spec.get('uid')), 40)) or '-'}",
            f"Observed:    {_when(row.observed, now)} ({c(logs.bounded(row.observed, 40))})"]


def detail_lines(obj: Mapping[str, Any], now: datetime.datetime, show_values: bool) -> list[str]:
    """One stored record in detail: where, which Kyma CR, state, version, the runtime
    object's labels and annotations, its data keys with sizes (values: ``show_values``)."""
    row = row_of(obj)
    spec = _map(obj, "spec")
    meta = _map(obj, "metadata")
    out = [f"Record {detail.clean(row.namespace)}/{detail.clean(row.name)} "
           f"(Watch {detail.clean(row.watch) or '- (legacy)'})", "", *_facts(obj, row, now), "",
           "Labels of the object:", *_pairs(spec.get("labels"), show_values),
           "Annotations of the object:", *_pairs(spec.get("annotations"), show_values),
           "Labels of the stored record (select on these):",
           *_pairs(meta.get("labels"), show_values)]
    keys = keys_of(spec)
    total = sum(size for _, _, size in keys)
    shown = "" if show_values else "; values not shown (--show-values)"
    out += ["", f"Values: {len(keys)} keys, {views.size(total)}{shown}"]
    if keys:
        cells = [["FIELD", "KEY", "SIZE"] + (["VALUE"] if show_values else [])]
        for field, key, size in keys:
            cell = [field, detail.clean(logs.bounded(key, 253)), views.size(size)]
            if show_values:
                cell.append(detail.clean(logs.bounded(_str(spec[field][key]), VALUE_CHARS)))
            cells.append(cell)
        widths = [max(len(r[i]) for r in cells) for i in range(len(cells[0]))]
        out += [("  " + "  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True))).rstrip()
                for r in cells]
    return out


def detail_json(obj: Mapping[str, Any], show_values: bool) -> dict[str, Any]:
    """One stored record as JSON: its row, metadata and record; values only with
    ``show_values`` (else ``keys``: field, key and size of each)."""
    spec = dict(_map(obj, "spec"))
    meta = _map(obj, "metadata")
    keys = keys_of(spec)
    if not show_values:
        spec.pop("data", None)
        spec.pop("binaryData", None)
        ann = spec.get("annotations")
        if isinstance(ann, dict) and watches.LAST_APPLIED in ann:
            spec["annotations"] = {k: v for k, v in ann.items() if k != watches.LAST_APPLIED}
    return {**row_json(row_of(obj)), "kcpName": _str(meta.get("name")),
            "kcpResourceVersion": _str(meta.get("resourceVersion")),
            "labels": meta.get("labels") or {}, "annotations": meta.get("annotations") or {},
            "ownerReferences": meta.get("ownerReferences") or [],
            "keys": [{"field": f, "key": k, "size": s} for f, k, s in keys],
            "record": spec}


# -- the KCP ----------------------------------------------------------------------------


def _items(kcp: gateway.Kube, namespace: str | None, sel: str) -> Iterable[dict[str, Any]]:
    return kcp.list_items(apitypes.RUNTIME_CONFIGMAPS, namespace, label_selector=sel,
                          page_size=PAGE)


def _collect(items: Iterable[dict[str, Any]], limit: int, name: str | None,
             ) -> tuple[list[Row], list[dict[str, Any]], int]:
    """The first ``limit`` rows (and, for ``name``, the matching objects) and the count;
    one page of whole objects in memory at a time."""
    rows: list[Row] = []
    objects: list[dict[str, Any]] = []
    total = 0
    for obj in items:
        row = row_of(obj)
        if name is not None and row.name != name:
            continue
        total += 1
        if len(rows) < limit:
            rows.append(row)
            if name is not None:
                objects.append(obj)
    rows.sort(key=lambda r: (r.watch, r.namespace, r.name, r.kcp_namespace))
    objects.sort(key=lambda o: row_of(o).watch)
    return rows, objects, total


def load(kcp: gateway.Kube, args: argparse.Namespace, key: tuple[str, str] | None) -> Listing:
    """The runtime's records across namespaces; the listener's namespace only when the
    cluster-wide list is forbidden. Raises ``gateway.GatewayError``."""
    sel = selector(args.runtime, args.watch, key[0] if key else None)
    name = key[1] if key else None
    try:
        rows, objects, total = _collect(_items(kcp, None, sel), args.limit, name)
        return Listing(rows, objects, total, "", "")
    except gateway.Forbidden:
        note = (f"the cluster-wide list of runtimeconfigmaps is forbidden to you: only "
                f"namespace {args.namespace} was listed (records of Watches that store "
                "elsewhere are not shown)")
    rows, objects, total = _collect(_items(kcp, args.namespace, sel), args.limit, name)
    return Listing(rows, objects, total, args.namespace, note)


def _fetch(args: argparse.Namespace, key: tuple[str, str] | None) -> Listing | str:
    try:
        kcp = gateway.from_kubeconfig(args.kubeconfig)
    except gateway.KubeConfigError as e:
        return f"--kubeconfig: {e}"
    try:
        return load(kcp, args, key)
    except gateway.GatewayError as e:
        return f"cannot read the KCP: {logs.bounded(e, 300)}"
    finally:
        kcp.close()


def _print_list(args: argparse.Namespace, got: Listing, now: datetime.datetime) -> None:
    more = got.total - len(got.rows)
    if args.output == "json":
        doc = {"runtime": args.runtime, "listedAt": now.strftime("%Y-%m-%dT%H:%M:%SZ"),
               "namespace": got.scope or None, "note": got.note or None, "total": got.total,
               "records": [row_json(r) for r in got.rows]}
        json.dump(doc, sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        render_table(got.rows, now, sys.stdout)
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
        print(f"tether records: no {what} stored for runtime {args.runtime}"
              f"{' under Watch ' + args.watch if args.watch else ''}", file=sys.stderr)
        return 1
    if key is None:
        _print_list(args, got, now)
    elif args.output == "json":
        json.dump([detail_json(o, args.show_values) for o in got.objects], sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        blocks = [detail_lines(o, now, args.show_values) for o in got.objects]
        sys.stdout.write("\n\n".join("\n".join(b) for b in blocks) + "\n")
    return 0
