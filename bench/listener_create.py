"""Benchmark: creates of new records through the listener into a real KCP apiserver, against
direct creates of the same objects with the same concurrency, same run; the listener at its
default persist concurrency and at 1 (one record of a batch after another), same run.

Starts one KCP control plane, installs the Kyma stand-in and the listener's CRDs, two Kyma
CRs and two listeners (`python -m listener.main`: gunicorn gthread, mTLS, the least-privilege
Role, WORKERS x THREADS) from a `git archive` of NEW_REF (default HEAD; its CRDs and Role are
installed), so that uncommitted work in the checkout is not measured: one at
TETHER_LISTENER_PERSIST_CONCURRENCY=--concurrency (default 8, the setting's default), one at
1. Then, with THREADS concurrent senders, N new objects per variant:

  direct      one POST per object through the listener's own raw client (tether.kube.gateway:
              the same client and JSON path the listener writes with; the kubernetes typed
              client spent ~1.25 ms CPU per record, which flattered the ratio) as the
              listener's own user and Role into the listener's namespace, so both paths are
              authorized alike (--direct-as admin: the cluster admin into a namespace of its
              own); it stores the listener's stored form of each record (its Watch, kind
              and epoch, the owner reference and label of the Kyma CR, the size
              annotation, a traceparent:
              the same content and size, taken from one record sent through each
              listener before the measured slices; --direct-body record: the record's
              bare body, about 20 % smaller, which the KCP spent ~0.6 ms less CPU on)
  listener    batches of BATCH new records at the default persist concurrency
  listener-c1 the same at persist concurrency 1 (the listener before concurrent persists)
  listener-1  one new record per request (the webhook forwarder's case)

Variants alternate over ROUNDS slices of the objects (their order rotating) so that load
drift on a shared machine hits all alike. ratio = listener records/s / direct records/s.
CPU ratio = CPU per record of the direct path (KCP apiserver + etcd + this process) / that
of the listener path (the same + the listener's processes), from /proc: with the cores
saturated the rate follows it, and it moves less than the wall clock with other load.
The KCP apiserver's own request count (``apiserver_request_total``, scraped around each
slice) gives the RuntimeConfigMap requests per record by verb, and every other resource's
requests per BATCH records (the state summary's merges, the delivery counts, Leases, Watch
lists: what the listener adds per request; the idle listener's background too). The
stored size of one record of each path (JSON: object, metadata, managedFields, spec), the
state summary's, and how many connections to the KCP each listener opened beyond its
client's pool (urllib3's "Connection pool is full" lines: a TLS handshake each) are
recorded. Prints a table and writes bench/results/listener_create.json.

    .venv/bin/python bench/listener_create.py [--objects 3200] [--threads 8] [--batch 25]
        [--new-ref HEAD] [--concurrency 8] [--direct-as listener] [--direct-body listener]
    .venv/bin/python bench/listener_create.py --report [--out FILE]   # the table from the JSON

The JSON (``--out``) records the commit, load average and command (bench/provenance.py).

Each slice must give every sender something to do: with 400 objects, a slice of 100 was
4 batches of 25 for 8 senders (4 idle, against 8 busy direct writers), which measured
the listener at about 0.7 of what it does with all senders busy; the default is 3,200
(800 per slice, 32 batches) and the bench refuses fewer than THREADS x BATCH x ROUNDS.
"""

from __future__ import annotations

import argparse
import collections
import concurrent.futures
import json
import os
import pathlib
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping
from typing import Any

import provenance
import skeleton
from kubernetes import client
from prometheus_client.parser import text_string_to_metric_families

from listener.fleet import summaryobject
from listener.storage import records, rules
from testing import controlplane, cpuset
from testing import listenerenv as lt
from tether.kube import apitypes, gateway
from tether.wire import changes, conversion

ROUNDS = 4


def make_records(rid: str, prefix: str, n: int) -> list[dict[str, Any]]:
    out = []
    for i in range(n):
        data = {f"key-{k}": f"value-{i}-{k}-" + "x" * 40 for k in range(16)}
        out.append(
            dict(
                conversion.from_configmap(
                    {
                        "metadata": {
                            "namespace": "team-a",
                            "name": f"{prefix}-{i:05d}",
                            "uid": f"u-{i}",
                            "resourceVersion": str(1000 + i),
                            "labels": {"app": "bench"},
                        },
                        "data": data,
                    },
                    runtime_id=rid,
                    source="webhook",
                )
            )
        )
    return out


