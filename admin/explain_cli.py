"""``tether explain RUNTIME NAMESPACE/NAME``: why an object of a runtime was or was not sent.

    tether explain rt-4a1f team-a/app-config
    tether explain rt-4a1f team-a/app-config --labels app=shop,tier=web
    tether explain rt-4a1f team-a/db --kind Secret -o json

It reads, with the operator's kubeconfig (``admin.kubeargs``), the runtime's Kyma CR, the
Watches in ``--namespace`` and the runtime's RuntimeDelivery, and says (``admin.explain``):
which Watches are in force for the runtime and, for each, whether it takes the object and
otherwise why not (kind, namespace, a name never sent, its selector: give the object's labels
with ``--labels``, else a selector is reported as deciding); the Watches not in force and why
(runtime selector, module); Watches that cannot be used; the runtime's storage quota when it
is reached or refused records; what the webhook and the poller delivered of the object in the
last hour (source, outcome) and its last refusals; the records the KCP stores for it (as
``tether records RUNTIME NAMESPACE/NAME``). It reads nothing from the runtime itself.
Exit status: 0; 1 when no Kyma CR (or more than one) carries the runtime ID; 2 for a usage
error or when the KCP cannot be read.
"""

from __future__ import annotations

import argparse
import datetime
import json
import sys
from typing import Any, NamedTuple

from admin import detail, explain, kubeargs, records_cli
from admin import recordsview as view
from tether.base import config
from tether.kube import apitypes, gateway
from tether.wire import delivery


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="tether explain",
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("runtime", help="the runtime ID")
    p.add_argument("key", metavar="NAMESPACE/NAME", help="the object in the runtime")
    p.add_argument("--kind", default="ConfigMap", help="its kind (default ConfigMap)")
    p.add_argument("--api-version", default="v1", help="its apiVersion (default v1)")
    p.add_argument("--labels", help="its labels, k=v,k2=v2 (default: unknown)")
    p.add_argument("-o", "--output", choices=("text", "json"), default="text")
    kubeargs.add(p)
    return p


class Read(NamedTuple):
    kyma: dict[str, Any]  # the runtime's Kyma CR, as served
    watches: list[dict[str, Any]]  # the Watch CRs in --namespace
    summary: delivery.Summary | None  # its RuntimeDelivery's (None: it has none)
    stored: records_cli.Listing  # the records the KCP holds for the object


def _read(kcp: gateway.Kube, args: argparse.Namespace, key: tuple[str, str]) -> Read | str:
    rid = args.runtime
    label = f"{apitypes.RUNTIME_ID_LABEL}={rid}"
    found_kyma = kubeargs.kyma_of(kcp, args.namespace, rid)
    if isinstance(found_kyma, str):
        return found_kyma
    found = kcp.list_items(apitypes.WATCHES, args.namespace, page_size=records_cli.PAGE)
    deliveries = kcp.list(apitypes.RUNTIME_DELIVERIES, args.namespace, label_selector=label)
    objs = deliveries.get("items") or []
    now = datetime.datetime.now(datetime.UTC)
    summary = delivery.summarize(objs[0].get("status"), now) if objs else None
    try:
        listed = records_cli.load(
            kcp,
            argparse.Namespace(runtime=rid, watch=None, namespace=args.namespace, limit=20),
            key,
        )
    except gateway.Forbidden:  # the rest still answers; say what is missing
        listed = records_cli.Listing(
            [], [], 0, args.namespace, "your identity may not list the records (RBAC)"
        )
    return Read(found_kyma, list(found), summary, listed)


def _text(e: explain.Explanation, args: argparse.Namespace, listed: records_cli.Listing) -> str:
    obj = f"{args.kind} {args.key} ({args.api_version})"
    out = [f"{obj} in runtime {args.runtime}", ""]
    takes = [v for v in e.verdicts if v.takes]
    out.append(
        "Taken by: " + ", ".join(v.watch for v in takes)
        if takes
        else "Taken by: no Watch in force"
        + (" (its labels decide)" if any(v.takes is None for v in e.verdicts) else "")
    )
    out += ["", "Watches in force:" if e.verdicts else "Watches in force: none"]
    out += [
        f"  {v.watch}: {'yes' if v.takes else 'maybe' if v.takes is None else 'no'}, {v.why}"
        for v in e.verdicts
    ]
    out += [
        f"  {n}: in force, over the limit of Watches per runtime (not installed)"
        for n in e.left_out
    ]
    if e.not_in_force:
        out += ["", "Watches not in force for this runtime:"]
        out += [f"  {n.watch}: {n.why}" for n in e.not_in_force]
    if e.invalid:
        out += ["", "Watches that cannot be used:"]
        out += [f"  {name}: {why}" for name, why in sorted(e.invalid.items())]
    if e.quota:
        out += ["", f"Quota: {e.quota}"]
    out += [
        "",
        "Delivered in the last hour:" if e.deliveries else "Delivered in the last hour: nothing",
    ]
    out += [
        f"  {d.get('at', '')}  {d.get('source', '')}  {d.get('outcome', '')}"
        + (f" ({d['reason']})" if d.get("reason") else "")
        for d in e.deliveries
    ]
    out += [
        f"  last refused for {r}: {last.get('at', '')}, status {last.get('status', '')}"
        for r, last in e.refused
    ]
    stored = "Stored in the KCP:" if listed.rows else "Stored in the KCP: no record"
    out += ["", stored if not listed.note or listed.rows else "Stored in the KCP: unknown"]
    out += [
        f"  watch {r.watch or '-'}: {'tombstone' if r.deleted else 'live'}, epoch {r.epoch},"
        f" by the {r.source}, observed {r.observed}, in {r.kcp_namespace}"
        for r in listed.rows
    ]
    if listed.note:
        out.append(f"  ({listed.note})")
    return "\n".join(detail.clean(line) for line in out)


def main(argv: list[str]) -> int:
    args = parser().parse_args(argv)
    labels = None
    try:
        key = records_cli.check_args(
            argparse.Namespace(runtime=args.runtime, watch=None, limit=20, key=args.key)
        )
        assert key is not None  # the argument is required
        if args.labels is not None:
            labels = explain.parse_labels(args.labels)
    except (config.SettingError, ValueError) as e:
        print(f"tether explain: {e}", file=sys.stderr)
        return 2
    return kubeargs.run("explain", args, lambda kcp: _explain(kcp, args, key, labels))


def _explain(
    kcp: gateway.Kube,
    args: argparse.Namespace,
    key: tuple[str, str],
    labels: dict[str, str] | None,
) -> int:
    got = _read(kcp, args, key)
    if isinstance(got, str):
        print(f"tether explain: {got}", file=sys.stderr)
        return 1
    kyma_obj, watch_objects, summary, listed = got
    why = explain.explain(
        watch_objects, kyma_obj, (args.api_version, args.kind), key[0], key[1], labels, summary
    )
    if args.output == "json":
        doc = {
            "runtime": args.runtime,
            "object": {
                "apiVersion": args.api_version,
                "kind": args.kind,
                "namespace": key[0],
                "name": key[1],
            },
            "takenBy": [v.watch for v in why.verdicts if v.takes],
            "watches": [v._asdict() for v in why.verdicts],
            "notInForce": [n._asdict() for n in why.not_in_force],
            "invalid": why.invalid,
            "leftOut": why.left_out,
            "quota": why.quota or None,
            "delivered": why.deliveries,
            "refused": [{"reason": r, **last} for r, last in why.refused],
            "stored": [view.row_json(r) for r in listed.rows],
        }
        json.dump(doc, sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        sys.stdout.write(_text(why, args, listed) + "\n")
    return 0
