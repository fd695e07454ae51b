"""Benchmark: one in-sync poll run as a runtime's objects grow (1,000, 10,000, 100,000
ConfigMaps), by buckets and, as the baseline in the same invocation, by the full digest.

Starts real SKR and KCP planes and the real listener (gunicorn, mTLS, one worker). One
runtime grows from size to size: its ConfigMaps are created in the SKR concurrently by
direct API calls (small objects, raw POSTs through the client's TLS pool), and the matching
records written straight into the KCP in their stored form (``listener.storage.records.body``, which
carries the bucket label), without data, so that setting up 100,000 fits in minutes. After
each growth the runtime's RuntimeStateSummary is deleted, so that the first summary read
builds it by the listener's own code (``listener.fleet.statesummary``: one full metadata listing,
once); two warm-up runs by buckets settle it. Then, per size and path, one in-sync run in a
fresh child process (so that its memory is its own):

* **KCP requests**: the KCP apiserver's own ``apiserver_request_total`` for Tether's API
  group, before and after the run (by resource and verb);
* **KCP objects read**: list items the KCP apiserver returned for Tether's resources
  (``apiserver_storage_list_returned_objects_total`` and
  ``apiserver_cache_list_returned_objects_total``, whichever serves the list) plus one per
  GET of a Tether object; the expected count from the request pattern is printed beside it;
* **poller run seconds** (wall clock of ``Runner.run`` in the child);
* **peak RSS** of the child during the run (``VmHWM`` after resetting it through
  ``/proc/self/clear_refs`` just before the run) and its RSS before the run (imports,
  clients).

The full-digest path is forced by the poller's own run setting (``RunSettings.buckets``
False: what a poller does against a listener without summaries); nothing new was added.

    .venv/bin/python bench/poller_antientropy.py [--sizes 1000,10000,100000] [--threads 12]
    .venv/bin/python bench/poller_antientropy.py --report [--out FILE]
        # docs/performance.md's table

The JSON (``--out``) records the commit, load average and command (bench/provenance.py).
"""

from __future__ import annotations

import concurrent.futures
import json
import pathlib
import re
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterable
from typing import Any

import provenance
import skeleton
from kubernetes import client

from listener.fleet import statesummary
from listener.storage import records
from poller import metrics, run, scan
from testing import controlplane
from testing import listenerenv as lc
from tether.base import times
from tether.kube import apitypes, gateway
from tether.runtime import sender
from tether.wire import conversion, filters

NS = "bench-ae"
LABELS = {"tether-bench": "antientropy"}
SELECTOR = "tether-bench=antientropy"
GROUP = apitypes.RUNTIME_CONFIGMAPS.group
PAGE = 500


def parallel(fn: Callable[[Any], Any], items: Iterable[Any], threads: int) -> None:
    with concurrent.futures.ThreadPoolExecutor(threads) as ex:
        for f in [ex.submit(fn, i) for i in items]:
            f.result()


def api_client(plane: controlplane.ControlPlane, pool: int) -> client.ApiClient:
    api: client.ApiClient = plane.api_client()
    api.rest_client.pool_manager.connection_pool_kw["maxsize"] = pool
    return api


def raw(
    api: client.ApiClient,
    method: str,
    path: str,
    body: dict[str, Any] | None = None,
    ok: tuple[int, ...] = (200, 201),
) -> Any:
    """A request through the client's TLS pool without its (de)serialization (set-up
    speed; the measured runs use the real code)."""
    cfg = api.configuration
    headers = {"Content-Type": "application/json", "Accept": "application/json"}
    if cfg.api_key.get("authorization"):
        headers["Authorization"] = cfg.api_key["authorization"]
    for attempt in range(5):
        resp = api.rest_client.pool_manager.request(
            method,
            cfg.host + path,
            body=None if body is None else json.dumps(body).encode(),
            headers=headers,
            preload_content=True,
        )
        if resp.status in ok:
            return resp
        if resp.status in (429, 500, 503, 504) and attempt < 4:
            time.sleep(0.5 * (attempt + 1))
            continue
        raise RuntimeError(f"{method} {path}: HTTP {resp.status} {resp.data[:200]!r}")
    raise AssertionError("unreachable")


def listener_env(kcp: controlplane.ControlPlane, api: client.ApiClient, d: pathlib.Path) -> lc.Env:
    controlplane.install_crds(api, controlplane.KYMA_CRD, *lc.CRD_FILES)
    return lc.make_env(kcp, api, d, f"kl-{uuid.uuid4().hex[:8]}")


# -- the KCP apiserver's own counts ------------------------------------------------------------

_SAMPLE = re.compile(r"^(\w+)\{(.*)\} (\S+)$")
_LABEL = re.compile(r'(\w+)="([^"]*)"')


