"""Benchmark: a customer's ConfigMap write in the deployed form, with the webhook (called by
the kube-apiserver through its Service: the pod runner's proxy, testing/serviceproxy.py)
and without it, in one invocation (issue 26: p50 within 2 ms of no webhook).

Installs Tether as ``make demo`` and tests/deployed do (testing/deployed.py: both planes,
the KCP overlay, the enroller installing the runtime's bundle, every Deployment run by the
pod runner, the webhook's 2 replicas behind the ``tether-webhook`` Service). Then, in
``--rounds`` alternating windows, ``--writes`` merge PATCHes each (raw JSON over HTTPS, one
keep-alive connection, ``--gap`` s apart), round robin over 10 ConfigMaps marked as
configuration (the shipped Watch's label):

* ``webhook``: in the customer namespace ``shop``: the apiserver calls the webhook;
* ``no webhook``: the same ConfigMaps in ``kube-system``, which the webhook's
  namespaceSelector leaves out: the same write without the call.

The apiserver's own ``apiserver_admission_webhook_admission_duration_seconds`` (count and
sum over the run) show that the calls were made and what each took as the apiserver saw it;
the webhook pods' review latency histogram what their handler took of it.
Then ``--round-trips`` reviews (of kube-system: nothing forwarded) POSTed by this process to
a webhook pod and through the Service, alternating: the Service proxy's share of a call.
``--before REV``: the pod runner's Service proxy is the one of commit REV (as
bench/service_proxy.py loads it), to measure the deployed form before a proxy change.

    .venv/bin/python bench/deployed_write.py                    # --writes 100 --rounds 6 --gap 0.05
    .venv/bin/python bench/deployed_write.py --before f75c2c0
        # writes bench/results/deployed_write_before.json
    .venv/bin/python bench/deployed_write.py --report [--before f75c2c0]
"""

from __future__ import annotations

import argparse
import http.client
import json
import pathlib
import re
import ssl
import sys
import tempfile
import time
from typing import Any

import provenance
import service_proxy
import skeleton

from testing import controlplane, deployed, rawapi, serviceproxy, watchenv

PATHS = {"webhook": "shop", "no webhook": "kube-system"}
HOOK_METRIC = "apiserver_admission_webhook_admission_duration_seconds"
HANDLER_METRIC = "tether_webhook_http_request_duration_seconds"  # route="/validate"


def hook_calls(api: rawapi.Api) -> dict[str, float]:
    """The apiserver's webhook admission count and duration sum, over all webhooks."""
    conn = api.connect()
    try:
        conn.request("GET", "/metrics")
        text = conn.getresponse().read().decode()
    finally:
        conn.close()
    out = {"count": 0.0, "sum": 0.0}
    for line in text.splitlines():
        m = re.match(rf"{HOOK_METRIC}_(count|sum)\{{(.*)\}} (\S+)$", line)
        if m and 'type="validating"' in m.group(2):
            out[m.group(1)] += float(m.group(3))
    return out


def handler_seconds(fleet: deployed.Fleet) -> dict[str, float]:
    """The webhook pods' own review latency (``HANDLER_METRIC`` of /validate: count and sum over
    both replicas, read from each pod's /metrics): the handler's share of a call."""
    ctx = ssl.create_default_context()
    ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE  # a reading, no secret sent
    out = {"count": 0.0, "sum": 0.0}
    for pod in fleet.skr_pods.pods_of("tether-webhook"):
        conn = http.client.HTTPSConnection(pod.ip, 8443, context=ctx, timeout=10)
        try:
            conn.request("GET", "/metrics")
            text = conn.getresponse().read().decode()
        finally:
            conn.close()
        for line in text.splitlines():
            m = re.match(rf'{HANDLER_METRIC}_(count|sum)\{{.*route="/validate".*\}} (\S+)$', line)
            if m:
                out[m.group(1)] += float(m.group(2))
    return out


