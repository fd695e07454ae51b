"""Benchmark: records persisted per second through the listener into a real KCP apiserver,
against direct writes of the same objects with the kubernetes client, same run.

Starts one KCP control plane, installs the Kyma stand-in and RuntimeConfigMap CRDs, a
Kyma CR, and the listener (`python -m listener.main`: gunicorn gthread, mTLS, the
least-privilege Role). Then, with THREADS concurrent senders each:

  create    N new objects   direct: one POST per object (kubernetes client, admin)
                            listener: batches of BATCH records (GET + create per record)
  update    N newer records direct: one PUT per object with its known resourceVersion
                            listener: batches of BATCH (GET + compare + PUT per record)
  update-1  N newer records direct: GET + PUT per object (what a safe writer does)
                            listener: one record per request (the webhook forwarder's case)
  resend    N same records  listener, batches (duplicates: GET + compare, no write)

The direct writes go to a second namespace (same names and bodies). Direct and listener
runs alternate over ROUNDS slices of the objects so that load drift on a shared machine
hits both alike. ratio = listener records/s / direct records/s. Prints a table and writes
bench/results/listener_throughput.json.

    .venv/bin/python bench/listener_throughput.py [--objects 400] [--threads 8] [--batch 25]
    .venv/bin/python bench/listener_throughput.py --report [--out FILE]   # docs/performance.md's table

The JSON (``--out``) records the commit, load average and command (bench/provenance.py).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import pathlib
import platform
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

REPO = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import provenance  # noqa: E402
from kubernetes import client  # noqa: E402

from listener.storage import records  # noqa: E402
from testing import controlplane  # noqa: E402
from testing import listenerenv as lt  # noqa: E402
from tether import apitypes, changes  # noqa: E402

RESULTS = REPO / "bench" / "results" / "listener_throughput.json"
ROUNDS = 4


def make_records(rid: str, n: int, rv: int) -> list[dict[str, Any]]:
    out = []
    for i in range(n):
        data = {f"key-{k}": f"value-{rv}-{k}-" + "x" * 40 for k in range(16)}
        out.append(dict(changes.from_configmap(
            {"metadata": {"namespace": "team-a", "name": f"cm-{i:05d}", "uid": f"u-{i}",
                          "resourceVersion": str(rv + i), "labels": {"app": "bench"}},
             "data": data}, runtime_id=rid, source="webhook")))
    return out


def timed(fn: Callable[[list[Any]], None], chunks: list[list[Any]], threads: int) -> float:
    t0 = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(threads) as pool:
        list(pool.map(fn, chunks))
    return time.perf_counter() - t0


def split(items: list[Any], size: int) -> list[list[Any]]:
    return [items[i:i + size] for i in range(0, len(items), size)]


def table(doc: dict[str, Any]) -> str:
    """docs/performance.md's table: records per second by phase, direct and through the listener."""
    lines = ["| phase | direct/s | listener/s | ratio |", "|---|---:|---:|---:|"]
    for r in doc["rows"]:
        direct = f"{r['direct_per_s']:.0f}" if r["direct_per_s"] else "—"
        ratio = f"{r['ratio']:.2f}" if r["ratio"] else "—"
        lines.append(f"| {r['phase']} (batches of {r['listener_batch']}) | {direct} | {r['listener_per_s']:.0f} | {ratio} |")
    return "\n".join(lines)


