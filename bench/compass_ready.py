"""Benchmark: time for N Kyma CRs (default 1,000) to reach Ready against the stand-in
Director with 50 ms latency per request, and Director requests per runtime (ideal: 2).

Baseline (same invocation): the same reconciler with one worker (concurrency 1, as a
controller with a single worker would go) over a sample of Kyma CRs; the ratio compares
the time per runtime.

Starts its own KCP and SKR planes and the stand-in Director in a separate process
(``python -m standins.director``). All N Kyma CRs point at the one SKR plane; since the
agent Secret has a fixed name, the bench sets ``TETHER_COMPASS_AGENT_SECRET_NAME`` to
``compass-agent-{kyma}`` so that the N Secrets do not overwrite each other (the requests
are otherwise those of production: one SKR read and one SKR write per runtime).

    .venv/bin/python bench/compass_ready.py [--kymas 1000] [--baseline 50] [--concurrency 16]
    .venv/bin/python bench/compass_ready.py --report [--out FILE]   # docs/performance.md's table

The JSON (``--out``) records the commit, load average and command (bench/provenance.py).
"""

from __future__ import annotations

import base64
import concurrent.futures
import json
import logging
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterable
from typing import Any

import provenance
import requests
import skeleton
from kubernetes import client

from compass import metrics, service
from compass import settings as settings_mod
from testing import controlplane, localnet
from testing.compassenv import CRD_FILE, kyma_labels
from tether.kube import apitypes, gateway


def parallel(fn: Callable[[Any], Any], items: Iterable[Any], threads: int = 8) -> None:
    with concurrent.futures.ThreadPoolExecutor(threads) as ex:
        for f in [ex.submit(fn, i) for i in items]:
            f.result()


class Director:
    def __init__(self) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "standins.director", "--port", "0"],
            cwd=skeleton.REPO,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            preexec_fn=controlplane.die_with_parent(),
        )
        assert self.proc.stdout is not None
        lines = []
        while True:
            line = self.proc.stdout.readline()
            if not line:
                raise RuntimeError("stand-in Director did not start")
            lines.append(line)
            if line.startswith("}"):
                break
        self.info = json.loads("".join(lines))
        self.base = self.info["graphql_url"].rsplit("/", 1)[0]

    def admin(self, method: str, path: str, body: Any = None) -> Any:
        r = requests.request(
            method, f"{self.base}{path}", json=body, verify=self.info["ca_file"], timeout=30
        )
        r.raise_for_status()
        return r.json()

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=10)


def setup(
    kcp_api: client.ApiClient,
    ns: str,
    n: int,
    skr: controlplane.ControlPlane,
    tenant: str,
    prefix: str = "kyma",
) -> list[str]:
    """``n`` Kyma CRs named ``<prefix>-NNNNN``: the baseline's names differ from the measured
    run's, since both share the SKR plane and its agent Secrets (named by Kyma CR)."""
    core = client.CoreV1Api(kcp_api)
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=ns)))
    kubeconfig = base64.b64encode(skr.kubeconfig.read_bytes()).decode()
    co = client.CustomObjectsApi(kcp_api)
    names = [f"{prefix}-{i:05d}" for i in range(n)]

    def one(name: str) -> None:
        core.create_namespaced_secret(
            ns,
            client.V1Secret(
                metadata=client.V1ObjectMeta(
                    name=f"kubeconfig-{name}",
                    namespace=ns,
                    labels={"operator.kyma-project.io/kyma-name": name},
                ),
                data={"config": kubeconfig},
            ),
        )
        co.create_namespaced_custom_object(
            apitypes.KYMAS.group,
            apitypes.KYMAS.version,
            ns,
            apitypes.KYMAS.plural,
            {
                "apiVersion": "operator.kyma-project.io/v1beta2",
                "kind": "Kyma",
                "metadata": {
                    "name": name,
                    "namespace": ns,
                    "labels": kyma_labels(tenant, f"s-{name}"),
                },
                "spec": {"modules": []},
            },
        )

    parallel(one, names, 8)
    return names