def kcp_counts(api: client.ApiClient) -> dict[str, float]:
    """Tether's requests by ``resource verb`` and list items returned by ``objects
    resource`` from the KCP apiserver's /metrics."""
    text = raw(api, "GET", "/metrics").data.decode()
    out: dict[str, float] = {}
    for line in text.splitlines():
        m = _SAMPLE.match(line)
        if m is None:
            continue
        name, labels, value = m.group(1), dict(_LABEL.findall(m.group(2))), float(m.group(3))
        if name == "apiserver_request_total":
            if labels.get("group") == GROUP:
                key = f"{labels.get('resource', '')} {labels.get('verb', '')}"
                out[key] = out.get(key, 0.0) + value
            elif labels.get("resource") == "leases":
                key = f"leases {labels.get('verb', '')}"
                out[key] = out.get(key, 0.0) + value
        elif name in (
            "apiserver_storage_list_returned_objects_total",
            "apiserver_cache_list_returned_objects_total",
        ):
            res = labels.get("resource") or labels.get("resource_prefix") or ""
            res = res.strip("/").split("/")[-1]
            if f".{GROUP}" in res or res in (
                apitypes.RUNTIME_CONFIGMAPS.plural,
                apitypes.RUNTIME_STATE_SUMMARIES.plural,
            ):
                key = f"objects {res.split('.')[0]}"
                out[key] = out.get(key, 0.0) + value
    return out


def diff_counts(after: dict[str, float], before: dict[str, float]) -> dict[str, int]:
    return {
        k: int(v - before.get(k, 0.0)) for k, v in sorted(after.items()) if v - before.get(k, 0.0)
    }


def summarize(used: dict[str, int]) -> dict[str, int]:
    requests = sum(v for k, v in used.items() if not k.startswith(("objects ", "leases ")))
    gets = sum(v for k, v in used.items() if k.endswith(" GET"))
    listed = sum(v for k, v in used.items() if k.startswith("objects "))
    lists = sum(v for k, v in used.items() if k.endswith(" LIST"))
    return {
        "kcp_requests": requests,
        "kcp_lists": lists,
        "kcp_gets": gets,
        "kcp_objects_read": listed + gets,
        "lease_requests": sum(v for k, v in used.items() if k.startswith("leases ")),
    }


# -- the measured run, in a child process --------------------------------------------------------


def _vm(field: str) -> int:
    for line in pathlib.Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    return 0


def child(spec: dict[str, Any]) -> int:
    kube = gateway.from_kubeconfig(spec["kubeconfig"])
    m = metrics.Metrics()
    flt = filters.ConfigMapFilter.build(filters.DEFAULT_IGNORED_NAMESPACES, SELECTOR)
    cl = sender.ListenerClient(
        sender.ClientSettings(
            spec["url"], spec["runtime"], spec["ca"], spec["cert"], spec["key"], read_timeout=600
        )
    )
    lister = scan.Lister(
        kube, flt, page_size=PAGE, timeout=300, on_request=m.apiserver_requests.inc
    )
    runner = run.Runner(
        spec["runtime"],
        run.RunSettings(page_size=PAGE, buckets=spec["buckets"], rate=100_000, burst=100_000),
        flt,
        lister,
        cl,
        m,
        identity=lister.identity,
    )
    lister.identity()  # warm the connections outside the measured run
    rss_before = _vm("VmRSS")
    try:
        pathlib.Path("/proc/self/clear_refs").write_text("5")  # reset VmHWM to the current RSS
        reset = True
    except OSError:
        reset = False
    t0 = time.perf_counter()
    res = runner.run()
    seconds = time.perf_counter() - t0
    g = m.registry.get_sample_value
    out = {
        "outcome": res.outcome,
        "detail": res.detail,
        "seconds": seconds,
        "scanned": res.scanned,
        "digest_entries": res.digest_entries,
        "sent": res.sent,
        "differences": res.differences,
        "rss_before_bytes": rss_before,
        "peak_rss_bytes": _vm("VmHWM"),
        "hwm_reset": reset,
        "skr_requests": int(g("tether_poller_apiserver_requests_total") or 0),
        "listener_requests": {
            c: int(g("tether_poller_listener_requests_total", {"call": c}) or 0)
            for c in ("summary", "bucket", "state", "changes")
        },
    }
    cl.close()
    print(json.dumps(out))
    return 0


# -- set-up ------------------------------------------------------------------------------------