def report(doc: dict[str, Any]) -> None:
    print(table(doc))
    print()
    print(provenance.footer(doc))


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--objects", type=int, default=400)
    ap.add_argument("--threads", type=int, default=8)
    ap.add_argument("--batch", type=int, default=25)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--out", type=pathlib.Path, default=RESULTS)
    ap.add_argument("--report", action="store_true", help="print the table of --out's run")
    args = ap.parse_args()
    if args.report:
        report(json.loads(args.out.read_text()))
        return 0
    began = provenance.start()
    n, threads, batch = args.objects, args.threads, args.batch
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="tether-bench-") as tmp, \
            controlplane.ControlPlane("kcp") as kcp:
        d = pathlib.Path(tmp)
        api = kcp.api_client()
        objects = client.CustomObjectsApi(api)
        controlplane.install_crds(api, controlplane.KYMA_CRD, *lt.CRD_FILES)
        client.CoreV1Api(api).create_namespace(
            client.V1Namespace(metadata=client.V1ObjectMeta(name="bench-direct")))
        env = lt.make_env(kcp, api, d, "bench")
        rid = "rt-bench"
        rt = lt.add_runtime(env, rid, "c-bench.kyma.example.com")
        proc = lt.ListenerProcess(env, "bench", TETHER_LISTENER_WORKERS=str(args.workers),
                                  TETHER_LISTENER_THREADS=str(threads),
                                  TETHER_LISTENER_MAX_IN_FLIGHT_PER_RUNTIME=str(threads),
                                  TETHER_LISTENER_AUDIT_LOG=str(d / "audit.jsonl"),
                                  PROMETHEUS_MULTIPROC_DIR=str(d))
        sessions = [rt.session() for _ in range(threads)]
        url = f"{proc.url}/v1/runtimes/{rid}/changes"
        counter = iter(range(10**9))

        def via_listener(chunk: list[dict[str, Any]]) -> None:
            s = sessions[next(counter) % threads]
            body: Any = chunk[0] if len(chunk) == 1 else changes.batch(chunk)  # type: ignore[arg-type]
            r = s.post(url, json=body, timeout=120)
            assert r.status_code == 200, r.text

        stored_rv: dict[str, str] = {}

        def direct_create(chunk: list[dict[str, Any]]) -> None:
            for rec in chunk:
                obj: Any = objects.create_namespaced_custom_object(
                    apitypes.RUNTIME_CONFIGMAPS.group, apitypes.RUNTIME_CONFIGMAPS.version, "bench-direct", apitypes.RUNTIME_CONFIGMAPS.plural,
                    records.body(rec, "bench-direct"))
                stored_rv[obj["metadata"]["name"]] = obj["metadata"]["resourceVersion"]

        def direct_update(chunk: list[dict[str, Any]]) -> None:
            for rec in chunk:
                body = records.body(rec, "bench-direct")
                body["metadata"]["resourceVersion"] = stored_rv[body["metadata"]["name"]]
                objects.replace_namespaced_custom_object(
                    apitypes.RUNTIME_CONFIGMAPS.group, apitypes.RUNTIME_CONFIGMAPS.version, "bench-direct", apitypes.RUNTIME_CONFIGMAPS.plural,
                    body["metadata"]["name"], body)

        def direct_read_update(chunk: list[dict[str, Any]]) -> None:
            for rec in chunk:
                name = records.body(rec, "bench-direct")["metadata"]["name"]
                stored: Any = objects.get_namespaced_custom_object(
                    apitypes.RUNTIME_CONFIGMAPS.group, apitypes.RUNTIME_CONFIGMAPS.version, "bench-direct", apitypes.RUNTIME_CONFIGMAPS.plural, name)
                objects.replace_namespaced_custom_object(
                    apitypes.RUNTIME_CONFIGMAPS.group, apitypes.RUNTIME_CONFIGMAPS.version, "bench-direct", apitypes.RUNTIME_CONFIGMAPS.plural, name,
                    records.updated(stored, rec))

        def compare(phase: str, direct_fn: Callable[[list[Any]], None] | None,
                    recs: list[dict[str, Any]], size: int, baseline: str) -> dict[str, Any]:
            """Direct and listener alternate over ROUNDS slices, so load drift hits both."""
            t_direct = t_listener = 0.0
            for part in split(recs, -(-len(recs) // ROUNDS)):
                if direct_fn is not None:
                    t_direct += timed(direct_fn, split(part, 1), threads)
                t_listener += timed(via_listener, split(part, size), threads)
            return {"phase": phase, "records": len(recs), "listener_batch": size,
                    "baseline": baseline,
                    "direct_per_s": len(recs) / t_direct if direct_fn else None,
                    "listener_per_s": len(recs) / t_listener,
                    "ratio": t_direct / t_listener if direct_fn else None}

        v1, v2, v3 = make_records(rid, n, 1000), make_records(rid, n, 100000), \
            make_records(rid, n, 200000)
        rows = [
            compare("create", direct_create, v1, batch, "POST per object"),
            compare("update", direct_update, v2, batch, "PUT per object, known resourceVersion"),
            compare("update-1", direct_read_update, v3, 1, "GET + PUT per object"),
            compare("resend", None, v3, batch, "-"),
        ]
        assert len(env.stored(rid)) == n
        for s in sessions:
            s.close()
        proc.stop()
        api.close()

    print(f"{'phase':9} {'records':>7} {'batch':>5} {'direct/s':>9} {'listener/s':>10} "
          f"{'ratio':>6}  baseline")
    for r in rows:
        direct = f"{r['direct_per_s']:9.0f}" if r["direct_per_s"] else f"{'-':>9}"
        ratio = f"{r['ratio']:6.2f}" if r["ratio"] else f"{'-':>6}"
        print(f"{r['phase']:9} {r['records']:7d} {r['listener_batch']:5d} {direct} "
              f"{r['listener_per_s']:10.0f} {ratio}  {r['baseline']}")
    doc = {
        **provenance.stamp("listener_throughput", began),
        "machine": {"python": platform.python_version(), "cpus": os.cpu_count(),
                    "kube_apiserver": controlplane.kube_apiserver_version()},
        "settings": {"objects": n, "threads": threads, "batch": batch, "workers": args.workers,
                     "data": "16 keys, ~1 KiB per ConfigMap"},
        "rows": rows,
        "seconds_total": round(time.monotonic() - started, 1),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=2) + "\n")
    report(doc)
    return 0


if __name__ == "__main__":
    sys.exit(main())
