"""Benchmark: admin page latency with a fleet of 5,000 runtimes in the KCP (goal: every page
within 200 ms), against the same pages with a small fleet in the same invocation.

One real KCP plane; two fleets in two namespaces, made as the other parts write them (Kyma
CR, RuntimeEnrollment with status, heartbeat Lease, RuntimeDelivery with an hour's worth of
minutes and 20 recent records, a CompassMapping for every other runtime; a tenth of
the runtimes with problems): ``--small`` (50) runtimes, the baseline, and ``--runtimes``
(5,000). For each fleet one ``tether admin`` (gunicorn, TLS, the real sign-in with a
ServiceAccount token through TokenReview and SubjectAccessReview, answers cached as in
production) serves ``--requests`` sequential keep-alive GETs of each page; the table shows
p50/p99 per page and fleet, their ratio, the listing time of the snapshot and the admin
process's memory (RSS).

    .venv/bin/python bench/admin_pages.py [--runtimes 5000] [--small 50] [--requests 200]
    .venv/bin/python bench/admin_pages.py --report [--out FILE]   # docs/performance.md's table

The JSON (``--out``, bench/results/admin_pages.json) records the commit, load average and
command (bench/provenance.py).
"""

from __future__ import annotations

import concurrent.futures
import datetime
import pathlib
import statistics
import sys
import tempfile
import time
from typing import Any

import provenance
import requests
import skeleton

from testing import adminenv, controlplane

GOAL_MS = 200.0


def make_fleet(env: adminenv.Env, n: int, threads: int = 16) -> float:
    """``n`` runtimes; returns the seconds it took."""
    t0 = time.monotonic()

    def one(i: int) -> None:
        name = f"kyma-{i:05d}"
        failing = i % 10 == 3
        rid = env.runtime(
            name,
            ready=i % 50 != 7,
            beat_age=900 if i % 97 == 5 else 5,
            webhook=2 if failing else 20,
            poller=18 if failing else 1,
            names=[f"cm-{j}" for j in range(20)],
            minutes=60,
        )
        assert rid
        if i % 2 == 0:
            env.mapping(name, "Failed" if i % 40 == 2 else "Ready")

    with concurrent.futures.ThreadPoolExecutor(threads) as pool:
        for f in concurrent.futures.as_completed([pool.submit(one, i) for i in range(n)]):
            f.result()
    env.deployment("tether-listener", 2, 2)
    env.deployment("tether-compass", 1, 1)
    env.leader_lease("tether-compass", "compass-0_1", {"tether.kyma-project.io/breaker": "closed"})
    return time.monotonic() - t0


