"""Benchmark: one poll run over N ConfigMaps (default 10,000), with 0 and 1% differences,
against a plain paginated list of the same objects (the baseline, same invocation).

Starts real SKR and KCP planes and the real listener (gunicorn, mTLS); creates N watched
ConfigMaps of about 1 KiB each in the SKR, and the N matching records in the KCP (written
straight into the KCP with the listener's own object builder and without data, to keep
set-up short: the digest holds versions only); then
measures, per run: duration, apiserver requests, listener requests (state pages and POSTs),
records sent, and the peak Python heap of the run (tracemalloc, in a separate pass so it
does not slow the timed one). Memory is compared with one unpaginated list of the same
objects (what holding every object at once costs). 1% differences: 0.4% changed in the
runtime, 0.4% missing from the KCP, 0.2% deleted from the runtime.

    .venv/bin/python bench/poller_run.py [--objects 10000] [--page-size 500] [--threads 8]
    .venv/bin/python bench/poller_run.py --report [--out FILE]   # docs/performance.md's tables

The JSON (``--out``, bench/results/poller_run.json) records the commit, load average and
command (bench/provenance.py).
"""

from __future__ import annotations

import concurrent.futures
import json
import pathlib
import sys
import tempfile
import time
import tracemalloc
import uuid
from collections.abc import Callable, Iterable
from typing import Any

import provenance
import skeleton
from kubernetes import client

from listener.storage import records
from poller import metrics, run, scan
from testing import controlplane
from testing import listenerenv as lc
from tether.base import times
from tether.kube import apitypes, gateway
from tether.runtime import sender
from tether.wire import conversion, filters

NS = "bench-poller"
LABELS = {"tether-bench": "poller"}
SELECTOR = "tether-bench=poller"


def parallel(fn: Callable[[Any], Any], items: Iterable[Any], threads: int) -> None:
    with concurrent.futures.ThreadPoolExecutor(threads) as ex:
        for f in [ex.submit(fn, i) for i in items]:
            f.result()


def api_client(plane: controlplane.ControlPlane, pool: int) -> client.ApiClient:
    api = plane.api_client()
    api.rest_client.pool_manager.connection_pool_kw["maxsize"] = pool
    return api


def listener_env(kcp: controlplane.ControlPlane, api: client.ApiClient, d: pathlib.Path) -> lc.Env:
    """What the listener tests' ``listener_env`` fixture sets up (testing.listenerenv)."""
    controlplane.install_crds(api, controlplane.KYMA_CRD, *lc.CRD_FILES)
    return lc.make_env(kcp, api, d, f"kl-{uuid.uuid4().hex[:8]}")


def raw_post(api: client.ApiClient, path: str, body: dict[str, Any]) -> dict[str, Any]:
    """POST JSON through the client's TLS connection pool, without the client's
    (de)serialization: set-up speed only, the measured runs use the real code."""
    cfg = api.configuration
    headers = {"Content-Type": "application/json", "Accept": "application/json"}
    if cfg.api_key.get("authorization"):
        headers["Authorization"] = cfg.api_key["authorization"]
    resp = api.rest_client.pool_manager.request(
        "POST",
        cfg.host + path,
        body=json.dumps(body).encode(),
        headers=headers,
        preload_content=True,
    )
    if resp.status != 201:
        raise RuntimeError(f"POST {path}: HTTP {resp.status} {resp.data[:200]!r}")
    doc: dict[str, Any] = json.loads(resp.data)
    return doc


def cm_body(i: int, version: str = "0") -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": f"cm-{i:05d}", "labels": LABELS},
        "data": {f"k{k}": f"{version}-{i}-{k}-" + "x" * 100 for k in range(8)},
    }


