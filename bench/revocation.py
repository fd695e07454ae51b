"""Benchmark: revocation latency on two listener replicas (issue 26): how long after a Kyma
CR is deleted, or its ``skr-domain`` annotation changed, a runtime's next request is refused
(403) by each replica.

Starts one KCP control plane, the listener's CRDs and Role, and two listeners from the
checkout (``python -m listener.main``: gunicorn, WORKERS workers, mTLS, the least-privilege
Role; the pod's view on, as deployed). Each try makes a runtime, has both replicas answer
its state summary (200), waits a second for the watches to settle, then deletes its Kyma CR
(even tries) or changes its skr-domain (odd tries) and has one thread per replica ask again
every ``--poll`` seconds until refused. The latency is from the KCP's answer to the change to
the first refused answer (an upper bound: it includes the poll step and the request).
Prints p50/p99/max over TRIES x 2 replicas and writes bench/results/revocation.json
(commit, load average and command: bench/provenance.py).

    .venv/bin/python bench/revocation.py [--tries 20] [--workers 2] [--poll 0.02]
    .venv/bin/python bench/revocation.py --report [--out FILE]   # the table from the JSON
"""

from __future__ import annotations

import pathlib
import statistics
import sys
import tempfile
import threading
import time
from typing import Any

import provenance
import skeleton
from kubernetes import client

from testing import controlplane
from testing import listenerenv as lt
from tether.kube import apitypes

BOUND = 30.0  # seconds a try waits for a refusal before it counts as not refused


def ask(p: lt.ListenerProcess, rt: lt.Runtime, s: Any) -> int:
    r = s.get(f"{p.url}/v1/runtimes/{rt.id}/state/summary", timeout=30)
    return int(r.status_code)


def one_try(env: lt.Env, ps: list[lt.ListenerProcess], i: int, poll: float) -> list[float]:
    rt = lt.add_runtime(env, f"rt-rev-{i:03d}")
    sessions = [rt.session() for _ in ps]
    for p, s in zip(ps, sessions, strict=True):
        deadline = time.monotonic() + BOUND
        while ask(p, rt, s) != 200:
            if time.monotonic() > deadline:
                raise SystemExit(f"try {i}: {p.url} never answered the runtime")
            time.sleep(0.2)
    time.sleep(1.0)
    objects = client.CustomObjectsApi(env.api)
    name = f"kyma-{rt.id}"[:60]
    took: list[float] = [BOUND] * len(ps)

    def watch(k: int) -> None:
        while time.monotonic() - changed < BOUND:
            if ask(ps[k], rt, sessions[k]) == 403:
                took[k] = time.monotonic() - changed
                return
            time.sleep(poll)

    if i % 2 == 0:
        objects.delete_namespaced_custom_object(
            apitypes.KYMAS.group, apitypes.KYMAS.version, env.namespace, apitypes.KYMAS.plural, name
        )
    else:
        objects.patch_namespaced_custom_object(
            apitypes.KYMAS.group,
            apitypes.KYMAS.version,
            env.namespace,
            apitypes.KYMAS.plural,
            name,
            {"metadata": {"annotations": {apitypes.SKR_DOMAIN_ANNOTATION: "moved.example.com"}}},
        )
    changed = time.monotonic()
    threads = [threading.Thread(target=watch, args=(k,)) for k in range(len(ps))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for s in sessions:
        s.close()
    return took


def quantile(xs: list[float], q: float) -> float:
    ordered = sorted(xs)
    return ordered[min(len(ordered) - 1, max(0, round(q * len(ordered) + 0.5) - 1))]


def table(doc: dict[str, Any]) -> str:
    """docs/performance.md's table: the time to refusal per change."""
    lines = [
        "| change | replicas | tries | p50 (ms) | p99 (ms) | max (ms) | not refused within 30 s |",
        "|---|---|---|---|---|---|---|",
    ]
    for row in doc["rows"]:
        lines.append(
            f"| {row['change']} | {doc['replicas']} | {row['tries']} | {row['p50_ms']:.0f} | "
            f"{row['p99_ms']:.0f} | {row['max_ms']:.0f} | {row['not_refused']} |"
        )
    return "\n".join(lines)


def row(change: str, took: list[float], tries: int) -> dict[str, Any]:
    return {
        "change": change,
        "tries": tries,
        "p50_ms": 1000 * statistics.median(took),
        "p99_ms": 1000 * quantile(took, 0.99),
        "max_ms": 1000 * max(took),
        "not_refused": sum(1 for t in took if t >= BOUND),
    }


def report(doc: dict[str, Any]) -> None:
    skeleton.report(doc, table(doc))


def main() -> int:
    ap = skeleton.options("revocation")
    ap.add_argument("--tries", type=int, default=20)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--poll", type=float, default=0.02)
    args = skeleton.parse(ap, report)
    began = provenance.start()
    with (
        tempfile.TemporaryDirectory(prefix="tether-bench-") as tmp,
        controlplane.ControlPlane("kcp") as kcp,
    ):
        d = pathlib.Path(tmp)
        api = kcp.api_client()
        controlplane.install_crds(api, controlplane.KYMA_CRD)
        lt.install_crd(api)
        env = lt.make_env(kcp, api, d, "bench-rev")
        ps: list[lt.ListenerProcess] = []
        try:
            for name in ("a", "b"):
                ps.append(
                    lt.ListenerProcess(
                        env,
                        name,
                        TETHER_LISTENER_WORKERS=str(args.workers),
                        TETHER_LISTENER_KCP_TIMEOUT_SECONDS="10",
                    )
                )
            took = {"deleted": [], "domain": []}  # type: dict[str, list[float]]
            for i in range(args.tries):
                got = one_try(env, ps, i, args.poll)
                took["deleted" if i % 2 == 0 else "domain"].extend(got)
                print(f"try {i}: {', '.join(f'{t * 1000:.0f} ms' for t in got)}", flush=True)
        finally:
            for p in ps:
                p.stop()
    every = took["deleted"] + took["domain"]
    doc = {
        "replicas": 2,
        "workers": args.workers,
        "poll_seconds": args.poll,
        "rows": [
            row("Kyma CR deleted", took["deleted"], (args.tries + 1) // 2),
            row("skr-domain changed", took["domain"], args.tries // 2),
            row("either", every, args.tries),
        ],
        "samples_ms": {k: [round(t * 1000, 1) for t in v] for k, v in took.items()},
    }
    doc = skeleton.write(args.out, "revocation", began, doc)
    report(doc)
    return 0


if __name__ == "__main__":
    sys.exit(main())