def rss_mib(pid: int) -> float:
    total = 0
    for child in [pid, *children(pid)]:
        try:
            for line in pathlib.Path(f"/proc/{child}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1])
        except OSError:
            pass
    return total / 1024


def children(pid: int) -> list[int]:
    try:
        return [
            int(x) for x in pathlib.Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
        ]
    except OSError:
        return []


def measure(p: adminenv.AdminProcess, token: str, paths: dict[str, str], n: int) -> dict[str, Any]:
    s = requests.Session()
    s.trust_env = False
    s.verify = str(p.env.ca_file)
    s.headers["Authorization"] = f"Bearer {token}"
    out: dict[str, Any] = {}
    for label, path in paths.items():
        for _ in range(5):  # warm: connection, review cache
            assert s.get(p.url + path, timeout=30).status_code == 200, path
        times = []
        for _ in range(n):
            t = time.perf_counter()
            r = s.get(p.url + path, timeout=30)
            times.append((time.perf_counter() - t) * 1000)
            assert r.status_code == 200, (path, r.status_code)
        times.sort()
        out[label] = {
            "p50_ms": statistics.median(times),
            "p99_ms": times[int(len(times) * 0.99) - 1],
            "bytes": len(r.content),
        }
    return out


def wait_listed(p: adminenv.AdminProcess, token: str, n: int, timeout: float = 600) -> float:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        text = p.metrics()
        for line in text.splitlines():
            if line.startswith("tether_fleet_runtimes ") and float(line.split()[1]) >= n:
                for line2 in text.splitlines():
                    if line2.startswith("tether_fleet_snapshot_seconds "):
                        return float(line2.split()[1])
        time.sleep(1)
    raise TimeoutError(f"the admin part did not list {n} runtimes")


LABELS = {
    "fleet p1": "fleet, first page",
    "fleet last": "fleet, last page",
    "fleet search": "fleet, search",
    "fleet problem": "fleet, problem filter",
    "runtime": "runtime (reads its RuntimeDelivery and Events)",
    "login (no auth)": "login (no auth, the floor)",
}


def table(doc: dict[str, Any]) -> str:
    """docs/performance.md's table: p50 per page for both fleets, the large fleet's p99, the
    goal."""
    goal = doc["goal_ms"]
    lines = [
        f"| page | p50, {doc['small']:,} runtimes | p50, {doc['runtimes']:,} | "
        f"p99, {doc['runtimes']:,} | "
        f"ratio p50 | goal (p99 ≤ {goal:g} ms) |",
        "|---|---:|---:|---:|---:|---|",
    ]
    small, large = doc["fleets"]["small"]["pages"], doc["fleets"]["large"]["pages"]
    for page, a in small.items():
        b = large[page]
        ratio = f"{b['p50_ms'] / a['p50_ms']:.2f}" if a["p50_ms"] else "-"
        lines.append(
            f"| {LABELS.get(page, page)} | {a['p50_ms']:.1f} ms | {b['p50_ms']:.1f} ms | "
            f"{b['p99_ms']:.1f} ms | {ratio} | {'met' if b['p99_ms'] <= goal else 'MISSED'} |"
        )
    return "\n".join(lines)


def report(doc: dict[str, Any]) -> None:
    skeleton.report(doc, table(doc))


def main(argv: list[str]) -> int:
    ap = skeleton.options("admin_pages", __doc__, raw=True)
    ap.add_argument("--runtimes", type=int, default=5000)
    ap.add_argument("--small", type=int, default=50)
    ap.add_argument("--requests", type=int, default=200)
    args = skeleton.parse(ap, report, argv)
    began = provenance.start()
    work = pathlib.Path(tempfile.mkdtemp(prefix="bench-admin-"))
    results: dict[str, Any] = {
        "runtimes": args.runtimes,
        "small": args.small,
        "requests_per_page": args.requests,
        "goal_ms": GOAL_MS,
    }
    with controlplane.planes("kcp") as planes:
        kcp = planes["kcp"]
        api = kcp.api_client()
        adminenv.install_crds(api)
        fleets: dict[str, Any] = {}
        for label, n in (("small", args.small), ("large", args.runtimes)):
            (work / label).mkdir(parents=True)
            env = adminenv.Env(kcp, api, work / label)
            made = make_fleet(env, n)
            token = env.operator("bench", None)
            p = adminenv.AdminProcess(env, ready_timeout=600, TETHER_ADMIN_REFRESH_SECONDS="15")
            try:
                listed = wait_listed(p, token, n)
                paths = {
                    "fleet p1": "/fleet",
                    "fleet last": "/fleet?page=100000",
                    "fleet search": "/fleet?q=kyma-0004",
                    "fleet problem": "/fleet?problem=webhook_path_failing",
                    "runtime": "/runtimes/rt-kyma-00003",
                    "compass": "/compass",
                    "parts": "/parts",
                    "login (no auth)": "/login",
                }
                pages = measure(p, token, paths, args.requests)
                fleets[label] = {
                    "runtimes": n,
                    "create_seconds": round(made, 1),
                    "snapshot_seconds": round(listed, 3),
                    "admin_rss_mib": round(rss_mib(p.proc.pid), 1),
                    "pages": pages,
                }
                print(
                    f"[{label}] {n} runtimes made in {made:.0f}s; listed in {listed:.2f}s; "
                    f"RSS {fleets[label]['admin_rss_mib']} MiB",
                    flush=True,
                )
            finally:
                p.stop()
        api.close()
    results["fleets"] = fleets
    results["machine"] = skeleton.machine()
    results["at"] = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    small, large = fleets["small"]["pages"], fleets["large"]["pages"]
    print(
        f"\n{'page':<18}{'p50 ' + str(args.small):>10}{'p50 ' + str(args.runtimes):>11}"
        f"{'p99 ' + str(args.runtimes):>11}{'ratio p50':>11}{'goal':>8}"
    )
    ok = True
    for page in small:
        a, b = small[page], large[page]
        ratio = b["p50_ms"] / a["p50_ms"] if a["p50_ms"] else float("nan")
        met = b["p99_ms"] <= GOAL_MS
        ok = ok and met
        print(
            f"{page:<18}{a['p50_ms']:>9.1f}ms{b['p50_ms']:>9.1f}ms{b['p99_ms']:>9.1f}ms"
            f"{ratio:>10.2f}x{'met' if met else 'MISSED':>8}"
        )
    results["goal_met"] = ok
    results = skeleton.write(args.out, "admin_pages", began, results, indent=1)
    print()
    report(results)
    print(f"\nwritten {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