class Poller:
    def __init__(
        self,
        rt_id: str,
        url: str,
        env: lc.Env,
        cert: pathlib.Path,
        key: pathlib.Path,
        skr_api: client.ApiClient,
        page_size: int,
    ) -> None:
        self.metrics = metrics.Metrics()
        flt = filters.ConfigMapFilter.build(filters.DEFAULT_IGNORED_NAMESPACES, SELECTOR)
        self.client = sender.ListenerClient(
            sender.ClientSettings(
                url, rt_id, str(env.server_ca_file), str(cert), str(key), read_timeout=120
            )
        )
        lister = scan.Lister(
            gateway.Kube(skr_api),
            flt,
            page_size=page_size,
            timeout=120,
            on_request=self.metrics.apiserver_requests.inc,
        )
        self.runner = run.Runner(
            rt_id,
            run.RunSettings(page_size=page_size, rate=10_000, burst=10_000),
            flt,
            lister,
            self.client,
            self.metrics,
        )

    def counts(self) -> dict[str, float]:
        g = self.metrics.registry.get_sample_value
        return {
            "apiserver": g("tether_poller_apiserver_requests_total") or 0.0,
            "state": g("tether_poller_listener_requests_total", {"call": "state"}) or 0.0,
            "changes": g("tether_poller_listener_requests_total", {"call": "changes"}) or 0.0,
        }

    def measure(self, trace: bool = False) -> dict[str, Any]:
        before = self.counts()
        if trace:
            tracemalloc.start()
        t0 = time.perf_counter()
        res = self.runner.run()
        seconds = time.perf_counter() - t0
        peak = 0
        if trace:
            peak = tracemalloc.get_traced_memory()[1]
            tracemalloc.stop()
        after = self.counts()
        assert res.outcome == "ok", res
        out: dict[str, Any] = {
            "seconds": seconds,
            "digest_seconds": res.digest_seconds,
            "scanned": res.scanned,
            "digest_entries": res.digest_entries,
            "differences": res.differences,
            "sent": res.sent,
            "apiserver_requests": int(after["apiserver"] - before["apiserver"]),
            "listener_state_requests": int(after["state"] - before["state"]),
            "listener_post_requests": int(after["changes"] - before["changes"]),
        }
        if trace:
            out["peak_heap_bytes"] = peak
        return out


def baseline_list(skr_api: client.ApiClient, page_size: int, trace: bool = False) -> dict[str, Any]:
    """The irreducible part: a paginated list of the same objects, nothing else (with
    ``page_size`` 0: one unpaginated list, i.e. every object held at once)."""
    core = client.CoreV1Api(skr_api)
    if trace:
        tracemalloc.start()
    t0 = time.perf_counter()
    token, requests, objects, nbytes = "", 0, 0, 0
    while True:
        kw: dict[str, Any] = {"label_selector": SELECTOR, "_preload_content": False}
        if page_size:
            kw["limit"] = page_size
        if token:
            kw["_continue"] = token
        resp: Any = core.list_config_map_for_all_namespaces(**kw)
        requests += 1
        raw = resp.data
        nbytes += len(raw)
        doc = json.loads(raw)
        objects += len(doc["items"])
        token = doc["metadata"].get("continue") or ""
        if not token:
            break
    seconds = time.perf_counter() - t0
    out: dict[str, Any] = {
        "seconds": seconds,
        "requests": requests,
        "objects": objects,
        "bytes": nbytes,
    }
    if trace:
        out["peak_heap_bytes"] = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    return out


