"""Benchmark: the poller's in-sync run in Watch mode, three Watches of different kinds
against one, same run (issue 24), each against a plain paginated list of the same objects.

Starts real SKR and KCP planes and the real listener (gunicorn, mTLS). Two runtimes, the
same number of objects each (N, default 3,000; ~1 KiB of values each):

  watches-1  one Watch: N ConfigMaps
  watches-3  three Watches: N/3 ConfigMaps (full), N/3 Secrets (digest) and N/3 Widgets,
             a custom resource (full)

Each runtime's Watches are in the KCP (for that runtime only) and in its Watch list, as
the enroller renders them. A first run of each delivers everything; once every Watch's
summary holds its records (the listener pod's view), ROUNDS in-sync runs alternate between
the two (medians), each timed against a plain paginated list of the same objects
(`baseline`: what any reconciler must at least do, same page size). ratio = watches-3
seconds / watches-1 seconds. KCP reads of each in-sync run are counted from the KCP API
server's own `apiserver_request_total` (GET and LIST, by resource; the listener is the only
client of the KCP meanwhile), and how each Watch's pass ended
(`tether_poller_watch_passes_total{way}`: summary or digest). Prints a table and writes
bench/results/poller_watches.json (commit, load average, command).

    .venv/bin/python bench/poller_watches.py [--objects 3000] [--rounds 5] [--page-size 500]
    .venv/bin/python bench/poller_watches.py --report
"""

from __future__ import annotations

import argparse
import base64
import json
import pathlib
import statistics
import sys
import tempfile
import time
import uuid
from typing import Any

import poller_run as pr
import provenance
import skeleton
from kubernetes import client

from poller import metrics, run, scan, watchrun
from testing import (
    controlplane,
    pollerenv,
    watchenv,
)
from testing import listenerenv as lc
from tether.kube import apitypes, gateway
from tether.runtime import sender
from tether.wire import filters, watches, watchset, watchwire

GROUP = "bench-watches.example.com"
CM = {"group": "", "version": "v1", "resource": "configmaps", "kind": "ConfigMap"}
SECRET = {"group": "", "version": "v1", "resource": "secrets", "kind": "Secret"}
WIDGET = watchenv.widgets(GROUP)
CRD = watchenv.widget_crd(GROUP)
PATHS = {
    "ConfigMap": "/api/v1/namespaces/{ns}/configmaps",
    "Secret": "/api/v1/namespaces/{ns}/secrets",
    "Widget": f"/apis/{GROUP}/v1/namespaces/{{ns}}/widgets",
}


def _body(kind: str, i: int) -> dict[str, Any]:
    values = {f"key-{k}": f"value-{i}-{k}-" + "x" * 40 for k in range(16)}
    meta = {"name": f"obj-{i:05d}", "labels": {"app": "bench"}}
    if kind == "ConfigMap":
        return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": values}
    if kind == "Secret":
        return {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": meta,
            "type": "Opaque",
            "data": {k: base64.b64encode(v.encode()).decode() for k, v in values.items()},
        }
    return {"apiVersion": f"{GROUP}/v1", "kind": "Widget", "metadata": meta, "spec": values}


def _get(api: client.ApiClient, path: str) -> dict[str, Any]:
    """GET JSON through the client's TLS connection pool (pr.raw_post's reading twin)."""
    cfg = api.configuration
    headers = {"Accept": "application/json"}
    if cfg.api_key.get("authorization"):
        headers["Authorization"] = cfg.api_key["authorization"]
    resp = api.rest_client.pool_manager.request(
        "GET", cfg.host + path, headers=headers, preload_content=True
    )
    if resp.status != 200:
        raise RuntimeError(f"GET {path}: HTTP {resp.status}")
    doc: dict[str, Any] = json.loads(resp.data)
    return doc


