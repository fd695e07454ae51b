"""Why a runtime's object was or was not sent: the pure decision behind ``tether explain``.

For one object of a runtime (its kind, namespace, name and, when known, labels) and the
Watches in the KCP: which Watches are in force for the runtime (a Watch's runtime selector
and module over the Kyma CR: ``watches.in_force``), and for each whether it takes the object
and, when not, the first reason (kind, namespace, a name never sent, its selector). The
runtime's storage quota and its recent deliveries of the object come from its
``RuntimeDelivery`` summary. Plain data in, plain data out; ``admin.explain_cli`` reads.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, NamedTuple

from tether.wire import delivery, filters, watches

_LABEL = re.compile(r"^[-._/A-Za-z0-9]{1,316}=[-._A-Za-z0-9]{0,63}$")


class Verdict(NamedTuple):
    watch: str
    takes: bool | None  # None: its selector decides and the object's labels are unknown
    why: str


class NotInForce(NamedTuple):
    watch: str
    why: str


class Explanation(NamedTuple):
    verdicts: list[Verdict]  # the Watches in force for the runtime, by name
    not_in_force: list[NotInForce]  # the other valid Watches, and why not
    invalid: dict[str, str]  # Watches that cannot be used: name -> the problem
    left_out: list[str]  # in force but over watches.MAX_WATCHES
    quota: str  # "" or what the runtime's stored records say of its quota
    deliveries: list[dict[str, Any]]  # its recent deliveries of the object, newest first
    refused: list[tuple[str, Mapping[str, Any]]]  # (reason, last refusal) of the object


def parse_labels(text: str) -> dict[str, str]:
    """``k=v,k2=v2`` (``--labels``); raises ValueError naming the bad item."""
    out: dict[str, str] = {}
    for item in (i.strip() for i in text.split(",")):
        if not item:
            continue
        if not _LABEL.match(item):
            raise ValueError(f"not a label key=value: {item[:80]!r}")
        k, _, v = item.partition("=")
        out[k] = v
    return out


def judge(
    w: watches.Watch,
    target: tuple[str, str],
    namespace: str,
    name: str,
    labels: Mapping[str, str] | None,
) -> Verdict:
    """Whether ``w`` takes the object of ``target`` (apiVersion, kind), and why not."""
    api_version, kind = target
    if (w.target.api_version, w.target.kind) != (api_version, kind):
        return Verdict(w.name, False, f"it watches {w.target.kind} ({w.target.api_version})")
    if namespace in watches.ALWAYS_IGNORED_NAMESPACES:
        return Verdict(w.name, False, f"namespace {namespace} is never watched")
    if namespace in w.ignored_namespaces:
        return Verdict(w.name, False, f"it ignores namespace {namespace}")
    if w.namespaces and namespace not in w.namespaces:
        return Verdict(w.name, False, f"namespace {namespace} is not among {list(w.namespaces)}")
    if watches.never_sent(w.target, name):
        return Verdict(w.name, False, f"{kind} {name} is never sent")
    sends = f"sends it ({w.mode}" + (f": {', '.join(w.keys)}" if w.keys else "") + ")"
    if not w.selector:
        return Verdict(w.name, True, sends)
    if labels is None:
        return Verdict(
            w.name, None, f"its selector {w.selector_text!r} decides (labels unknown: --labels)"
        )
    if filters.selector_matches(w.selector, labels):
        return Verdict(w.name, True, sends)
    return Verdict(w.name, False, f"its labels do not match its selector {w.selector_text!r}")


def _not_in_force(w: watches.Watch, kyma_labels: Mapping[str, str], mods: frozenset[str]) -> str:
    if w.module and w.module not in mods:
        return f"module {w.module} is not enabled in the Kyma CR"
    return f"the Kyma CR's labels do not match its runtime selector {w.runtime_selector_text!r}"


def _quota(summary: delivery.Summary) -> str:
    stored, limit = summary.stored.get("records", 0), summary.stored.get("recordLimit", 0)
    at_quota = bool(limit) and stored >= limit
    refused = {r: n for r, n in summary.refused.items() if r.startswith("quota_")}
    if not at_quota and not refused:
        return ""
    parts = [f"{stored} of {limit} records stored"] if limit else []
    parts += [f"{n} refused for {r} in the last hour" for r, n in sorted(refused.items())]
    return ("at its quota: " if at_quota else "") + "; ".join(parts)


def explain(
    watch_objects: Iterable[Mapping[str, Any]],
    kyma: Mapping[str, Any],
    target: tuple[str, str],
    namespace: str,
    name: str,
    labels: Mapping[str, str] | None,
    summary: delivery.Summary | None,
) -> Explanation:
    valid, invalid = watches.parse_all(watch_objects)
    kept, over = watches.in_force_capped(valid, kyma)
    kyma_labels = (kyma.get("metadata") or {}).get("labels") or {}
    mods = watches.modules_of(kyma)
    names = {w.name for w in kept} | set(over)
    return Explanation(
        verdicts=[judge(w, target, namespace, name, labels) for w in kept],
        not_in_force=sorted(
            NotInForce(w.name, _not_in_force(w, kyma_labels, mods))
            for w in valid
            if w.name not in names
        ),
        invalid=invalid,
        left_out=list(over),
        quota="" if summary is None else _quota(summary),
        deliveries=_of_object(summary.recent if summary else [], namespace, name),
        refused=sorted(
            (r, last)
            for r, last in (summary.last_refused.items() if summary else [])
            if last.get("namespace") == namespace and last.get("name") == name
        ),
    )


def _of_object(
    recent: Sequence[Mapping[str, Any]], namespace: str, name: str
) -> list[dict[str, Any]]:
    return [dict(r) for r in recent if r.get("namespace") == namespace and r.get("name") == name]