def make_differences(
    core: client.CoreV1Api,
    objs: client.CustomObjectsApi,
    env: lc.Env,
    rt_id: str,
    n: int,
    offset: int,
    threads: int,
) -> dict[str, int]:
    """1% of n: 0.4% changed, 0.4% missing from the KCP, 0.2% deleted in the runtime."""
    k = max(n // 100, 5)
    changed = range(offset, offset + k * 2 // 5)
    missing = range(changed.stop, changed.stop + k * 2 // 5)
    deleted = range(missing.stop, offset + k)
    parallel(
        lambda i: core.patch_namespaced_config_map(f"cm-{i:05d}", NS, {"data": {"k0": "changed"}}),
        changed,
        threads,
    )
    parallel(
        lambda i: objs.delete_namespaced_custom_object(
            apitypes.RUNTIME_CONFIGMAPS.group,
            apitypes.RUNTIME_CONFIGMAPS.version,
            env.namespace,
            apitypes.RUNTIME_CONFIGMAPS.plural,
            records.object_name(records.Key(rt_id, lc.COMPAT_WATCH, NS, f"cm-{i:05d}")),
        ),
        missing,
        threads,
    )
    parallel(lambda i: core.delete_namespaced_config_map(f"cm-{i:05d}", NS), deleted, threads)
    return {"changed": len(changed), "missing": len(missing), "deleted": len(deleted)}


RUNS = (
    ("0 differences (first run)", "run_0_differences_first"),
    ("0 differences", "run_0_differences"),
    ("1 % differences", "run_1pct_differences"),
    ("0 differences (after)", "run_0_differences_after"),
)


def tables(doc: dict[str, Any]) -> str:
    """docs/performance.md's tables: the runs against the paginated list, and peak heaps."""
    base, digest, mib = doc["baseline_list"], doc["digest_only"], 1024 * 1024
    lines = [
        "| run | seconds | × list | of which digest | apiserver requests | listener GET state | "
        "listener POST | records sent |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
        f"| baseline: paginated list | {base['seconds']:.2f} | 1.0 | – | "
        f"{base['requests']} | – | – | – |",
        f"| digest only ({doc['run_0_differences']['listener_state_requests']} state GETs) | "
        f"{digest['seconds']:.2f} | {digest['seconds'] / base['seconds']:.1f} | "
        f"{digest['seconds']:.2f} | – | "
        f"{doc['run_0_differences']['listener_state_requests']} | – | – |",
    ]
    for label, key in RUNS:
        r = doc[key]
        lines.append(
            f"| {label} | {r['seconds']:.2f} | {r['seconds'] / base['seconds']:.1f} | "
            f"{r['digest_seconds']:.2f} | {r['apiserver_requests']} | "
            f"{r['listener_state_requests']} | "
            f"{r['listener_post_requests']} | {r['sent']} |"
        )
    m = doc["memory"]
    lines += [
        "",
        "| memory (peak Python heap) | MiB |",
        "|---|---:|",
        f"| poll run, 0 % differences | {m['run_0_differences_peak_heap'] / mib:.1f} |",
        f"| poll run, 1 % differences | {m['run_1pct_differences_peak_heap'] / mib:.1f} |",
        f"| paginated list alone (one page held) | {m['paginated_list_peak_heap'] / mib:.1f} |",
        "| one unpaginated list (every object held; "
        f"JSON {m['listed_json_bytes'] / mib:.1f} MiB) | "
        f"{m['unpaginated_list_peak_heap'] / mib:.1f} |",
    ]
    return "\n".join(lines)


def report(doc: dict[str, Any]) -> None:
    skeleton.report(doc, tables(doc))


def main(argv: list[str]) -> int:
    ap = skeleton.options("poller_run", __doc__.splitlines()[0])
    ap.add_argument("--objects", type=int, default=10_000)
    ap.add_argument("--page-size", type=int, default=500)
    ap.add_argument("--threads", type=int, default=8)
    args = skeleton.parse(ap, report, argv)
    began = provenance.start()
    n = args.objects
    started = time.monotonic()
    phases: dict[str, float] = {}
    with (
        tempfile.TemporaryDirectory(prefix="bench-poller-") as tmp,
        controlplane.planes("skr", "kcp") as p,
    ):
        d = pathlib.Path(tmp)
        skr_api, kcp_api = (
            api_client(p["skr"], args.threads * 2),
            api_client(p["kcp"], args.threads * 2),
        )
        env = listener_env(p["kcp"], kcp_api, d)
        listener = lc.ListenerProcess(env, "bench", TETHER_LISTENER_THREADS="4")
        rt_id = f"rt-bench-{uuid.uuid4().hex[:6]}"
        domain = "c-bench.kyma.example.com"
        lc.create_kyma(kcp_api, env.namespace, rt_id, domain)
        env.runtime_ca.issue(rt_id, dns_names=[domain], client=True).write(
            d / "rt.crt", d / "rt.key"
        )
        core = client.CoreV1Api(skr_api)
        objs = client.CustomObjectsApi(kcp_api)
        core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=NS)))
        t = time.monotonic()
        created: dict[int, str] = {}

        def create(i: int) -> None:
            doc = raw_post(skr_api, f"/api/v1/namespaces/{NS}/configmaps", cm_body(i))
            created[i] = doc["metadata"]["resourceVersion"]

        parallel(create, range(n), args.threads)
        phases["create_configmaps"] = time.monotonic() - t
        t = time.monotonic()
        observed = times.now()
        path = (
            f"/apis/{apitypes.RUNTIME_CONFIGMAPS.group}/{apitypes.RUNTIME_CONFIGMAPS.version}"
            f"/namespaces/{env.namespace}/{apitypes.RUNTIME_CONFIGMAPS.plural}"
        )

        def seed(i: int) -> None:  # the record straight into the KCP, without data
            obj = {
                "metadata": {
                    "namespace": NS,
                    "name": f"cm-{i:05d}",
                    "uid": "",
                    "resourceVersion": created[i],
                }
            }
            rec = conversion.from_configmap(
                obj, runtime_id=rt_id, source="webhook", observed_at=observed
            )
            raw_post(kcp_api, path, records.body(lc.as_stored(dict(rec)), env.namespace))

        parallel(seed, range(n), args.threads)
        phases["seed_kcp"] = time.monotonic() - t
        poller = Poller(
            rt_id, listener.url, env, d / "rt.crt", d / "rt.key", skr_api, args.page_size
        )
        try:
            base = baseline_list(skr_api, args.page_size)
            t = time.perf_counter()
            digest_entries = sum(1 for _ in poller.client.iter_state(5000))
            digest = {"seconds": time.perf_counter() - t, "entries": digest_entries}
            cold = poller.measure()
            zero = poller.measure()
            assert zero["sent"] == 0, zero
            want = make_differences(core, objs, env, rt_id, n, 0, args.threads)
            one = poller.measure()
            assert one["differences"] == want, (one["differences"], want)
            zero_after = poller.measure()
            assert zero_after["sent"] == 0, zero_after
            # memory, in separate passes (tracemalloc slows the process)
            mem_zero = poller.measure(trace=True)
            make_differences(core, objs, env, rt_id, n, n // 2, args.threads)
            mem_one = poller.measure(trace=True)
            mem_all = baseline_list(skr_api, 0, trace=True)
            mem_page = baseline_list(skr_api, args.page_size, trace=True)
        finally:
            poller.client.close()
            listener.stop()
    result = {
        "machine": skeleton.machine(),
        "settings": {
            "objects": n,
            "page_size": args.page_size,
            "state_page_size": 5000,
            "batch_items": 100,
            "configmap_json_bytes": base["bytes"] // max(base["objects"], 1),
        },
        "setup_seconds": phases,
        "baseline_list": base,
        "digest_only": digest,
        "run_0_differences_first": cold,
        "run_0_differences": zero,
        "run_1pct_differences": one,
        "run_0_differences_after": zero_after,
        "memory": {
            "run_0_differences_peak_heap": mem_zero["peak_heap_bytes"],
            "run_1pct_differences_peak_heap": mem_one["peak_heap_bytes"],
            "paginated_list_peak_heap": mem_page["peak_heap_bytes"],
            "unpaginated_list_peak_heap": mem_all["peak_heap_bytes"],
            "listed_json_bytes": mem_all["bytes"],
        },
        "ratios": {
            "run_0_vs_list_seconds": zero["seconds"] / base["seconds"],
            "run_1pct_vs_list_seconds": one["seconds"] / base["seconds"],
            "run_peak_heap_vs_unpaginated_list": mem_one["peak_heap_bytes"]
            / mem_all["peak_heap_bytes"],
        },
        "total_seconds": time.monotonic() - started,
    }
    result = skeleton.write(args.out, "poller_run", began, result)
    mib = 1024 * 1024
    print(
        f"poller run over {n} ConfigMaps "
        f"({result['settings']['configmap_json_bytes']} B each as JSON), "
        f"page {args.page_size}; setup {phases}"
    )
    print(
        f"{'run':<26}{'seconds':>9}{'x list':>8}{'digest s':>9}{'apiserver':>10}"
        f"{'state':>7}{'POST':>6}{'sent':>6}"
    )
    print(
        f"{'baseline: paginated list':<26}{base['seconds']:>9.2f}{1.0:>8.2f}{'-':>9}"
        f"{base['requests']:>10}"
        f"{'-':>7}{'-':>6}{'-':>6}"
    )
    print(
        f"{'digest only (state GETs)':<26}{digest['seconds']:>9.2f}"
        f"{digest['seconds'] / base['seconds']:>8.2f}"
        f"{digest['seconds']:>9.2f}{'-':>10}{'-':>7}{'-':>6}{'-':>6}"
    )
    for label, r in (
        ("0 differences (first)", cold),
        ("0 differences", zero),
        ("1% differences", one),
        ("0 differences (again)", zero_after),
    ):
        print(
            f"{label:<26}{r['seconds']:>9.2f}{r['seconds'] / base['seconds']:>8.2f}"
            f"{r['digest_seconds']:>9.2f}"
            f"{r['apiserver_requests']:>10}"
            f"{r['listener_state_requests']:>7}{r['listener_post_requests']:>6}{r['sent']:>6}"
        )
    m = result["memory"]
    print(
        f"peak heap: run 0% {m['run_0_differences_peak_heap'] / mib:.1f} MiB, run 1% "
        f"{m['run_1pct_differences_peak_heap'] / mib:.1f} MiB, "
        f"paginated list {m['paginated_list_peak_heap'] / mib:.1f} MiB, "
        f"unpaginated list {m['unpaginated_list_peak_heap'] / mib:.1f} MiB "
        f"(listed JSON {m['listed_json_bytes'] / mib:.1f} MiB)"
    )
    print(f"total {result['total_seconds']:.0f}s; wrote {args.out}")
    report(result)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