def _cpu_seconds(pid: int) -> float:
    """User + system CPU of one process so far (0 when it is gone)."""
    try:
        fields = pathlib.Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (FileNotFoundError, ProcessLookupError):
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _children(root: int) -> list[int]:
    out = [root]
    for d in pathlib.Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                ppid = int((d / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            if ppid == root:
                out.append(int(d.name))
    return out


class CpuMeter:
    """CPU seconds spent by each part during a slice: the listeners (gunicorn arbiter and
    workers), the KCP's kube-apiserver and etcd, and this process (the senders and the
    direct writer). On a shared 2-core machine the wall-clock ratio moves with whatever
    else runs; the CPU each part spends per record does not."""

    def __init__(
        self, listeners: dict[str, lt.ListenerProcess], kcp: controlplane.ControlPlane
    ) -> None:
        self.parts: dict[str, list[int]] = {
            f"listener-{k}": _children(p.proc.pid) for k, p in listeners.items()
        }
        self.parts["kcp"] = [
            p.popen.pid
            for p in (kcp._etcd, kcp._apiserver)  # noqa: SLF001
            if p is not None
        ]

    def read(self) -> dict[str, float]:
        out = {k: sum(_cpu_seconds(pid) for pid in pids) for k, pids in self.parts.items()}
        t = os.times()
        out["bench"] = t.user + t.system
        return out


def split(items: list[Any], size: int) -> list[list[Any]]:
    return [items[i : i + size] for i in range(0, len(items), size)]


def kcp_requests(api: Any) -> collections.Counter[str]:
    """Resource requests the apiserver served so far (its own count), by ``verb`` for
    RuntimeConfigMaps (``verb(code)`` for an answer other than 2xx: a refused create or
    update, ``POST(409)``) and by ``resource[/subresource] verb`` for every other resource
    (long-running WATCHes included: counted when they start)."""
    r = api.rest_client.pool_manager.request("GET", f"{api.configuration.host}/metrics", timeout=30)
    counts: collections.Counter[str] = collections.Counter()
    for family in text_string_to_metric_families(r.data.decode()):
        for s in family.samples:
            if s.name != "apiserver_request_total" or not s.labels.get("resource"):
                continue  # a non-resource request (this scrape)
            if (
                s.labels.get("group") == apitypes.RUNTIME_CONFIGMAPS.group
                and s.labels["resource"] == apitypes.RUNTIME_CONFIGMAPS.plural
                and not s.labels.get("subresource")
            ):
                code = s.labels.get("code", "")
                counts[s.labels["verb"] + ("" if code.startswith("2") else f"({code})")] += int(
                    s.value
                )
            else:
                sub = s.labels.get("subresource")
                counts[
                    s.labels["resource"] + (f"/{sub}" if sub else "") + " " + s.labels["verb"]
                ] += int(s.value)
    return counts


def is_other(verb: str) -> bool:
    """A ``kcp_requests`` key of another resource than RuntimeConfigMaps."""
    return " " in verb


def stored_form(template: Mapping[str, Any]) -> Callable[[Mapping[str, Any], str], dict[str, Any]]:
    """The body the listener stores for a record, from one object it stored (``template``):
    the record's Watch, kind and epoch as the listener gives them, the owner reference to
    the Kyma CR and its label, the size annotation, and a ``traceparent`` of the same form (a
    new one per write), so that the direct writer stores objects of the listener's content and
    size."""
    spec, meta = template["spec"], template["metadata"]
    ref = next(r for r in meta.get("ownerReferences") or [] if r.get("kind") == apitypes.KYMA_KIND)
    owner = records.Owner(meta["namespace"], ref["name"], ref["uid"])
    given = {f: spec[f] for f in ("watch", "resource", "epoch") if f in spec}
    flags = (meta.get("annotations") or {}).get(apitypes.TRACEPARENT_ANNOTATION, "")[-2:]

    def body(rec: Mapping[str, Any], namespace: str) -> dict[str, Any]:
        trace = f"00-{os.urandom(16).hex()}-{os.urandom(8).hex()}-{flags}" if flags else ""
        obj = records.body(
            {**rec, **given}, namespace, trace, owner if namespace == owner.namespace else None
        )
        rules.annotate(obj)
        return obj

    return body


def warm_up(
    url: str, session: Any, rec: Mapping[str, Any], kcp: gateway.Kube, namespace: str
) -> dict[str, Any]:
    """Send ``rec`` through the listener at ``url`` (outside the measured slices) and
    return the object it stored."""
    r = session.post(url, json=rec, timeout=120)
    assert r.status_code == 200, r.text
    rid = str(rec["runtimeId"])
    found = [
        o
        for o in kcp.list_items(
            apitypes.RUNTIME_CONFIGMAPS,
            namespace,
            label_selector=f"{apitypes.RUNTIME_ID_LABEL}={rid}",
        )
        if (o.get("spec") or {}).get("name") == rec["name"]
    ]
    assert len(found) == 1, found
    return found[0]


def stored_sizes(kcp: gateway.Kube, namespace: str, runtime_id: str) -> dict[str, int]:
    """Bytes of one stored record of ``runtime_id`` as the apiserver serves it (JSON): whole,
    its metadata without managedFields, its managedFields, its spec."""
    page = kcp.list(
        apitypes.RUNTIME_CONFIGMAPS,
        namespace,
        label_selector=f"{apitypes.RUNTIME_ID_LABEL}={runtime_id}",
        limit=1,
    )
    obj = page["items"][0]
    meta = dict(obj["metadata"])
    managed = meta.pop("managedFields", [])

    def size(v: Any) -> int:
        return len(json.dumps(v, separators=(",", ":")))

    return {
        "object": size(obj),
        "metadata": size(meta),
        "managedFields": size(managed),
        "spec": size(obj.get("spec")),
    }


def old_tree(ref: str, dest: pathlib.Path) -> str:
    """The checkout of ``ref`` (git archive) in ``dest``; its full commit."""
    commit = subprocess.run(
        ["git", "rev-parse", ref], cwd=skeleton.REPO, check=True, capture_output=True, text=True
    ).stdout.strip()
    dest.mkdir()
    archive = subprocess.Popen(
        ["git", "archive", commit], cwd=skeleton.REPO, stdout=subprocess.PIPE
    )
    subprocess.run(["tar", "-x", "-C", str(dest)], stdin=archive.stdout, check=True)
    assert archive.wait() == 0
    return commit


def start_listener(
    env: lt.Env,
    name: str,
    tree: pathlib.Path,
    args: argparse.Namespace,
    d: pathlib.Path,
    concurrency: int,
) -> lt.ListenerProcess:
    """A listener whose code is ``tree`` (``python -m listener.main`` runs in its folder, so
    its packages come first on the path)."""
    saved = lt.REPO
    lt.REPO = tree
    try:
        multiproc = d / f"prom-{name}"
        multiproc.mkdir()
        return lt.ListenerProcess(
            env,
            name,
            TETHER_LISTENER_WORKERS=str(args.workers),
            TETHER_LISTENER_THREADS=str(args.threads),
            TETHER_LISTENER_MAX_IN_FLIGHT_PER_RUNTIME=str(args.threads),
            TETHER_LISTENER_PERSIST_CONCURRENCY=str(concurrency),
            TETHER_LISTENER_AUDIT_LOG=str(d / f"audit-{name}.jsonl"),
            PROMETHEUS_MULTIPROC_DIR=str(multiproc),
        )
    finally:
        lt.REPO = saved


def table(doc: dict[str, Any]) -> str:
    """The JSON's rows as a Markdown table (docs/performance.md, "Listener creates")."""
    batch = doc["settings"]["batch"]
    lines = [
        "| variant | batch | persist concurrency | records/s | ratio to direct | CPU ratio | "
        f"CPU ms per record | KCP requests per record | other KCP requests per {batch} records |",
        "|---|---:|---:|---:|---:|---:|---|---|---|",
    ]
    for r in doc["rows"]:

        def num(v: Any, fmt: str) -> str:
            return "—" if v is None else format(v, fmt)

        cpu = ", ".join(f"{k} {v:.2f}" for k, v in r.get("cpu_ms_per_record", {}).items())
        reqs = ", ".join(f"{v} {c}" for v, c in r["kcp_requests_per_record"].items())
        other = ", ".join(
            f"{v} {c:.2f}" for v, c in r.get("kcp_other_requests_per_batch", {}).items()
        )
        lines.append(
            f"| {r['variant']} | {num(r['listener_batch'], 'd')} | "
            f"{num(r.get('persist_concurrency'), 'd')} | "
            f"{r['per_s']:.0f} | {num(r['ratio'], '.2f')} | {num(r.get('cpu_ratio'), '.2f')} | "
            f"{cpu or '—'} | {reqs} | {other or '—'} |"
        )
    sizes = doc.get("stored_bytes_per_record")
    if sizes:
        lines.append("")
        lines.append("| stored record (JSON bytes) | object | metadata | managedFields | spec |")
        lines.append("|---|---:|---:|---:|---:|")
        for who, b in sizes.items():
            lines.append(
                f"| {who} | {b['object']} | {b['metadata']} | {b['managedFields']} | {b['spec']} |"
            )
        if doc.get("state_summary_bytes"):
            lines.append(f"| the runtime's state summary | {doc['state_summary_bytes']} | | | |")
    return "\n".join(lines)


def report(doc: dict[str, Any]) -> None:
    skeleton.report(doc, table(doc))


def main() -> int:
    ap = skeleton.options("listener_create")
    ap.add_argument("--objects", type=int, default=3200)
    ap.add_argument("--threads", type=int, default=8)
    ap.add_argument("--batch", type=int, default=25)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument(
        "--direct-as",
        choices=("listener", "admin"),
        default="listener",
        help="the direct writer's identity: the listener's user and Role "
        "(default: authorized like the listener's writes) or the cluster "
        "admin",
    )
    ap.add_argument(
        "--direct-body",
        choices=("listener", "record"),
        default="listener",
        help="what the direct writer stores: the listener's stored form of the "
        "record (default: its Watch, kind and epoch, the owner reference "
        "and label of the Kyma CR, a traceparent: the same content and size) "
        "or the record's bare body (records.body: about 20 %% smaller)",
    )
    ap.add_argument(
        "--placement",
        choices=("kcp-apart", "none"),
        default="none",
        help="kcp-apart: the KCP plane (etcd, kube-apiserver) alone on the last core, "
        "the bench and the listeners on the others (cgroup cpusets), as a KCP "
        "whose cores are its own; none: unpinned",
    )
    ap.add_argument("--new-ref", default="HEAD")
    ap.add_argument(
        "--concurrency",
        type=int,
        default=8,
        help="the listener's TETHER_LISTENER_PERSIST_CONCURRENCY (the other: 1)",
    )
    args = skeleton.parse(ap, report)
    began = provenance.start()
    n, threads, batch = args.objects, args.threads, args.batch
    if n < threads * batch * ROUNDS:
        ap.error(
            f"--objects must be at least threads x batch x {ROUNDS} = "
            f"{threads * batch * ROUNDS}, so that every sender is busy in every slice"
        )
    started = time.monotonic()
    with (
        tempfile.TemporaryDirectory(prefix="tether-bench-") as tmp,
        controlplane.ControlPlane("kcp") as kcp,
    ):
        d = pathlib.Path(tmp)
        new_commit = old_tree(args.new_ref, d / "new")
        api = kcp.api_client()
        controlplane.install_crds(
            api,
            controlplane.KYMA_CRD,
            *sorted(
                (d / "new" / "manifests" / "kcp" / "crds").glob("tether.kyma-project.io_*.yaml")
            ),
        )
        client.CoreV1Api(api).create_namespace(
            client.V1Namespace(metadata=client.V1ObjectMeta(name="bench-direct"))
        )
        lt.RBAC_FILE = (
            d / "new" / lt.RBAC_FILE.relative_to(skeleton.REPO)
        )  # the measured commit's Role
        env = lt.make_env(kcp, api, d, "bench")
        rt_new = lt.add_runtime(env, "rt-new", "c-new.kyma.example.com")
        rt_c1 = lt.add_runtime(env, "rt-c1", "c-c1.kyma.example.com")
        procs = {
            "new": start_listener(env, "new", d / "new", args, d, args.concurrency),
            "c1": start_listener(env, "c1", d / "new", args, d, 1),
        }
        sessions = {
            "new": [rt_new.session() for _ in range(threads)],
            "c1": [rt_c1.session() for _ in range(threads)],
        }
        counter = iter(range(10**9))

        def via(which: str, rt: lt.Runtime) -> Callable[[list[dict[str, Any]]], None]:
            url = f"{procs[which].url}/v1/runtimes/{rt.id}/changes"

            def send(chunk: list[dict[str, Any]]) -> None:
                s = sessions[which][next(counter) % threads]
                body: Any = chunk[0] if len(chunk) == 1 else changes.batch(chunk)  # type: ignore[arg-type]
                r = s.post(url, json=body, timeout=120)
                assert r.status_code == 200, r.text
                assert {i["outcome"] for i in r.json()["results"]} == {"persisted"}, r.text

            return send

        # the listener's own raw client (tether.kube.gateway), as its user bound to its Role, or
        # as the cluster admin (system:masters: RBAC is not evaluated)
        who, direct_ns = (
            (env.kubeconfig, env.namespace)
            if args.direct_as == "listener"
            else (kcp.kubeconfig, "bench-direct")
        )
        writer = gateway.from_kubeconfig(str(who), pool_size=threads, timeout=120)
        admin = gateway.from_kubeconfig(str(kcp.kubeconfig), timeout=30)
        # one record through each listener before the measured slices: what the listener
        # stores for a record is the direct writer's template (--direct-body listener)
        for which, rt in (("new", rt_new), ("c1", rt_c1)):
            template = warm_up(
                f"{procs[which].url}/v1/runtimes/{rt.id}/changes",
                sessions[which][0],
                make_records(rt.id, "warm", 1)[0],
                admin,
                env.namespace,
            )
        body_of = stored_form(template) if args.direct_body == "listener" else records.body

        def direct(chunk: list[dict[str, Any]]) -> None:
            for rec in chunk:
                writer.create(apitypes.RUNTIME_CONFIGMAPS, direct_ns, body_of(rec, direct_ns))

        # variant -> (send one chunk, records (rid, prefix), chunk size)
        variants: dict[str, tuple[Callable[[list[Any]], None], list[dict[str, Any]], int]] = {
            "direct": (direct, make_records("rt-direct", "d", n), 1),
            "listener": (via("new", rt_new), make_records(rt_new.id, "b", n), batch),
            "listener-c1": (via("c1", rt_c1), make_records(rt_c1.id, "b", n), batch),
            "direct-1": (direct, make_records("rt-direct", "d1", n), 1),
            "listener-1": (via("new", rt_new), make_records(rt_new.id, "s", n), 1),
        }
        seconds: dict[str, float] = collections.defaultdict(float)
        verbs: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
        meter = CpuMeter(procs, kcp)
        placement = cpuset.placement(
            "split" if args.placement == "kcp-apart" else "none", "listener_create"
        )
        placement.to_generator(os.getpid())  # and its children: the planes, the listeners
        for pid in meter.parts["kcp"]:
            placement.to_part(pid)
        print(
            placement.text().replace("part", "KCP").replace("generator", "bench + listeners"),
            flush=True,
        )
        cpu: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
        for group in (("direct", "listener", "listener-c1"), ("direct-1", "listener-1")):
            for rnd in range(ROUNDS):
                order = group[rnd % len(group) :] + group[: rnd % len(group)]
                for name in order:
                    fn, recs, size = variants[name]
                    part = split(recs, -(-n // ROUNDS))[rnd]
                    before = kcp_requests(api)
                    c0 = meter.read()
                    t0 = time.perf_counter()
                    with concurrent.futures.ThreadPoolExecutor(threads) as pool:
                        list(pool.map(fn, split(part, size)))
                    seconds[name] += time.perf_counter() - t0
                    c1 = meter.read()
                    cpu[name].update({k: c1[k] - c0[k] for k in c1})
                    time.sleep(0.3)  # the apiserver counts a request just after answering
                    after = kcp_requests(api)
                    verbs[name].update({v: after[v] - before[v] for v in after})
        assert len(env.stored(rt_new.id)) == 2 * n + 1 and len(env.stored(rt_c1.id)) == n + 1
        sizes = {
            "direct": stored_sizes(admin, direct_ns, "rt-direct"),
            "listener": stored_sizes(admin, env.namespace, rt_new.id),
        }
        summary = admin.get_or_none(
            apitypes.RUNTIME_STATE_SUMMARIES, env.namespace, summaryobject.name_of(rt_new.id)
        )
        summary_bytes = None if summary is None else len(json.dumps(summary, separators=(",", ":")))
        placed = placement.describe()
        placement.close()
        admin.close()
        for ss in sessions.values():
            for s in ss:
                s.close()
        for p in procs.values():
            p.stop()
        # connections to the KCP a listener worker opened beyond its pool and closed after
        # one request (urllib3 logs each): a new TLS handshake with the apiserver each
        discarded = {
            k: p.log_file.read_text().count("Connection pool is full") for k, p in procs.items()
        }
        api.close()

    rows = []

    def cpu_ms(name: str) -> dict[str, float]:
        """CPU ms per record of the parts that work for this variant (the idle listener's
        background work is left out)."""
        which = {"listener": "listener-new", "listener-c1": "listener-c1"}.get(
            name.removesuffix("-1")
        )
        parts = ["kcp", "bench"] + ([which] if which else [])
        return {k: round(cpu[name][k] * 1000 / n, 3) for k in parts}

    for name in variants:
        base = "direct-1" if name.endswith("-1") else "direct"
        size = variants[name][2]
        mine, theirs = cpu_ms(name), cpu_ms(base)
        rows.append(
            {
                "cpu_ms_per_record": mine,
                "cpu_ratio": None
                if "direct" in name
                else round(sum(theirs.values()) / sum(mine.values()), 3),
                "variant": name,
                "records": n,
                "listener_batch": None if "direct" in name else size,
                "persist_concurrency": None
                if "direct" in name
                else (1 if name == "listener-c1" else args.concurrency),
                "per_s": n / seconds[name],
                "ratio": None if "direct" in name else seconds[base] / seconds[name],
                "kcp_requests_per_record": {
                    v: round(c / n, 2)
                    for v, c in sorted(verbs[name].items())
                    if c and not is_other(v)
                },
                # the requests on other resources (state summary, delivery counts, Leases,
                # Kyma CRs, Watches; the idle listener's background too) per `batch` records
                "kcp_other_requests_per_batch": {
                    v: round(c * batch / n, 3)
                    for v, c in sorted(verbs[name].items())
                    if c and is_other(v)
                },
            }
        )
    print(
        f"{'variant':11} {'records':>7} {'batch':>5} {'records/s':>9} {'ratio':>6} "
        f"{'CPU ratio':>9}  {'CPU ms/record (listener, KCP, bench)':<38} KCP requests per record"
    )
    for r in rows:
        ratio = f"{r['ratio']:6.2f}" if r["ratio"] else f"{'-':>6}"
        cratio = f"{r['cpu_ratio']:9.2f}" if r["cpu_ratio"] else f"{'-':>9}"
        c = r["cpu_ms_per_record"]
        lis = next((v for k, v in c.items() if k.startswith("listener")), 0.0)
        parts = f"{lis:.2f}, {c['kcp']:.2f}, {c['bench']:.2f}"
        b = str(r["listener_batch"] or "-")
        reqs = ", ".join(f"{v} {c}" for v, c in r["kcp_requests_per_record"].items())
        print(
            f"{r['variant']:11} {r['records']:7d} {b:>5} {r['per_s']:9.0f} {ratio} {cratio}  "
            f"{parts:<38} {reqs}"
        )
    doc = {
        "machine": skeleton.machine(kube_apiserver=controlplane.kube_apiserver_version()),
        "settings": {
            "objects": n,
            "threads": threads,
            "batch": batch,
            "workers": args.workers,
            "direct_as": args.direct_as,
            "direct_body": args.direct_body,
            "new": {"ref": args.new_ref, "commit": new_commit},
            "persist_concurrency": [args.concurrency, 1],
            "direct_client": "tether.kube.gateway (the listener's raw client)",
            "data": "16 keys, ~1 KiB per ConfigMap",
            "placement": {
                "asked": args.placement,
                "kind": placed["kind"],
                "kcp_cpus": placed.get("part_cpus"),
                "bench_and_listeners_cpus": placed.get("generator_cpus"),
                "reason": placed.get("reason"),
            },
        },
        "rows": rows,
        "stored_bytes_per_record": sizes,
        "state_summary_bytes": summary_bytes,  # what a summary merge reads and writes
        "kcp_connections_discarded": discarded,
        "seconds_total": round(time.monotonic() - started, 1),
    }
    doc = skeleton.write(args.out, "listener_create", began, doc)
    report(doc)
    return 0


if __name__ == "__main__":
    sys.exit(main())