class Side:
    """One runtime: its namespace, Watches (KCP and runtime list) and a Watch-mode runner."""

    def __init__(
        self,
        name: str,
        env: lc.Env,
        listener: lc.ListenerProcess,
        skr_api: client.ApiClient,
        plan: list[tuple[str, dict[str, str], dict[str, Any]]],
        n: int,
        args: argparse.Namespace,
        work: pathlib.Path,
    ) -> None:
        self.name, self.ns = name, f"{name}-{uuid.uuid4().hex[:6]}"
        self.skr_api = skr_api
        core = client.CoreV1Api(skr_api)
        core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=self.ns)))
        rt = lc.add_runtime(env, f"rt-{self.ns}")
        only = {
            "runtimes": {"selector": {"matchLabels": {apitypes.RUNTIME_ID_LABEL: rt.id}}},
            "namespaces": [self.ns],
            "selector": {"matchLabels": {"app": "bench"}},
        }
        self.kinds = [resource["kind"] for _, resource, _ in plan]
        ws = tuple(
            watches.parse(
                watchenv.apply(
                    env.api,
                    watchenv.watch(f"{self.ns}-{wname}", resource, env.namespace, **only, **spec),
                )
            )
            for wname, resource, spec in plan
        )
        core.create_namespaced_config_map(
            self.ns,
            client.V1ConfigMap(
                metadata=client.V1ObjectMeta(name=watchwire.WIRE_CONFIGMAP),
                data={watchwire.WIRE_KEY: watchwire.to_wire(ws)},
            ),
        )
        per = n // len(plan)
        pr.parallel(
            lambda i: pr.raw_post(
                skr_api,
                PATHS[self.kinds[i % len(plan)]].format(ns=self.ns),
                _body(self.kinds[i % len(plan)], i),
            ),
            range(per * len(plan)),
            args.threads,
        )
        self.objects = per * len(plan)
        kube = gateway.Kube(skr_api)
        flt = filters.ConfigMapFilter.build(filters.DEFAULT_IGNORED_NAMESPACES, "")
        m = metrics.Metrics()
        lister = scan.Lister(
            kube, flt, page_size=args.page_size, timeout=60, on_request=m.apiserver_requests.inc
        )
        self.client = sender.ListenerClient(pollerenv.client_settings(rt, listener.url))
        self.runner = run.Runner(
            rt.id,
            run.RunSettings(),
            flt,
            lister,
            self.client,
            m,
            identity=lister.identity,
            watches=watchrun.Watching(watchset.WatchSet(kube, self.ns, ttl=0), lister),
        )
        self.watches = ws
        self.per = per
        self.page_size = args.page_size
        self.metrics = m

    def summarised(self) -> bool:
        """Every Watch's summary holds its objects (the listener pod's view caught up)."""
        try:
            docs = [self.client.watch_summary(w.name) or {} for w in self.watches]
        except sender.ListenerError:
            return False
        return all(sum(d.get("counts") or []) == self.per for d in docs)

    def passes(self) -> dict[str, float]:
        return {
            way: self.metrics.registry.get_sample_value(
                "tether_poller_watch_passes_total", {"way": way}
            )
            or 0.0
            for way in metrics.PASS_WAYS
        }

    def ready(self) -> bool:
        try:
            return all(self.client.state_page(10, watch=w.name) is not None for w in self.watches)
        except sender.ListenerError:
            return False

    def run(self) -> dict[str, Any]:
        t = time.perf_counter()
        result = self.runner.run()
        return {"seconds": time.perf_counter() - t, "outcome": result.outcome, "sent": result.sent}

    def baseline(self) -> float:
        """A plain paginated list of the same objects, kind by kind."""
        t = time.perf_counter()
        for kind in dict.fromkeys(self.kinds):
            cont = ""
            while True:
                path = (
                    PATHS[kind].format(ns=self.ns)
                    + f"?limit={self.page_size}"
                    + (f"&continue={cont}" if cont else "")
                )
                cont = _get(self.skr_api, path)["metadata"].get("continue") or ""
                if not cont:
                    break
        return time.perf_counter() - t


def kcp_reads(api: client.ApiClient) -> dict[str, int]:
    """GETs and LISTs the KCP API server served so far, by resource (its own metrics)."""
    r = api.rest_client.pool_manager.request("GET", f"{api.configuration.host}/metrics", timeout=30)
    out: dict[str, int] = {}
    for line in r.data.decode().splitlines():
        if not line.startswith("apiserver_request_total{"):
            continue
        series, value = line.rsplit(" ", 1)
        lbl = dict(
            (k, v.strip('"'))
            for k, v in (p.split("=", 1) for p in series[series.index("{") + 1 : -1].split(","))
        )
        if lbl.get("verb") in ("GET", "LIST") and lbl.get("resource"):
            out[lbl["resource"]] = out.get(lbl["resource"], 0) + int(float(value))
    return out


def reads_during(api: client.ApiClient, before: dict[str, int]) -> dict[str, int]:
    """Reads since ``before``; the server counts just after answering: until two agree."""
    last = kcp_reads(api)
    for _ in range(20):
        time.sleep(0.3)
        now = kcp_reads(api)
        if now == last:
            break
        last = now
    return {k: v - before.get(k, 0) for k, v in last.items() if v != before.get(k, 0)}


