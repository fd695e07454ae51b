"""Benchmark: Director requests during an outage, and time to all Ready after it.

N Kyma CRs (default 100) arrive while the stand-in Director answers every request with
503 for ``--outage`` seconds (default 15), the interval run going every second; then the
Director recovers. Three configurations in the same invocation:

- ``tether``: circuit breaker (threshold 5, open 2 s doubling to 8 s) and per-runtime
  backoff (base 1 s, cap 8 s), as in production but with short times;
- ``backoff only``: the breaker off (threshold 10^9), backoff as above;
- ``naive`` (baseline): neither (every run retries every runtime at once).

Reported: Director requests per second during the outage, ratio baseline ÷ measured,
and seconds from recovery to all Ready (no duplicates checked).

    .venv/bin/python bench/compass_outage.py [--kymas 100] [--outage 15]
    .venv/bin/python bench/compass_outage.py --report [--out FILE]   # docs/performance.md's table

The JSON (``--out``, bench/results/compass_outage.json) records the commit, load average and
command (bench/provenance.py).
"""

from __future__ import annotations

import logging
import sys
import time
from typing import Any

import provenance
import skeleton
from compass_ready import Director, setup

from compass import metrics, service
from compass import settings as settings_mod
from testing import controlplane, localnet
from testing.compassenv import CRD_FILE
from tether.kube import gateway

CONFIGS: dict[str, dict[str, Any]] = {
    "tether": dict(
        breaker_threshold=5,
        breaker_open_seconds=2.0,
        breaker_max_open_seconds=8.0,
        backoff_base=1.0,
        backoff_cap=8.0,
    ),
    "backoff only": dict(breaker_threshold=10**9, backoff_base=1.0, backoff_cap=8.0),
    "naive": dict(breaker_threshold=10**9, backoff_base=0.0, backoff_cap=0.0),
}


def one(
    kcp_api: Any,
    d: Director,
    skr: controlplane.ControlPlane,
    label: str,
    over: dict[str, Any],
    n: int,
    outage: float,
) -> dict[str, Any]:
    ns = "bench-" + label.replace(" ", "-")
    s = settings_mod.Settings(
        director_url=d.info["graphql_url"],
        token_url=d.info["token_url"],
        client_id=d.info["client_id"],
        client_secret=d.info["client_secret"],
        director_ca_file=d.info["ca_file"],
        namespace=ns,
        concurrency=16,
        secret_name="compass-agent-{kyma}",
        runtimes=localnet.policy(),
        **over,
    )
    audit = logging.getLogger("tether.audit.bench")
    audit.propagate = False
    audit.addHandler(logging.NullHandler())
    svc = service.build(s, gateway.Kube(kcp_api), metrics.Metrics(), audit)
    try:
        svc.tokens.get()  # the OAuth token is not part of the outage
        d.admin("PUT", "/admin/faults", {"http_status": 503})
        setup(kcp_api, ns, n, skr, f"ga-{label.replace(' ', '-')}")
        before = d.admin("GET", "/admin/requests")["total"]
        t0 = time.monotonic()
        while time.monotonic() - t0 < outage:
            start = time.monotonic()
            svc.job.run()
            time.sleep(max(0.0, 1.0 - (time.monotonic() - start)))
        during = d.admin("GET", "/admin/requests")["total"] - before
        seconds = time.monotonic() - t0
        d.admin("PUT", "/admin/faults", {})
        t1 = time.monotonic()
        for _ in range(120):
            start = time.monotonic()
            if svc.job.run().states.get("Ready", 0) == n:
                break
            time.sleep(max(0.0, 1.0 - (time.monotonic() - start)))
        recovery = time.monotonic() - t1
        runtimes = d.admin("GET", "/admin/runtimes")
        tenant = f"ga-{label.replace(' ', '-')}"
        mine = [r for r in runtimes if r["tenant"] == tenant]
        refs = [r["labels"].get("tether_kyma") for r in mine]
        assert len(refs) == len(set(refs)) == n, (len(refs), len(set(refs)))
    finally:
        svc.close()
    return {
        "kymas": n,
        "outage_seconds": round(seconds, 1),
        "requests_during_outage": during,
        "requests_per_second": round(during / seconds, 2),
        "seconds_to_ready_after_recovery": round(recovery, 1),
        "duplicates": 0,
    }


def table(doc: dict[str, Any]) -> str:
    """docs/performance.md's table, one row per configuration."""
    lines = [
        "| configuration | Director requests during the outage | per second | vs naive | "
        "s to all Ready after recovery |",
        "|---|---:|---:|---:|---:|",
    ]
    for label, r in doc["results"].items():
        lines.append(
            f"| {label} | {r['requests_during_outage']} | {r['requests_per_second']} | "
            f"{r['ratio_vs_naive']} | {r['seconds_to_ready_after_recovery']} |"
        )
    return "\n".join(lines)


def report(doc: dict[str, Any]) -> None:
    skeleton.report(doc, table(doc))


def main(argv: list[str]) -> int:
    p = skeleton.options("compass_outage")
    p.add_argument("--kymas", type=int, default=100)
    p.add_argument("--outage", type=float, default=15.0)
    args = skeleton.parse(p, report, argv)
    logging.basicConfig(level=logging.ERROR)
    began = provenance.start()
    d = Director()
    out: dict[str, dict[str, Any]] = {}
    try:
        with controlplane.planes("kcp", "skr") as planes:
            kcp_api = planes["kcp"].api_client()
            kcp_api.rest_client.pool_manager.connection_pool_kw["maxsize"] = 24
            controlplane.install_crds(kcp_api, controlplane.KYMA_CRD, CRD_FILE)
            for label, over in CONFIGS.items():
                out[label] = one(kcp_api, d, planes["skr"], label, over, args.kymas, args.outage)
            kcp_api.close()
    finally:
        d.stop()
    base = out["naive"]["requests_per_second"]
    print(
        f"{'config':<14} {'req during outage':>18} {'req/s':>8} {'vs naive':>9} "
        f"{'s to Ready after':>17}"
    )
    for label, r in out.items():
        ratio = r["requests_per_second"] / base if base else float("nan")
        r["ratio_vs_naive"] = round(ratio, 3)
        print(
            f"{label:<14} {r['requests_during_outage']:>18} {r['requests_per_second']:>8} "
            f"{ratio:>9.3f} {r['seconds_to_ready_after_recovery']:>17}"
        )
    result = skeleton.write(
        args.out, "compass_outage", began, {"machine": skeleton.machine(), "results": out}, indent=1
    )
    report(result)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
