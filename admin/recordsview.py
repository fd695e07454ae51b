"""What ``tether records`` prints (pure): one stored ``RuntimeConfigMap`` as a row of the
table, or in detail; data values only when asked (else their keys and sizes). Every value
from the KCP is printed on one line (control characters as ``?``) and bounded; an object
written by hand never makes it raise."""

from __future__ import annotations

import datetime
from collections.abc import Iterable, Mapping
from typing import Any, NamedTuple, TextIO

from admin import detail, views
from tether.base import logs
from tether.kube import apitypes
from tether.wire import watches, watchkinds

COLUMNS = (
    "WATCH",
    "NAMESPACE/NAME",
    "STATE",
    "EPOCH",
    "SOURCE",
    "OBSERVED",
    "KCP-NAMESPACE",
    "AGE",
)
STRAY = "stray"  # marks a record not in its Watch's storage namespace
VALUE_CHARS = 1000  # a value shown with --show-values in the table view, at most


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
    stray: bool = False  # not in its Watch's storage namespace: ignored by the listener


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
    return Row(
        watch=_str(spec.get("watch")) or _str(labels.get(watches.WATCH_LABEL)),
        namespace=_str(spec.get("namespace")),
        name=_str(spec.get("name")),
        deleted=spec.get("deleted") is True,
        epoch=_epoch(spec.get("epoch")),
        source=_str(spec.get("source")),
        observed=_str(spec.get("observedAt")),
        kcp_namespace=_str(meta.get("namespace")),
        created=_str(meta.get("creationTimestamp")),
        kyma=_str(labels.get(apitypes.KYMA_NAME_LABEL)),
    )


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
    return [
        [
            detail.clean(r.watch) or "(legacy)",
            detail.clean(logs.bounded(f"{r.namespace}/{r.name}", 120)),
            "tombstone" if r.deleted else "live",
            str(r.epoch),
            detail.clean(logs.bounded(r.source, 20)) or "-",
            _when(r.observed, now),
            detail.clean(r.kcp_namespace) + (f" ({STRAY})" if r.stray else ""),
            _when(r.created, now).removesuffix(" ago"),
        ]
        for r in rows
    ]


def render_table(rows: Iterable[Row], now: datetime.datetime, out: TextIO) -> None:
    cells = [list(COLUMNS), *table(rows, now)]
    widths = [max(len(row[i]) for row in cells) for i in range(len(COLUMNS))]
    for row in cells:
        out.write("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() + "\n")


def row_json(r: Row) -> dict[str, Any]:
    return {
        "watch": r.watch,
        "namespace": r.namespace,
        "name": r.name,
        "state": "tombstone" if r.deleted else "live",
        "epoch": r.epoch,
        "source": r.source,
        "observedAt": r.observed,
        "kcpNamespace": r.kcp_namespace,
        "created": r.created,
        "kyma": r.kyma,
        "stray": r.stray,
    }


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
        if k == watchkinds.LAST_APPLIED and not show_values:
            text = (
                f"(a copy of the object, values included, {views.size(len(text.encode()))}:"
                " --show-values)"
            )
        out.append(
            f"{indent}{detail.clean(logs.bounded(k, 253))}="
            f"{detail.clean(logs.bounded(text, VALUE_CHARS))}"
        )
    return out


def _facts(obj: Mapping[str, Any], row: Row, now: datetime.datetime) -> list[str]:
    meta, spec = _map(obj, "metadata"), _map(obj, "spec")
    res = _map(spec, "resource")
    kind = "/".join(x for x in (_str(res.get("group")), _str(res.get("version"))) if x)
    owners = [
        f"{_str(o.get('kind'))}/{_str(o.get('name'))}"
        for o in meta.get("ownerReferences") or []
        if isinstance(o, dict)
    ]
    c = detail.clean
    return [
        f"Stored as:   {c(_str(meta.get('name')))} in {c(row.kcp_namespace)} (KCP "
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
        f"Observed:    {_when(row.observed, now)} ({c(logs.bounded(row.observed, 40))})",
    ]


def detail_lines(obj: Mapping[str, Any], now: datetime.datetime, show_values: bool) -> list[str]:
    """One stored record in detail: where, which Kyma CR, state, version, the runtime
    object's labels and annotations, its data keys with sizes (values: ``show_values``)."""
    row = row_of(obj)
    spec = _map(obj, "spec")
    meta = _map(obj, "metadata")
    out = [
        f"Record {detail.clean(row.namespace)}/{detail.clean(row.name)} "
        f"(Watch {detail.clean(row.watch) or '- (legacy)'})",
        "",
        *_facts(obj, row, now),
        "",
        "Labels of the object:",
        *_pairs(spec.get("labels"), show_values),
        "Annotations of the object:",
        *_pairs(spec.get("annotations"), show_values),
        "Labels of the stored record (select on these):",
        *_pairs(meta.get("labels"), show_values),
    ]
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
        out += [
            ("  " + "  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True))).rstrip()
            for r in cells
        ]
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
        if isinstance(ann, dict) and watchkinds.LAST_APPLIED in ann:
            spec["annotations"] = {k: v for k, v in ann.items() if k != watchkinds.LAST_APPLIED}
    return {
        **row_json(row_of(obj)),
        "kcpName": _str(meta.get("name")),
        "kcpResourceVersion": _str(meta.get("resourceVersion")),
        "labels": meta.get("labels") or {},
        "annotations": meta.get("annotations") or {},
        "ownerReferences": meta.get("ownerReferences") or [],
        "keys": [{"field": f, "key": k, "size": s} for f, k, s in keys],
        "record": spec,
    }