class Fleet:
    """One runtime grown from size to size: ConfigMaps in the SKR, records in the KCP."""

    def __init__(
        self,
        skr_api: client.ApiClient,
        kcp_api: client.ApiClient,
        env: lc.Env,
        rt_id: str,
        threads: int,
    ) -> None:
        self.skr_api, self.kcp_api, self.env, self.rt_id = skr_api, kcp_api, env, rt_id
        self.threads = threads
        self.n = 0
        self.observed = times.now()

    def grow(self, n: int) -> dict[str, float]:
        created: dict[int, dict[str, Any]] = {}
        t = time.monotonic()

        def create(i: int) -> None:
            body = {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": f"cm-{i:06d}", "labels": LABELS},
                "data": {"v": str(i)},
            }
            doc = json.loads(
                raw(self.skr_api, "POST", f"/api/v1/namespaces/{NS}/configmaps", body).data
            )
            created[i] = doc["metadata"]

        parallel(create, range(self.n, n), self.threads)
        cms = time.monotonic() - t
        t = time.monotonic()
        path = (
            f"/apis/{GROUP}/{apitypes.RUNTIME_CONFIGMAPS.version}"
            f"/namespaces/{self.env.namespace}/{apitypes.RUNTIME_CONFIGMAPS.plural}"
        )

        def seed(i: int) -> None:  # the stored form, as the listener writes a new key
            meta = created[i]
            obj = {
                "metadata": {
                    "namespace": NS,
                    "name": meta["name"],
                    "uid": meta["uid"],
                    "resourceVersion": meta["resourceVersion"],
                    "labels": LABELS,
                }
            }
            rec = conversion.from_configmap(
                obj, runtime_id=self.rt_id, source="webhook", observed_at=self.observed
            )
            raw(
                self.kcp_api,
                "POST",
                path,
                records.body(lc.as_stored(dict(rec)), self.env.namespace),
            )

        parallel(seed, range(self.n, n), self.threads)
        self.n = n
        # the summary is rebuilt from the records by the listener at its next read
        raw(
            self.kcp_api,
            "DELETE",
            f"/apis/{GROUP}/{apitypes.RUNTIME_STATE_SUMMARIES.version}/namespaces/"
            f"{self.env.namespace}/{apitypes.RUNTIME_STATE_SUMMARIES.plural}/{statesummary.name_of(self.rt_id)}",
            ok=(200, 202, 404),
        )
        return {"create_configmaps": cms, "seed_kcp": time.monotonic() - t}


def measure(spec: dict[str, Any], kcp_api: client.ApiClient) -> dict[str, Any]:
    before = kcp_counts(kcp_api)
    proc = subprocess.run(
        [sys.executable, __file__, "--child", json.dumps(spec)],
        capture_output=True,
        text=True,
        timeout=1800,
        check=False,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"child failed: {proc.stderr[-3000:]}")
    time.sleep(1.5)  # merges and heartbeats after the answers land in the same window
    used = diff_counts(kcp_counts(kcp_api), before)
    out: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["outcome"] == "ok" and out["sent"] == 0, out
    out["kcp"] = used
    out.update(summarize(used))
    return out


def table(doc: dict[str, Any]) -> str:
    """docs/performance.md's table: one in-sync run per size and path."""
    lines = [
        "| ConfigMaps (= records) | path | KCP requests | KCP objects read | SKR requests | "
        "listener requests | run s | peak RSS |",
        "|---:|---|---:|---:|---:|---:|---:|---:|",
    ]
    for row in doc["runs"]:
        for path, label in (("buckets", "buckets"), ("full_digest", "full digest")):
            r = row[path]
            read = (
                f"**{r['kcp_objects_read']:,}**"
                if path == "buckets"
                else f"{r['kcp_objects_read']:,}"
            )
            lines.append(
                f"| {row['objects']:,} | {label} | {r['kcp_requests']} | {read} | "
                f"{r['skr_requests']} | "
                f"{sum(r['listener_requests'].values())} | {r['seconds']:.2f} | "
                f"{r['peak_rss_bytes'] / 2**20:.1f} MiB |"
            )
    return "\n".join(lines)


def report(doc: dict[str, Any]) -> None:
    skeleton.report(doc, table(doc))


