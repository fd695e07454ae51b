"""Benchmark: records persisted per second through the listener into a real KCP apiserver,
against direct writes of the same objects through the listener's own raw client, same run.

Starts one KCP control plane, installs the Kyma stand-in and RuntimeConfigMap CRDs, a
Kyma CR, and the listener (`python -m listener.main`: gunicorn gthread, mTLS, the
least-privilege Role). Then, with THREADS concurrent senders each:

  create    N new objects   direct: one POST per object
                            listener: batches of BATCH records
  update    N newer records direct: one PUT per object with its known resourceVersion
                            listener: batches of BATCH
  update-1  N newer records direct: the same (one PUT, known resourceVersion)
                            listener: one record per request (the webhook forwarder's case)
  resend    N same records  listener, batches (duplicates: read + compare, no write)

The direct writer is the baseline a plain client does best: the listener's own raw client
(``tether.kube.gateway``: the same client and JSON path the listener writes with; the kubernetes
typed client spent ~1.25 ms CPU per record, which flattered the ratio), as the listener's
own user bound to its Role, into the listener's namespace (``--direct-as admin``: the
cluster admin into a namespace of its own); its objects are the same records under another
runtime ID, in the listener's stored form (its Watch, kind and epoch, the Kyma CR's owner
reference and label, the size annotation, a traceparent; taken from one record sent through the
listener before the measured slices; ``--direct-body record``: the record's bare body, ~20 %
smaller). An update's baseline does what the listener does at best: a PUT with the
resourceVersion of the writer's own last write, no read first (the listener's worker
remembers what it wrote: ``listener.storage.writecache``). What the listener actually
asks the KCP per record is counted by the KCP apiserver itself (``apiserver_request_total``,
scraped around each slice, as ``bench/listener_create.py`` does): RuntimeConfigMap requests
by verb per record (``PUT(409)``: refused), every other resource's per BATCH records, and
the listener's answers (outcomes). The write cache is per worker: a worker that never saw
a key pays a refused create (``POST(409)``) and a read (GET) before its PUT, and one whose
remembered version is older than the stored one (another worker wrote since) a refused
PUT and a read; a resend of duplicates reads every key (an answer never rests on the cache
alone) and pays those refusals too.

Direct and listener runs alternate over ROUNDS slices of the objects so that load drift on
a shared machine hits both alike. ratio = listener records/s / direct records/s. Prints a
table and writes bench/results/listener_throughput.json.

    .venv/bin/python bench/listener_throughput.py [--objects 400] [--threads 8] [--batch 25]
        [--direct-as listener] [--direct-body listener]
    .venv/bin/python bench/listener_throughput.py --report [--out FILE]
        # docs/performance.md's table

The JSON (``--out``) records the commit, load average and command (bench/provenance.py).
"""

from __future__ import annotations

import collections
import concurrent.futures
import pathlib
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

import provenance
import skeleton
from kubernetes import client
from listener_create import is_other, kcp_requests, stored_form, warm_up

from listener.storage import records
from testing import controlplane
from testing import listenerenv as lt
from tether.kube import apitypes, gateway
from tether.wire import changes, conversion

ROUNDS = 4


