"""What the enroller carries to a runtime of the Watches in force there: the list in the
runtime's ``tether-watches`` ConfigMap (read by its webhook and poller, ``tether.wire.watchset``)
and one webhook of the runtime's ``ValidatingWebhookConfiguration`` per Watch, so the API
server calls the webhook only for what some Watch covers. Pure decisions on plain data."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping, Sequence
from typing import Any

from tether.wire import filters
from tether.wire.watches import (
    ALWAYS_IGNORED_NAMESPACES,
    MAX_WATCHES,
    NEVER_SENT,
    OPERATIONS,
    Watch,
    WatchError,
    parse,
)

WIRE_KEY = "watches.json"  # key of the runtime's ConfigMap carrying the Watches in force there
WIRE_CONFIGMAP = "tether-watches"  # in tether-system of every runtime
WIRE_VERSION = 1
# the bundle webhook's matchConditions that compare a ConfigMap's fields: kept only for kinds
# holding their values there (an update of a custom resource's spec would not call the webhook)
DATA_ONLY_CONDITIONS = ("content-changed",)


def to_wire(watches: Sequence[Watch]) -> str:
    """The Watches in force in a runtime, as the ``tether-watches`` ConfigMap carries them
    (deterministic: equal sets give equal text, so an unchanged set is not re-applied)."""
    return json.dumps(
        {
            "version": WIRE_VERSION,
            "watches": [
                {
                    "name": w.name,
                    "generation": w.generation,
                    "resource": w.target.wire(),
                    "namespaces": list(w.namespaces),
                    "ignoredNamespaces": list(w.ignored_namespaces),
                    "selector": w.selector_text,
                    "mode": w.mode,
                    "keys": list(w.keys),
                }
                for w in sorted(watches, key=lambda w: w.name)
            ],
        },
        sort_keys=True,
    )


def from_wire(text: str) -> tuple[Watch, ...]:
    """The Watches a runtime holds (``to_wire``'s text); ``WatchError`` when unusable."""
    try:
        doc = json.loads(text)
    except ValueError:
        raise WatchError(f"{WIRE_KEY}: not JSON") from None
    if (
        not isinstance(doc, Mapping)
        or doc.get("version") != WIRE_VERSION
        or not isinstance(doc.get("watches"), list)
    ):
        raise WatchError(f"{WIRE_KEY}: not version {WIRE_VERSION} of the watch list")
    if len(doc["watches"]) > MAX_WATCHES:
        raise WatchError(f"{WIRE_KEY}: more than {MAX_WATCHES} watches")
    out = []
    for i, d in enumerate(doc["watches"]):
        if not isinstance(d, Mapping):
            raise WatchError(f"{WIRE_KEY}: watches[{i}] is not an object")
        try:
            sel = d.get("selector") or ""
            filters.parse_selector(sel)
        except filters.SelectorError as e:
            raise WatchError(f"{WIRE_KEY}: watches[{i}].selector: {e}") from None
        w = parse(
            {
                "metadata": {"name": d.get("name"), "generation": d.get("generation")},
                "spec": {
                    "resource": d.get("resource"),
                    "namespaces": d.get("namespaces"),
                    "ignoredNamespaces": d.get("ignoredNamespaces"),
                    "send": {"mode": d.get("mode"), "keys": d.get("keys") or None},
                },
            }
        )
        out.append(dataclasses.replace(w, selector_text=sel))
    return tuple(out)


def label_selector(text: str) -> dict[str, Any]:
    """Selector text (as ``selector_text`` writes it) as a Kubernetes ``LabelSelector``."""
    exprs: list[dict[str, Any]] = []
    for r in filters.parse_selector(text):
        if r.operator == "=":
            exprs.append({"key": r.key, "operator": "In", "values": sorted(r.values)})
        elif r.operator in ("in", "notin", "!="):
            op = "In" if r.operator == "in" else "NotIn"
            exprs.append({"key": r.key, "operator": op, "values": sorted(r.values)})
        else:
            exprs.append(
                {"key": r.key, "operator": "Exists" if r.operator == "exists" else "DoesNotExist"}
            )
    return {"matchExpressions": exprs} if exprs else {}


def _holds_data(w: Watch) -> bool:
    """Whether the Watch's kind keeps its values in ``data``/``binaryData`` (the bundle's
    ``content-changed`` condition compares only those, labels and annotations)."""
    return (w.target.group, w.target.kind) in (("", "ConfigMap"), ("", "Secret"))


def _resources(w: Watch) -> list[str]:
    """The rule's resources: a custom resource's ``status`` subresource too (a controller
    writes its status there, and a status Watch must see it); ConfigMaps and Secrets have none."""
    return (
        [w.target.resource]
        if _holds_data(w)
        else [w.target.resource, f"{w.target.resource}/status"]
    )


def webhook_name(w: Watch) -> str:
    return f"{w.name}.watches.tether.kyma-project.io"


def webhook_entries(watches: Sequence[Watch], template: Mapping[str, Any]) -> list[dict[str, Any]]:
    """One webhook of a ``ValidatingWebhookConfiguration`` per Watch, from the bundle's
    webhook ``template`` (client config, failure policy, timeouts): rules for its resource,
    its label selector as ``objectSelector``, its namespaces as ``namespaceSelector`` (on
    the ``kubernetes.io/metadata.name`` label every namespace carries), the template's
    ``matchConditions`` (``content-changed`` only for kinds whose values are in ``data``)
    and the names never sent; the API server then calls the webhook only for what some
    Watch covers."""
    out = []
    for w in sorted(watches, key=lambda w: w.name):
        hook = json.loads(json.dumps(template))
        ignored = sorted({*ALWAYS_IGNORED_NAMESPACES, *w.ignored_namespaces})
        ns_exprs: list[dict[str, Any]] = [
            {"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": ignored}
        ]
        if w.namespaces:
            ns_exprs.append(
                {
                    "key": "kubernetes.io/metadata.name",
                    "operator": "In",
                    "values": sorted(w.namespaces),
                }
            )
        conditions = [
            c
            for c in template.get("matchConditions") or ()
            if c.get("name") not in DATA_ONLY_CONDITIONS or _holds_data(w)
        ]
        conditions += [
            {"name": f"not-{name.replace('.', '-')}", "expression": f"request.name != '{name}'"}
            for g, k, name in NEVER_SENT
            if (g, k) == (w.target.group, w.target.kind)
        ]
        hook.update(
            {
                "name": webhook_name(w),
                "rules": [
                    {
                        "apiGroups": [w.target.group],
                        "apiVersions": [w.target.version],
                        "resources": _resources(w),
                        "operations": list(OPERATIONS),
                        "scope": "Namespaced",
                    }
                ],
                "namespaceSelector": {"matchExpressions": ns_exprs},
                "objectSelector": label_selector(w.selector_text),
            }
        )
        if conditions:
            hook["matchConditions"] = conditions
        else:
            hook.pop("matchConditions", None)
        out.append(hook)
    return out