def main(argv: list[str]) -> int:
    if argv[:1] == ["--child"]:
        return child(json.loads(argv[1]))
    ap = skeleton.options("poller_antientropy", __doc__.splitlines()[0])
    ap.add_argument("--sizes", default="1000,10000,100000")
    ap.add_argument("--threads", type=int, default=12)
    ap.add_argument(
        "--budget-minutes",
        type=float,
        default=15.0,
        help="set-up time for all sizes; a size that would not fit is replaced "
        "by the largest multiple of 5,000 that does (and recorded)",
    )
    args = skeleton.parse(ap, report, argv)
    began = provenance.start()
    sizes = sorted(int(s) for s in args.sizes.split(","))
    started = time.monotonic()
    rows: list[dict[str, Any]] = []
    setup: dict[str, dict[str, float]] = {}
    skipped: list[dict[str, int]] = []
    with (
        tempfile.TemporaryDirectory(prefix="bench-ae-") as tmp,
        controlplane.planes("skr", "kcp") as p,
    ):
        d = pathlib.Path(tmp)
        skr_api = api_client(p["skr"], args.threads * 2)
        kcp_api = api_client(p["kcp"], args.threads * 2)
        env = listener_env(p["kcp"], kcp_api, d)
        listener = lc.ListenerProcess(
            env, "bench", TETHER_LISTENER_THREADS="4", TETHER_LISTENER_KCP_TIMEOUT_SECONDS="120"
        )
        rt_id = f"rt-bench-{uuid.uuid4().hex[:6]}"
        domain = "c-bench.kyma.example.com"
        lc.create_kyma(kcp_api, env.namespace, rt_id, domain)
        env.runtime_ca.issue(rt_id, dns_names=[domain], client=True).write(
            d / "rt.crt", d / "rt.key"
        )
        client.CoreV1Api(skr_api).create_namespace(
            client.V1Namespace(metadata=client.V1ObjectMeta(name=NS))
        )
        fleet = Fleet(skr_api, kcp_api, env, rt_id, args.threads)
        base = {
            "runtime": rt_id,
            "url": listener.url,
            "ca": str(env.server_ca_file),
            "cert": str(d / "rt.crt"),
            "key": str(d / "rt.key"),
            "kubeconfig": str(p["skr"].kubeconfig),
        }
        try:
            per_object = 0.0  # set-up seconds per object, from the sizes done
            for planned in sizes:
                n = planned
                if per_object:
                    left = args.budget_minutes * 60 - (time.monotonic() - started)
                    fits = (fleet.n + int(left / per_object)) // 5000 * 5000
                    if fits < n:
                        skipped.append(
                            {
                                "planned": planned,
                                "projected_setup_seconds": round((planned - fleet.n) * per_object),
                            }
                        )
                        n = fits
                    if n <= fleet.n:
                        break
                t = time.monotonic()
                grown = n - fleet.n
                setup[str(n)] = fleet.grow(n)
                per_object = (time.monotonic() - t) / grown
                t = time.monotonic()
                warm = [measure({**base, "buckets": True}, kcp_api) for _ in range(2)]
                setup[str(n)]["bootstrap_and_settle"] = time.monotonic() - t
                row: dict[str, Any] = {"objects": n, "bootstrap": warm[0]}
                row["buckets"] = measure({**base, "buckets": True}, kcp_api)
                row["full_digest"] = measure({**base, "buckets": False}, kcp_api)
                rows.append(row)
                print(
                    f"{n}: buckets {row['buckets']['kcp_objects_read']} objects read, "
                    f"full digest {row['full_digest']['kcp_objects_read']}; setup "
                    f"{ {k: round(v) for k, v in setup[str(n)].items()} }",
                    flush=True,
                )
        finally:
            listener.stop()
    result = {
        "machine": skeleton.machine(note="shared with other engineers' test runs"),
        "settings": {
            "page_size": PAGE,
            "state_page_size": run.RunSettings().state_page_size,
            "listener_threads": 4,
            "listener_workers": 1,
            "buckets": 256,
        },
        "setup_seconds": setup,
        "runs": rows,
        "not_measured": skipped,
        "total_seconds": time.monotonic() - started,
    }
    result = skeleton.write(args.out, "poller_antientropy", began, result)
    mib = 1024 * 1024
    head = (
        f"{'objects':>8} {'path':<12}{'KCP req':>8}{'objs read':>10}{'run s':>8}"
        f"{'peak RSS':>10}{'RSS before':>11}{'SKR req':>8}{'listener req':>13}"
    )
    print(head)
    for row in rows:
        for path in ("buckets", "full_digest"):
            r = row[path]
            lr = sum(r["listener_requests"].values())
            print(
                f"{row['objects']:>8} {path:<12}{r['kcp_requests']:>8}{r['kcp_objects_read']:>10}"
                f"{r['seconds']:>8.2f}{r['peak_rss_bytes'] / mib:>9.1f}M"
                f"{r['rss_before_bytes'] / mib:>10.1f}M{r['skr_requests']:>8}{lr:>13}"
            )
    for sk in skipped:
        print(
            f"not measured: {sk['planned']} objects (set-up projected at "
            f"{sk['projected_setup_seconds']} s, past --budget-minutes)"
        )
    print(f"total {result['total_seconds']:.0f}s; wrote {args.out}")
    report(result)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