def round_trips(fleet: deployed.Fleet, n: int) -> dict[str, dict[str, float]]:
    """An AdmissionReview POSTed by this process (one keep-alive connection each, alternating,
    ``n`` each): straight to a webhook pod, and through the Service (the pod runner's proxy):
    the proxy's share of a call. The review is of kube-system, which the webhook ignores
    (nothing is forwarded)."""
    ctx = ssl.create_default_context()
    ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE  # a timing, no secret sent
    pod = fleet.skr_pods.pods_of("tether-webhook")[0]
    targets = {
        "pod": (pod.ip, 8443),
        "service": fleet.skr_pods.service_address("tether-webhook", "https"),
    }
    conns = {
        k: http.client.HTTPSConnection(h, p, context=ctx, timeout=10)
        for k, (h, p) in targets.items()
    }
    lat: dict[str, list[float]] = {k: [] for k in targets}
    try:
        for i in range(n):
            for k, conn in conns.items():
                body = json.dumps(
                    {
                        "apiVersion": "admission.k8s.io/v1",
                        "kind": "AdmissionReview",
                        "request": {
                            "uid": f"rt-{i}",
                            "operation": "UPDATE",
                            "namespace": "kube-system",
                            "name": "bench-0",
                            "kind": {"group": "", "version": "v1", "kind": "ConfigMap"},
                            "resource": {"group": "", "version": "v1", "resource": "configmaps"},
                            "object": {"metadata": {"name": "bench-0"}, "data": {"k": str(i)}},
                            "oldObject": {"metadata": {"name": "bench-0"}, "data": {"k": "0"}},
                        },
                    }
                ).encode()
                t0 = time.perf_counter()
                conn.request("POST", "/validate", body, {"Content-Type": "application/json"})
                resp = conn.getresponse()
                resp.read()
                lat[k].append(time.perf_counter() - t0)
                assert resp.status == 200, resp.status
            time.sleep(0.01)
    finally:
        for conn in conns.values():
            conn.close()
    return {k: service_proxy.dist(xs) for k, xs in lat.items()}


def window(api: rawapi.Api, namespace: str, n: int, gap: float, seq: int) -> list[float]:
    conn = api.connect()
    out = []
    try:
        for i in range(n):
            j = (seq + i) % 10
            t0 = time.perf_counter()
            status, obj = api.call(
                conn,
                "PATCH",
                f"/api/v1/namespaces/{namespace}/configmaps/bench-{j}",
                {"data": {"k": str(seq + i)}},
                "application/merge-patch+json",
            )
            out.append(time.perf_counter() - t0)
            assert status == 200, (status, obj)
            time.sleep(gap)
    finally:
        conn.close()
    return out


def measure(fleet: deployed.Fleet, args: argparse.Namespace) -> dict[str, Any]:
    api = rawapi.Api(fleet.skr, fleet.work, "bench-writer")
    conn = api.connect()
    for ns in PATHS.values():
        if ns != "kube-system":
            api.call(conn, "POST", "/api/v1/namespaces", {"metadata": {"name": ns}})
        for j in range(10):
            status, obj = api.call(
                conn,
                "POST",
                f"/api/v1/namespaces/{ns}/configmaps",
                {
                    "metadata": {"name": f"bench-{j}", "labels": {watchenv.OPT_IN_LABEL: "true"}},
                    "data": {"k": "0"},
                },
            )
            assert status == 201, (status, obj)
    conn.close()
    for ns in PATHS.values():
        window(api, ns, 20, args.gap, 0)  # warm-up: connections, the webhook's caches
    lat: dict[str, list[float]] = {name: [] for name in PATHS}
    calls: dict[str, dict[str, float]] = {name: {"count": 0.0, "sum": 0.0} for name in PATHS}
    handled: dict[str, dict[str, float]] = {name: {"count": 0.0, "sum": 0.0} for name in PATHS}
    seq = 100
    for r in range(args.rounds):
        for name in list(PATHS) if r % 2 == 0 else list(reversed(PATHS)):
            before, h_before = hook_calls(api), handler_seconds(fleet)
            xs = window(api, PATHS[name], args.writes, args.gap, seq)
            after, h_after = hook_calls(api), handler_seconds(fleet)
            seq += args.writes
            lat[name].extend(xs)
            for k in ("count", "sum"):
                calls[name][k] += after[k] - before[k]
                handled[name][k] += h_after[k] - h_before[k]
            print(
                f"round {r + 1} {name:10s} p50 {service_proxy.dist(xs)['p50_ms']:7.2f} ms",
                flush=True,
            )
    return {
        name: {
            **service_proxy.dist(lat[name]),
            "webhook_calls": calls[name]["count"],
            "webhook_call_mean_ms": _mean_ms(calls[name]),
            "handler_calls": handled[name]["count"],
            "handler_mean_ms": _mean_ms(handled[name]),
        }
        for name in PATHS
    }