def make_records(rid: str, n: int, rv: int) -> list[dict[str, Any]]:
    out = []
    for i in range(n):
        data = {f"key-{k}": f"value-{rv}-{k}-" + "x" * 40 for k in range(16)}
        out.append(
            dict(
                conversion.from_configmap(
                    {
                        "metadata": {
                            "namespace": "team-a",
                            "name": f"cm-{i:05d}",
                            "uid": f"u-{i}",
                            "resourceVersion": str(rv + i),
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


def timed(fn: Callable[[list[Any]], None], chunks: list[list[Any]], threads: int) -> float:
    t0 = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(threads) as pool:
        list(pool.map(fn, chunks))
    return time.perf_counter() - t0


def split(items: list[Any], size: int) -> list[list[Any]]:
    return [items[i : i + size] for i in range(0, len(items), size)]


def per_record(counts: collections.Counter[str], n: int, batch: int) -> dict[str, Any]:
    """The KCP requests of a phase: RuntimeConfigMaps by verb per record, other resources
    per ``batch`` records."""
    return {
        "per_record": {
            v: round(c / n, 2) for v, c in sorted(counts.items()) if c and not is_other(v)
        },
        "other_per_batch": {
            v: round(c * batch / n, 3) for v, c in sorted(counts.items()) if c and is_other(v)
        },
    }


def _verbs(reqs: dict[str, Any] | None) -> str:
    if not reqs:
        return "—"
    return ", ".join(f"{v} {c}" for v, c in reqs["per_record"].items()) or "—"


def table(doc: dict[str, Any]) -> str:
    """docs/performance.md's table: records per second by phase, direct and through the
    listener, and the RuntimeConfigMap requests per record each made (the KCP's count)."""
    lines = [
        "| phase | direct baseline | direct/s | listener/s | ratio | KCP requests per record: "
        "direct | listener |",
        "|---|---|---:|---:|---:|---|---|",
    ]
    for r in doc["rows"]:
        direct = f"{r['direct_per_s']:.0f}" if r["direct_per_s"] else "—"
        ratio = f"{r['ratio']:.2f}" if r["ratio"] else "—"
        lines.append(
            f"| {r['phase']} (batches of {r['listener_batch']}) | {r.get('baseline', '—')} | "
            f"{direct} | {r['listener_per_s']:.0f} | {ratio} | "
            f"{_verbs(r.get('direct_kcp_requests'))} | {_verbs(r.get('listener_kcp_requests'))} |"
        )
    return "\n".join(lines)


def report(doc: dict[str, Any]) -> None:
    skeleton.report(doc, table(doc))


def main() -> int:
    ap = skeleton.options("listener_throughput")
    ap.add_argument("--objects", type=int, default=400)
    ap.add_argument("--threads", type=int, default=8)
    ap.add_argument("--batch", type=int, default=25)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument(
        "--direct-as",
        choices=("listener", "admin"),
        default="listener",
        help="the direct writer's identity: the listener's user and Role "
        "(default: authorized like the listener's writes) or the cluster admin",
    )
    ap.add_argument(
        "--direct-body",
        choices=("listener", "record"),
        default="listener",
        help="what the direct writer stores: the listener's stored form of the "
        "record (default: the same content and size) or the record's bare body",
    )
    args = skeleton.parse(ap, report)
    began = provenance.start()
    n, threads, batch = args.objects, args.threads, args.batch
    started = time.monotonic()
    with (
        tempfile.TemporaryDirectory(prefix="tether-bench-") as tmp,
        controlplane.ControlPlane("kcp") as kcp,
    ):
        d = pathlib.Path(tmp)
        api = kcp.api_client()
        controlplane.install_crds(api, controlplane.KYMA_CRD, *lt.CRD_FILES)
        client.CoreV1Api(api).create_namespace(
            client.V1Namespace(metadata=client.V1ObjectMeta(name="bench-direct"))
        )
        env = lt.make_env(kcp, api, d, "bench")
        rid = "rt-bench"
        rt = lt.add_runtime(env, rid, "c-bench.kyma.example.com")
        proc = lt.ListenerProcess(
            env,
            "bench",
            TETHER_LISTENER_WORKERS=str(args.workers),
            TETHER_LISTENER_THREADS=str(threads),
            TETHER_LISTENER_MAX_IN_FLIGHT_PER_RUNTIME=str(threads),
            TETHER_LISTENER_AUDIT_LOG=str(d / "audit.jsonl"),
            PROMETHEUS_MULTIPROC_DIR=str(d),
        )
        sessions = [rt.session() for _ in range(threads)]
        url = f"{proc.url}/v1/runtimes/{rid}/changes"
        counter = iter(range(10**9))
        outcomes: collections.Counter[str] = collections.Counter()  # of the phase running

        def via_listener(chunk: list[dict[str, Any]]) -> None:
            s = sessions[next(counter) % threads]
            body: Any = chunk[0] if len(chunk) == 1 else changes.batch(chunk)  # type: ignore[arg-type]
            r = s.post(url, json=body, timeout=120)
            assert r.status_code == 200, r.text
            outcomes.update(i["outcome"] for i in r.json()["results"])

        # the listener's own raw client (tether.kube.gateway), as its user bound to its Role, or
        # as the cluster admin (system:masters: RBAC is not evaluated)
        who, direct_ns = (
            (env.kubeconfig, env.namespace)
            if args.direct_as == "listener"
            else (kcp.kubeconfig, "bench-direct")
        )
        writer = gateway.from_kubeconfig(str(who), pool_size=threads, timeout=120)
        admin = gateway.from_kubeconfig(str(kcp.kubeconfig), timeout=30)
        # one record through the listener before the measured slices: what it stores is the
        # direct writer's template (--direct-body listener)
        template = warm_up(
            url, sessions[0], make_records(rid, 1, 1)[0] | {"name": "warm"}, admin, env.namespace
        )
        body_of = stored_form(template) if args.direct_body == "listener" else records.body
        stored_rv: dict[str, str] = {}  # what the direct writer last wrote (its own cache)

        def direct_create(chunk: list[dict[str, Any]]) -> None:
            for rec in chunk:
                obj = writer.create(apitypes.RUNTIME_CONFIGMAPS, direct_ns, body_of(rec, direct_ns))
                stored_rv[obj["metadata"]["name"]] = obj["metadata"]["resourceVersion"]

        def direct_update(chunk: list[dict[str, Any]]) -> None:
            for rec in chunk:
                body = body_of(rec, direct_ns)
                name = body["metadata"]["name"]
                body["metadata"]["resourceVersion"] = stored_rv[name]
                obj = writer.replace(apitypes.RUNTIME_CONFIGMAPS, direct_ns, name, body)
                stored_rv[name] = obj["metadata"]["resourceVersion"]

        def slice_of(
            fn: Callable[[list[Any]], None],
            chunks: list[list[Any]],
            verbs: collections.Counter[str],
        ) -> float:
            """Seconds of one slice; the KCP's requests during it added to ``verbs``."""
            before = kcp_requests(api)
            took = timed(fn, chunks, threads)
            time.sleep(0.3)  # the apiserver counts a request just after answering
            after = kcp_requests(api)
            verbs.update({v: after[v] - before[v] for v in after})
            return took

        def compare(
            phase: str,
            direct_fn: Callable[[list[Any]], None] | None,
            pair: tuple[list[dict[str, Any]], list[dict[str, Any]]],
            size: int,
            baseline: str,
        ) -> dict[str, Any]:
            """Direct and listener alternate over ROUNDS slices, so load drift hits both."""
            direct_recs, recs = pair
            t_direct = t_listener = 0.0
            v_direct: collections.Counter[str] = collections.Counter()
            v_listener: collections.Counter[str] = collections.Counter()
            step = -(-len(recs) // ROUNDS)
            outcomes.clear()
            for i in range(0, len(recs), step):
                if direct_fn is not None:
                    t_direct += slice_of(direct_fn, split(direct_recs[i : i + step], 1), v_direct)
                t_listener += slice_of(via_listener, split(recs[i : i + step], size), v_listener)
            return {
                "phase": phase,
                "records": len(recs),
                "listener_batch": size,
                "baseline": baseline,
                "direct_per_s": len(recs) / t_direct if direct_fn else None,
                "listener_per_s": len(recs) / t_listener,
                "ratio": t_direct / t_listener if direct_fn else None,
                "direct_kcp_requests": per_record(v_direct, len(recs), batch)
                if direct_fn
                else None,
                "listener_kcp_requests": per_record(v_listener, len(recs), batch),
                "listener_outcomes": dict(outcomes),
            }

        def both(rv: int) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
            return make_records("rt-direct", n, rv), make_records(rid, n, rv)

        v1, v2, v3 = both(1000), both(100000), both(200000)
        rows = [
            compare("create", direct_create, v1, batch, "POST per object"),
            compare("update", direct_update, v2, batch, "PUT per object, known resourceVersion"),
            compare("update-1", direct_update, v3, 1, "PUT per object, known resourceVersion"),
            compare("resend", None, v3, batch, "—"),
        ]
        assert len(env.stored(rid)) == n + 1
        for s in sessions:
            s.close()
        writer.close()
        admin.close()
        proc.stop()
        api.close()

    doc = {
        "machine": skeleton.machine(kube_apiserver=controlplane.kube_apiserver_version()),
        "settings": {
            "objects": n,
            "threads": threads,
            "batch": batch,
            "workers": args.workers,
            "direct_as": args.direct_as,
            "direct_body": args.direct_body,
            "direct_client": "tether.kube.gateway (the listener's raw client)",
            "data": "16 keys, ~1 KiB per ConfigMap",
        },
        "rows": rows,
        "seconds_total": round(time.monotonic() - started, 1),
    }
    doc = skeleton.write(args.out, "listener_throughput", began, doc)
    report(doc)
    return 0


if __name__ == "__main__":
    sys.exit(main())