def _print(doc: dict[str, Any]) -> None:
    print(
        f"{'side':10s} {'objects':>8s} {'watches':>8s} {'in-sync s':>10s} {'list s':>8s} "
        f"{'run/list':>9s} {'KCP reads':>10s} {'records':>8s} {'by summary':>11s}"
    )
    for name, s in doc["summary"].items():
        print(
            f"{name:10s} {s['objects']:8d} {s['watches']:8d} {s['in_sync_seconds']:10.2f} "
            f"{s['baseline_seconds']:8.2f} {s['in_sync_seconds'] / s['baseline_seconds']:9.2f} "
            f"{s['kcp_reads']:10d} {s['kcp_record_reads']:8d} {s['passes_by_summary']:11s}"
        )
    print(f"\nwatches-3 / watches-1 in-sync run: {doc['ratio']:.2f} (same number of objects)")
    print(
        "KCP reads: GET and LIST per in-sync run (median), all resources / runtimeconfigmaps; "
        "by summary: Watch passes of the in-sync runs that read no digest"
    )
    print(provenance.footer(doc))


def main() -> int:
    ap = skeleton.options("poller_watches", __doc__, raw=True)
    ap.add_argument("--objects", type=int, default=3000)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--page-size", type=int, default=500)
    ap.add_argument("--threads", type=int, default=8)
    args = skeleton.parse(ap, _print)
    began = provenance.start()
    with (
        tempfile.TemporaryDirectory(prefix="bench-poller-watches-") as tmp,
        controlplane.planes("skr", "kcp") as p,
    ):
        d = pathlib.Path(tmp)
        skr_api, kcp_api = (
            pr.api_client(p["skr"], args.threads * 2),
            pr.api_client(p["kcp"], args.threads * 2),
        )
        controlplane.install_crds(kcp_api, controlplane.KYMA_CRD)
        lc.install_crd(kcp_api)
        env = lc.make_env(p["kcp"], kcp_api, d, f"kl-{uuid.uuid4().hex[:8]}")
        controlplane.install_crds(skr_api, CRD)
        listener = lc.ListenerProcess(
            env, "bench", TETHER_LISTENER_THREADS="8", TETHER_LISTENER_WATCH_CACHE_SECONDS="1"
        )
        try:
            sides = {
                "watches-1": Side(
                    "one",
                    env,
                    listener,
                    skr_api,
                    [("configuration", CM, {})],
                    args.objects,
                    args,
                    d,
                ),
                "watches-3": Side(
                    "three",
                    env,
                    listener,
                    skr_api,
                    [
                        ("configuration", CM, {}),
                        ("secrets", SECRET, {"send": {"mode": "digest"}}),
                        ("widgets", WIDGET, {}),
                    ],
                    args.objects,
                    args,
                    d,
                ),
            }
            pollerenv.wait_until(
                lambda: all(s.ready() for s in sides.values()), 60, "Watches in force"
            )
            for name, s in sides.items():
                cold = s.run()
                assert cold["outcome"] == "ok" and cold["sent"] == s.objects, (name, cold)
            pollerenv.wait_until(
                lambda: all(s.summarised() for s in sides.values()), 60, "summaries hold all"
            )
            settled = {n: s.passes() for n, s in sides.items()}
            rounds: dict[str, list[dict[str, Any]]] = {n: [] for n in sides}
            for r in range(args.rounds):
                for name in sides if r % 2 == 0 else reversed(list(sides)):
                    before = kcp_reads(kcp_api)
                    res = sides[name].run()
                    res["kcp_reads"] = reads_during(kcp_api, before)
                    assert res["outcome"] == "ok" and res["sent"] == 0, (name, res)
                    res["baseline_seconds"] = sides[name].baseline()
                    rounds[name].append(res)
                    print(
                        f"round {r + 1} {name:10s} in-sync {res['seconds']:6.2f} s  "
                        f"list {res['baseline_seconds']:6.2f} s  KCP reads {res['kcp_reads']}",
                        flush=True,
                    )
            ways = {
                n: {k: v - settled[n][k] for k, v in s.passes().items()} for n, s in sides.items()
            }
        finally:
            listener.stop()
    summary = {
        n: {
            "objects": sides[n].objects,
            "watches": len(sides[n].watches),
            "in_sync_seconds": statistics.median(x["seconds"] for x in rs),
            "baseline_seconds": statistics.median(x["baseline_seconds"] for x in rs),
            "kcp_reads": int(statistics.median(sum(x["kcp_reads"].values()) for x in rs)),
            "kcp_record_reads": int(
                statistics.median(x["kcp_reads"].get("runtimeconfigmaps", 0) for x in rs)
            ),
            "passes_by_summary": f"{ways[n]['summary']:.0f}/{sum(ways[n].values()):.0f}",
        }
        for n, rs in rounds.items()
    }
    doc = skeleton.write(
        args.out,
        "poller_watches",
        began,
        {
            "settings": skeleton.settings(args),
            "rounds": rounds,
            "summary": summary,
            "ratio": summary["watches-3"]["in_sync_seconds"]
            / summary["watches-1"]["in_sync_seconds"],
        },
    )
    print()
    _print(doc)
    return 0


if __name__ == "__main__":
    sys.exit(main())