def measure(
    kcp_api: client.ApiClient, d: Director, ns: str, names: list[str], concurrency: int
) -> dict[str, Any]:
    s = settings_mod.Settings(
        director_url=d.info["graphql_url"],
        token_url=d.info["token_url"],
        client_id=d.info["client_id"],
        client_secret=d.info["client_secret"],
        director_ca_file=d.info["ca_file"],
        namespace=ns,
        concurrency=concurrency,
        secret_name="compass-agent-{kyma}",
        backoff_base=0.5,
        backoff_cap=2.0,
        runtimes=localnet.policy(),
    )
    audit = logging.getLogger("tether.audit.bench")
    audit.propagate = False
    audit.addHandler(logging.NullHandler())
    svc = service.build(s, gateway.Kube(kcp_api), metrics.Metrics(), audit)
    first = d.admin("GET", "/admin/requests")
    before = first["total"]
    cpu0 = time.process_time()
    t0 = time.monotonic()
    runs = 0
    try:
        while True:
            summary = svc.job.run()
            runs += 1
            if summary.states.get("Ready", 0) == len(names):
                break
            if runs >= 20:
                raise RuntimeError(f"not Ready after {runs} runs: {summary.states}")
        seconds = time.monotonic() - t0
        cpu = time.process_time() - cpu0
    finally:
        svc.close()
    after = d.admin("GET", "/admin/requests")
    requests_made = after["total"] - before
    return {
        "kymas": len(names),
        "concurrency": concurrency,
        "seconds_to_ready": round(seconds, 2),
        "runs": runs,
        "ms_per_runtime": round(1000 * seconds / len(names), 2),
        "director_requests": requests_made,
        "director_by_operation": {
            k: v - first["by_operation"].get(k, 0)
            for k, v in after["by_operation"].items()
            if v > first["by_operation"].get(k, 0)
        },
        "requests_per_runtime": round(requests_made / len(names), 3),
        # compass's CPU (this process: the job's threads and the Event senders)
        "compass_cpu_ms_per_runtime": round(1000 * cpu / len(names), 2),
    }


def table(doc: dict[str, Any]) -> str:
    """docs/performance.md's table: the measured run and the single-worker baseline."""
    lines = [
        "| run | Kyma CRs | concurrency | s to all Ready | ms per runtime | Director requests "
        "| per runtime |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for label in ("measured", "baseline"):
        r = doc[label]
        per = f"{r['requests_per_runtime']:.1f}"
        lines.append(
            f"| {label} | {r['kymas']:,} | {r['concurrency']} | {r['seconds_to_ready']:.1f} | "
            f"{r['ms_per_runtime']:.1f} | {r['director_requests']:,} | "
            f"{f'**{per}**' if label == 'measured' else per} |"
        )
    return "\n".join(lines)


def report(doc: dict[str, Any]) -> None:
    skeleton.report(doc, table(doc))


def main(argv: list[str]) -> int:
    p = skeleton.options("compass_ready")
    p.add_argument("--kymas", type=int, default=1000)
    p.add_argument("--baseline", type=int, default=50)
    p.add_argument("--concurrency", type=int, default=16)
    p.add_argument("--latency-ms", type=float, default=50.0)
    args = skeleton.parse(p, report, argv)
    began = provenance.start()
    logging.basicConfig(level=logging.WARNING)
    load_start = began.load
    d = Director()
    try:
        d.admin("PUT", "/admin/faults", {"latency": args.latency_ms / 1000})
        with controlplane.planes("kcp", "skr") as planes:
            kcp_api = planes["kcp"].api_client()
            kcp_api.rest_client.pool_manager.connection_pool_kw["maxsize"] = args.concurrency + 8
            controlplane.install_crds(kcp_api, controlplane.KYMA_CRD, CRD_FILE)
            t0 = time.monotonic()
            names = setup(kcp_api, "bench-main", args.kymas, planes["skr"], "ga-bench")
            base_names = setup(
                kcp_api, "bench-base", args.baseline, planes["skr"], "ga-base", "base"
            )
            setup_s = time.monotonic() - t0
            main_run = measure(kcp_api, d, "bench-main", names, args.concurrency)
            base_run = measure(kcp_api, d, "bench-base", base_names, 1)
            kcp_api.close()
    finally:
        d.stop()
    ratio = base_run["ms_per_runtime"] / main_run["ms_per_runtime"]
    result = {
        "machine": skeleton.machine(),
        "director_latency_ms": args.latency_ms,
        "setup_seconds": round(setup_s, 1),
        "measured": main_run,
        "baseline": base_run,
        "speedup_per_runtime_vs_baseline": round(ratio, 2),
    }
    print(
        f"{'run':<10} {'kymas':>6} {'conc':>5} {'s to Ready':>11} {'ms/runtime':>11} "
        f"{'Director req':>13} {'req/runtime':>12} {'CPU ms/runtime':>15}"
    )
    for label, r in (("measured", main_run), ("baseline", base_run)):
        print(
            f"{label:<10} {r['kymas']:>6} {r['concurrency']:>5} {r['seconds_to_ready']:>11} "
            f"{r['ms_per_runtime']:>11} {r['director_requests']:>13} "
            f"{r['requests_per_runtime']:>12} "
            f"{r['compass_cpu_ms_per_runtime']:>15}"
        )
    print(
        f"speed-up per runtime vs baseline: {ratio:.1f}x  (set-up {setup_s:.0f}s, load average "
        f"{load_start:.1f} -> {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs)"
    )
    result = skeleton.write(args.out, "compass_ready", began, result, indent=1)
    print(provenance.footer(result))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