def _mean_ms(acc: dict[str, float]) -> float | None:
    return round(1000 * acc["sum"] / acc["count"], 3) if acc["count"] else None


def report(doc: dict[str, Any]) -> None:
    s = doc["summary"]
    print(
        f"{'customer write':16s} {'n':>5s} {'p50 ms':>8s} {'p99 ms':>8s} {'max ms':>8s} "
        f"{'webhook calls':>13s} {'call mean ms':>12s} {'handler mean ms':>15s}"
    )
    for name, d in s.items():
        mean, handler = (
            f"{d[k]:{w}.2f}" if d.get(k) is not None else f"{'-':>{w}s}"
            for k, w in (("webhook_call_mean_ms", 12), ("handler_mean_ms", 15))
        )
        print(
            f"{name:16s} {d['n']:5d} {d['p50_ms']:8.2f} {d['p99_ms']:8.2f} {d['max_ms']:8.2f} "
            f"{d['webhook_calls']:13.0f} {mean} {handler}"
        )
    print(
        f"webhook - no webhook: p50 {s['webhook']['p50_ms'] - s['no webhook']['p50_ms']:+.2f} ms, "
        f"p99 {s['webhook']['p99_ms'] - s['no webhook']['p99_ms']:+.2f} ms"
        + (
            f" (Service proxy of {doc['settings']['before']})"
            if doc["settings"].get("before")
            else ""
        )
    )
    for k, d in (doc.get("round_trips") or {}).items():
        print(
            f"review round trip from this process, {k:7s}: p50 {d['p50_ms']:.2f} ms, "
            f"p99 {d['p99_ms']:.2f} ms (n {d['n']})"
        )
    print(provenance.footer(doc))


def main() -> int:
    ap = skeleton.options(None, __doc__, raw=True)
    ap.add_argument("--writes", type=int, default=100, help="per path and round")
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--gap", type=float, default=0.05, help="seconds between writes")
    ap.add_argument("--before", help="the pod runner's Service proxy of this commit")
    ap.add_argument(
        "--round-trips",
        type=int,
        default=300,
        help="reviews POSTed to a webhook pod and through its Service, each (0: none)",
    )
    args = skeleton.parse(
        ap, report, named=lambda a: f"deployed_write{'_before' if a.before else ''}.json"
    )
    began = provenance.start()
    with (
        tempfile.TemporaryDirectory(prefix="bench-deployed-") as tmp,
        controlplane.planes("bench-skr", "bench-kcp") as planes,
    ):
        work = pathlib.Path(tmp)
        if args.before:
            serviceproxy.Proxy = service_proxy.old_proxy(args.before, work)  # type: ignore[misc]
        t0 = time.monotonic()
        fleet = deployed.install(
            planes["bench-skr"],
            planes["bench-kcp"],
            work / "fleet",
            timeout=300,
            say=lambda m: print(m, flush=True),
        )
        print(f"installed in {time.monotonic() - t0:.0f} s", flush=True)
        try:
            summary = measure(fleet, args)
            trips = round_trips(fleet, args.round_trips) if args.round_trips else {}
        finally:
            fleet.stop()
    doc = skeleton.write(
        args.out,
        "deployed_write",
        began,
        {"settings": skeleton.settings(args), "summary": summary, "round_trips": trips},
    )
    print()
    report(doc)
    return 0


if __name__ == "__main__":
    sys.exit(main())
