"""Benchmark, end to end: customer ConfigMap writes on the real SKR apiserver with no webhook,
with Tether's webhook, and with a synchronous forwarder, while the listener is healthy,
refused, black-holed and slow; propagation to the record persisted in the KCP. Same run.

Starts one SKR and one KCP plane (real kube-apiservers and etcd), the real listener on the
KCP (gunicorn, mTLS, the Deployment's 2 workers × 16 threads, the least-privilege Role, a
Kyma CR for the runtime; its per-runtime rate limit is lifted as in the tests, so that no
configuration meets a 429), and measures in one invocation, each in its own namespace:

* ``none``: no webhook registered for the namespace (the baseline);
* ``tether``: the real webhook (``tether webhook``: gunicorn, the Deployment's 2 workers ×
  8 threads, one replica) registered with manifests/skr/webhook's configuration
  (``failurePolicy: Ignore``, ``timeoutSeconds: 2``, ``sideEffects: NoneOnDryRun``, its
  matchConditions), forwarding through its queue;
* ``sync``: testing/syncforwarder.py (its docstring states how the anchor is read: up to 3
  attempts inside the admission call, 2 s and 4 s backoff, 5xx answers and transport
  failures retried, 180 s per attempt, a new TLS connection per call), registered like
  KLM's watcher: ``timeoutSeconds: 15``, ``failurePolicy: Ignore``, no matchConditions;
* ``noop`` (once per round): bench/webhook_noop_server.py under the webhook's gunicorn
  settings, registered like Tether's: the cost of a correct webhook call alone (it answers
  with the request's uid); ``gonoop`` (once per round): the Go no-op (testing/gonoop), the
  floor. The "against the no-ops" table sets Tether healthy beside each: writes/s and the
  apiserver's mean admission call (while Tether forwards).

Listener conditions for ``tether`` and ``sync``:

* ``healthy``: the real listener;
* ``refused``: a loopback port with nothing listening (connection refused);
* ``blackhole``: testing/blackhole.py, accepts and never answers (not even TLS);
* ``slow``: the stand-in receiver (testing/receiver.py, mTLS, mode ``slow``) that answers
  200 after 3 s; the real listener cannot be made slow, so nothing reaches the KCP here.

Workload: ``--clients`` concurrent writers for ``--seconds`` per window, each on its own
keep-alive HTTPS connection to the SKR apiserver (raw JSON, system:masters), on ConfigMaps
of its own (16 data keys, ~1 KiB): every fifth write creates a new ConfigMap, the others
merge-patch one of the writer's earlier ones (a new ``seq`` value and one changed key).
Throughput counts acknowledged writes per second of the window; latency is per write.
Windows run in the order none, noop, none, gonoop, none, (tether, sync), none, (sync,
tether), none, ... so that drifting load hits all alike; ratio = writes/s ÷ the mean of the
two ``none`` windows around it.

Propagation (healthy): a watch on the KCP's RuntimeConfigMaps stamps each persisted
version on arrival; per write, the time from its acknowledgement to the first persisted
record of that ConfigMap with resourceVersion ≥ the write's (tether: the state read back
after the write, or a later one); for ``sync`` the record carries no resourceVersion of
the write, so it is matched by the write's ``seq`` (≥) and is persisted before the write
is acknowledged (negative values). CPU seconds of every process (both apiservers and etcds,
webhook, listener, the generator) are sampled per window.

``--rate 50`` paces the writers at 50 writes/s in all (each at its share) instead of
writing as fast as they can: propagation at a sustained rate (issue 26: p99 ≤ 1 s at 50
writes/s). ``--conditions healthy --kinds tether`` runs only none, tether healthy, none
(~2 minutes); ``--webhook-env NAME=VALUE`` (``--listener-env``) sets a webhook's
(the listener's) setting for a run. Per healthy
window the JSON holds where a record waited (``waits_ms``: the webhook's
``tether_webhook_dispatch_seconds`` (queue and read-back), ``forward_seconds`` (its POSTs)
and ``delivery_seconds`` means and the bucket of their 99th percentile; the listener's
request and per-record persist means over the window) and ``propagation_by_second`` (per
second of the window: writes, p50 and max ms; a stall shows as a run of seconds).

Prints the tables and writes bench/results/e2e.json.

    .venv/bin/python bench/e2e.py [--seconds 20] [--clients 8] [--rounds 1] [--rate 50]
    .venv/bin/python bench/e2e.py --report [--out FILE]   # docs/performance.md's first two tables

The JSON (``--out``) records the commit, load average and command (bench/provenance.py).

About 7–8 minutes on the shared 2-core machine; ``--rounds 2`` repeats every configuration
(conditions in reverse order) for about twice that.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import pathlib
import random
import ssl
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any

import provenance
import skeleton
from kubernetes import client

from testing import blackhole, controlplane, cpuset, gonoop, rawapi, receiver
from testing import listenerenv as lt
from testing import webhookstack as stack

CONDITIONS = ("healthy", "refused", "blackhole", "slow")
KINDS = ("tether", "sync", "noop", "gonoop")
NOOPS = ("noop", "gonoop")  # no-op webhooks: Python (bench/webhook_noop_server.py) and Go
RUNTIME_ID = "rt-e2e"
KCP_NAMESPACE = "tether-e2e"
HOOKS = {
    "tether": "configmaps.tether.kyma-project.io",
    "sync": "sync.e2e.bench.tether.kyma-project.io",
}
SLOW_SECONDS = 3.0
REVIEW_SECONDS = "tether_webhook_http_request_duration_seconds"  # a review's one histogram


# -- HTTPS to an apiserver ------------------------------------------------------------------

Api = rawapi.Api


def admission_seconds(api: Api, hook: str) -> tuple[float, float]:
    """(sum, count) of the apiserver's own histogram of calls to the webhook ``hook``
    (apiserver_admission_webhook_admission_duration_seconds), over all label sets."""
    conn = api.connect()
    conn.request("GET", "/metrics")
    text = conn.getresponse().read().decode()
    conn.close()
    total, count = 0.0, 0.0
    for line in text.splitlines():
        if f'name="{hook}"' not in line:
            continue
        if line.startswith("apiserver_admission_webhook_admission_duration_seconds_sum{"):
            total += float(line.rsplit(" ", 1)[1])
        elif line.startswith("apiserver_admission_webhook_admission_duration_seconds_count{"):
            count += float(line.rsplit(" ", 1)[1])
    return total, count


def configmap_gets(api: Api) -> float:
    """The SKR apiserver's own count of GETs of single ConfigMaps (apiserver_request_total):
    the webhook's read-backs, for reads per write."""
    conn = api.connect()
    conn.request("GET", "/metrics")
    text = conn.getresponse().read().decode()
    conn.close()
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("apiserver_request_total{")
        and 'resource="configmaps"' in line
        and 'verb="GET"' in line
        and 'subresource=""' in line
    )


def histogram(text: str, name: str) -> tuple[float, float]:
    """(sum, count) of the histogram ``name`` in a Prometheus exposition, over all label sets."""
    total, count = 0.0, 0.0
    for line in text.splitlines():
        if line.startswith(name + "_sum"):
            total += float(line.rsplit(" ", 1)[1])
        elif line.startswith(name + "_count"):
            count += float(line.rsplit(" ", 1)[1])
    return total, count


def bucket_p99_ms(text: str, name: str) -> float | None:
    """The upper bound of the bucket holding the 99th percentile of the histogram ``name``
    (all label sets summed; cumulative ``le`` buckets), ms; None when empty."""
    buckets: dict[float, float] = {}
    for line in text.splitlines():
        if line.startswith(name + "_bucket{"):
            le = line.split('le="', 1)[1].split('"', 1)[0]
            bound = float("inf") if le == "+Inf" else float(le)
            buckets[bound] = buckets.get(bound, 0.0) + float(line.rsplit(" ", 1)[1])
    total = buckets.get(float("inf"), 0.0)
    if not total:
        return None
    return next(1000 * b for b, n in sorted(buckets.items()) if n >= 0.99 * total)


def mean_ms(before: tuple[float, float], after: tuple[float, float]) -> float | None:
    n = after[1] - before[1]
    return round(1000 * (after[0] - before[0]) / n, 1) if n else None


# -- the workload ---------------------------------------------------------------------------


def base_data(client_no: int) -> dict[str, str]:
    return {f"key-{k}": f"value-{client_no}-{k}-" + "x" * 40 for k in range(16)}


def drive(
    api: Api, ns: str, clients: int, seconds: float, seed: int, rate: float | None = None
) -> dict[str, Any]:
    """``clients`` writers for ``seconds``; each write: (op, name, rv, seq, acked, latency).
    ``rate``: writes/s in all, each writer paced at its share (a writer behind its schedule
    writes at once until it caught up); None: each writes as fast as it can (closed loop)."""
    writes: list[list[tuple[str, str, int, int, float, float]]] = [[] for _ in range(clients)]
    errors = [0] * clients
    start = time.monotonic()
    stop = start + seconds
    path = f"/api/v1/namespaces/{ns}/configmaps"

    def run(c: int) -> None:
        rng = random.Random(seed * 1000 + c)
        conn = api.connect()
        own: list[str] = []
        data = base_data(c)
        n = 0
        interval = clients / rate if rate else 0.0
        due = start + interval * c / clients  # the writers' schedules interleave
        while time.monotonic() < stop:
            if interval:
                time.sleep(max(0.0, due - time.monotonic()))
                due += interval
                if time.monotonic() >= stop:
                    break
            n += 1
            seq = f"{n:08d}"
            if not own or n % 5 == 0:
                op, name = "create", f"w{c}-{len(own)}"
                method, url, ctype = "POST", path, "application/json"
                body: dict[str, Any] = {
                    "metadata": {"name": name, "labels": {"app": "e2e"}},
                    "data": {**data, "seq": seq},
                }
            else:
                op, name = "update", rng.choice(own)
                method, url, ctype = "PATCH", f"{path}/{name}", "application/merge-patch+json"
                body = {"data": {"seq": seq, f"key-{n % 16}": f"changed-{n}-" + "y" * 40}}
            t0 = time.monotonic()
            try:
                status, obj = api.call(conn, method, url, body, ctype)
            except (OSError, http.client.HTTPException, ValueError):
                conn.close()
                conn = api.connect()
                errors[c] += 1
                continue
            t1 = time.monotonic()
            if status not in (200, 201):
                errors[c] += 1
                continue
            if op == "create":
                own.append(name)
            writes[c].append((op, name, int(obj["metadata"]["resourceVersion"]), n, t1, t1 - t0))
        conn.close()

    threads = [threading.Thread(target=run, args=(c,)) for c in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.monotonic() - start
    flat = [w for ws in writes for w in ws]
    lat = sorted(w[5] for w in flat)
    return {
        "writes": flat,
        "errors": sum(errors),
        "seconds": elapsed,
        "writes_per_second": len(flat) / elapsed,
        "p50_ms": 1000 * pct(lat, 0.5),
        "p99_ms": 1000 * pct(lat, 0.99),
        "max_ms": 1000 * (lat[-1] if lat else float("nan")),
        "creates": sum(1 for w in flat if w[0] == "create"),
        "_lat": lat,
    }


def pct(xs: list[float], q: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, int(len(s) * q))] if s else float("nan")


def by_second(acked: list[float], xs: list[float], start: float) -> list[list[float]]:
    """[second of the window, writes, p50 ms, max ms] of the writes acknowledged in each second
    (a stall shows as a run of seconds with a high max; a steady queue as a high p50 in all)."""
    seconds: dict[int, list[float]] = {}
    for at, x in zip(acked, xs, strict=True):
        seconds.setdefault(int(at - start), []).append(x)
    return [
        [s, len(v), round(1000 * pct(v, 0.5)), round(1000 * max(v))]
        for s, v in sorted(seconds.items())
    ]


# -- the KCP's records, as they are persisted ---------------------------------------------


class KcpWatch:
    """Watches the listener's RuntimeConfigMaps; stamps every version on arrival."""

    def __init__(self, api: Api, namespace: str) -> None:
        self.api, self.namespace = api, namespace
        self.lock = threading.Lock()
        self.seen: dict[tuple[str, str], list[tuple[int | None, int, float]]] = {}
        self.events = 0
        self._stop = False
        conn = api.connect()
        _, lst = api.call(conn, "GET", self._path() + "?limit=1")
        conn.close()
        self.rv = lst["metadata"]["resourceVersion"]
        self._thread = threading.Thread(target=self._run, name="kcp-watch", daemon=True)
        self._thread.start()

    def _path(self) -> str:
        return f"/apis/tether.kyma-project.io/v1/namespaces/{self.namespace}/runtimeconfigmaps"

    def _run(self) -> None:
        while not self._stop:
            conn = self.api.connect(timeout=3600)
            try:
                conn.request(
                    "GET",
                    f"{self._path()}?watch=1&allowWatchBookmarks=true"
                    f"&resourceVersion={self.rv}&timeoutSeconds=3000",
                )
                resp = conn.getresponse()
                for line in resp:
                    at = time.monotonic()
                    ev = json.loads(line)
                    obj = ev.get("object") or {}
                    self.rv = (obj.get("metadata") or {}).get("resourceVersion", self.rv)
                    if ev.get("type") not in ("ADDED", "MODIFIED"):
                        continue
                    spec = obj.get("spec") or {}
                    rv = spec.get("resourceVersion", "")
                    seq = (spec.get("data") or {}).get("seq", "0")
                    with self.lock:
                        self.events += 1
                        self.seen.setdefault((spec["namespace"], spec["name"]), []).append(
                            (
                                int(rv) if rv.isdigit() else None,
                                int(seq) if seq.isdigit() else 0,
                                at,
                            )
                        )
            except (OSError, http.client.HTTPException, ValueError):
                time.sleep(0.2)
            finally:
                conn.close()

    def latencies(
        self,
        ns: str,
        writes: list[tuple[str, str, int, int, float, float]],
        by: str,
        timeout: float,
    ) -> tuple[list[float], list[dict[str, Any]]]:
        """Per write, seconds from its acknowledgement to the first persisted record at
        least as new (``by``: "rv" or "seq"); waits up to ``timeout`` for the last ones."""
        deadline = time.monotonic() + timeout
        while True:
            with self.lock:
                seen = {k: list(v) for k, v in self.seen.items() if k[0] == ns}
            out: list[float] = []
            self.acked: list[float] = []  # the acknowledgement of each of ``out``'s writes
            missing: list[dict[str, Any]] = []
            for op, name, rv, seq, acked, _ in writes:
                got = [
                    at
                    for r, s, at in seen.get((ns, name), [])
                    if (r is not None and r >= rv if by == "rv" else s >= seq)
                ]
                if got:
                    out.append(min(got) - acked)
                    self.acked.append(acked)
                else:
                    missing.append(
                        {
                            "op": op,
                            "name": name,
                            "resourceVersion": rv,
                            "seq": seq,
                            "stored": [
                                r if by == "rv" else s for r, s, _ in seen.get((ns, name), [])
                            ][-3:],
                        }
                    )
            if not missing or time.monotonic() > deadline:
                return out, missing
            time.sleep(0.25)


# -- CPU per process -----------------------------------------------------------------------


def proc_table() -> dict[int, tuple[int, float]]:
    """pid -> (ppid, user+system CPU seconds) of every process."""
    tick = os.sysconf("SC_CLK_TCK")
    out = {}
    for entry in pathlib.Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        out[int(entry.name)] = (int(fields[1]), (int(fields[11]) + int(fields[12])) / tick)
    return out


def tree_cpu(table: dict[int, tuple[int, float]], root: int) -> float:
    children: dict[int, list[int]] = {}
    for pid, (ppid, _) in table.items():
        children.setdefault(ppid, []).append(pid)
    total, todo = 0.0, [root]
    while todo:
        pid = todo.pop()
        if pid in table:
            total += table[pid][1]
        todo.extend(children.get(pid, []))
    return total


def machine_busy() -> float:
    """CPU seconds the whole machine spent busy since boot (all cores)."""
    fields = [int(x) for x in pathlib.Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = fields[3] + fields[4]
    return (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK")


def cpu_snapshot(roots: dict[str, int]) -> dict[str, float]:
    table = proc_table()
    snap = {
        name: tree_cpu(table, pid) if name != "generator" else table.get(pid, (0, 0.0))[1]
        for name, pid in roots.items()
    }
    snap["machine"] = machine_busy()
    return snap


# -- one window ----------------------------------------------------------------------------


class Bench:
    def __init__(self, args: argparse.Namespace, work: pathlib.Path) -> None:
        self.args, self.work = args, work
        self.skr = controlplane.ControlPlane("e2e-skr").start()
        self.kcp = controlplane.ControlPlane("e2e-kcp").start()
        self.skr_api, self.kcp_api = self.skr.api_client(), self.kcp.api_client()
        controlplane.install_crds(self.kcp_api, controlplane.KYMA_CRD, *lt.CRD_FILES)
        (work / "kcp").mkdir()
        self.env = lt.make_env(self.kcp, self.kcp_api, work / "kcp", KCP_NAMESPACE)
        self.runtime = lt.add_runtime(self.env, RUNTIME_ID, "c-e2e.kyma.example.com")
        self.listener = lt.ListenerProcess(
            self.env,
            "e2e",
            TETHER_LISTENER_WORKERS="2",
            TETHER_LISTENER_THREADS="16",
            TETHER_LISTENER_MAX_IN_FLIGHT_PER_RUNTIME="16",
            PROMETHEUS_MULTIPROC_DIR=str(work / "kcp"),
            TETHER_LISTENER_LOG_LEVEL="WARNING",
            **dict(kv.split("=", 1) for kv in args.listener_env),
        )
        self.writer = Api(self.skr, work, "bench-writer")
        self.watch = KcpWatch(Api(self.kcp, work, "bench-watcher"), KCP_NAMESPACE)
        self.core = client.CoreV1Api(self.skr_api)
        self.windows: list[dict[str, Any]] = []
        # after the planes started (they stay unpinned): the listener and each webhook on
        # the part's core, this process (the writers, the KCP watch) on the generator's
        self.placement = cpuset.placement(args.placement, "e2e")
        self.placement.to_generator(os.getpid())
        self.placement.to_part(self.listener.proc.pid)
        print(self.placement.text(), flush=True)

    def close(self) -> None:
        self.watch._stop = True
        self.placement.close()
        self.listener.stop()
        self.kcp.stop()
        self.skr.stop()

    def roots(self) -> dict[str, int]:
        out = {"generator": os.getpid(), "listener": self.listener.proc.pid}
        for name, plane in (("skr", self.skr), ("kcp", self.kcp)):
            assert plane._apiserver is not None and plane._etcd is not None
            out[f"{name}-apiserver"] = plane._apiserver.popen.pid
            out[f"{name}-etcd"] = plane._etcd.popen.pid
        return out

    def target(self, cond: str, d: pathlib.Path) -> tuple[str, pathlib.Path, Any]:
        """(listener URL, its CA file, an object to stop afterwards) for a condition."""
        if cond == "healthy":
            return self.listener.url, self.env.server_ca_file, None
        if cond == "refused":
            return f"https://127.0.0.1:{blackhole.refused_port()}", self.env.server_ca_file, None
        if cond == "blackhole":
            bh = blackhole.BlackHole().start()
            return bh.url, self.env.server_ca_file, bh
        rec = receiver.Receiver(d, self.env.runtime_ca)
        rec.mode, rec.delay = "slow", SLOW_SECONDS
        rec.start()
        return rec.url, rec.ca_file, rec

    def wait_called(self, ns: str, called: Any) -> None:
        """The apiserver picks a new configuration up asynchronously: write probes until the
        webhook has been called."""
        deadline = time.monotonic() + 60
        n = 0
        while not called():
            if time.monotonic() > deadline:
                raise AssertionError(f"webhook for {ns} never called")
            n += 1
            self.core.create_namespaced_config_map(
                ns,
                client.V1ConfigMap(
                    metadata=client.V1ObjectMeta(name=f"probe-{n}"), data={"p": "1"}
                ),
            )
            time.sleep(0.3)

    def waits(self, listener0: str, proc: stack.WebhookProcess | None) -> dict[str, Any]:
        """Where a record spent its time (means over the window and its tail, ms): the
        webhook's queue and read-back (admission to the POST's start), its POSTs, and the
        listener's POSTs of changes and per-record persist."""
        listener1 = self.listener.metrics()
        out: dict[str, Any] = {
            f"listener_{h}": mean_ms(
                histogram(listener0, f"tether_listener_{h}"),
                histogram(listener1, f"tether_listener_{h}"),
            )
            for h in ("request_seconds", "persist_seconds")
        }
        if proc is not None:
            _, text = proc.get("/metrics")
            for h in ("dispatch_seconds", "forward_seconds", "delivery_seconds"):
                out[f"webhook_{h}"] = mean_ms(
                    (0.0, 0.0), histogram(text.decode(), f"tether_webhook_{h}")
                )
            for h in ("dispatch_seconds", "forward_seconds", "delivery_seconds"):
                out[f"webhook_{h}_p99_bucket"] = bucket_p99_ms(text.decode(), f"tether_webhook_{h}")
            out["webhook_posts"] = histogram(text.decode(), "tether_webhook_forward_seconds")[1]
        return out

    def run(self, idx: int, kind: str, cond: str) -> dict[str, Any]:
        """One window; ``kind`` "tether+NAME" is Tether's webhook with the variant NAME's
        settings (``--variant``) on top of ``--webhook-env``."""
        base, _, variant = kind.partition("+")
        ns = f"e2e-{idx:02d}-{kind.replace('+', '-')}" + (f"-{cond}" if cond != "-" else "")
        self.core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=ns)))
        d = self.work / ns
        d.mkdir()
        roots = self.roots()
        extra: dict[str, Any] = {}
        stoppable: Any = None
        proc: stack.WebhookProcess | None = None
        sync: subprocess.Popen[str] | None = None
        vwc_name = ""
        try:
            if base != "none":
                url, ca, stoppable = self.target(cond if base not in NOOPS else "healthy", d)
                rt = self.runtime
                if base in ("tether", *NOOPS):
                    proc = stack.WebhookProcess(
                        d,
                        {
                            "TETHER_RUNTIME_ID": RUNTIME_ID,
                            "TETHER_LISTENER_URL": url,
                            "TETHER_LISTENER_CA_FILE": str(ca),
                            "TETHER_CLIENT_CERT_FILE": str(rt.cert_file),
                            "TETHER_CLIENT_KEY_FILE": str(rt.key_file),
                            "TETHER_KUBECONFIG": str(self.skr.kubeconfig),
                            "TETHER_WEBHOOK_WORKERS": "2",
                            "TETHER_WEBHOOK_THREADS": "8",
                            "TETHER_LOG_LEVEL": "WARNING",
                            "PYTHONPATH": str(skeleton.REPO),
                            **dict(kv.split("=", 1) for kv in self.args.webhook_env),
                            **self.args.variants.get(variant, {}),
                        },
                    )
                    if base == "noop":
                        proc.command = [
                            sys.executable,
                            str(skeleton.REPO / "bench" / "webhook_noop_server.py"),
                        ]
                    elif base == "gonoop":
                        proc.command = [str(gonoop.binary())]
                    proc.start()
                    assert proc.proc is not None
                    roots["webhook"] = proc.proc.pid
                    self.placement.to_part(proc.proc.pid)
                    body = stack.vwc_body(f"e2e-{ns}", proc.url + "/validate", proc.ca.cert_pem, ns)
                    calls0 = admission_seconds(self.writer, HOOKS["tether"])[1]
                    called: Any = lambda: (  # noqa: E731
                        admission_seconds(self.writer, HOOKS["tether"])[1] > calls0
                    )
                else:
                    sync = subprocess.Popen(
                        [
                            sys.executable,
                            "-m",
                            "testing.syncforwarder",
                            str(d),
                            url,
                            str(ca),
                            str(rt.cert_file),
                            str(rt.key_file),
                            RUNTIME_ID,
                        ],
                        cwd=skeleton.REPO,
                        stdin=subprocess.PIPE,
                        stdout=subprocess.PIPE,
                        text=True,
                        preexec_fn=controlplane.die_with_parent(),
                    )
                    assert sync.stdout is not None
                    port_s, ca_s = sync.stdout.readline().split()
                    roots["webhook"] = sync.pid
                    self.placement.to_part(sync.pid)
                    sync_ctx = ssl.create_default_context(cafile=ca_s)
                    body = stack.vwc_body(
                        f"e2e-{ns}",
                        f"https://127.0.0.1:{port_s}/validate",
                        pathlib.Path(ca_s).read_bytes(),
                        ns,
                    )
                    for hook in body["webhooks"]:
                        hook["name"] = HOOKS["sync"]
                        hook["timeoutSeconds"] = 15
                        hook.pop("matchConditions", None)

                    def sync_stats(
                        port: str = port_s, ctx: ssl.SSLContext = sync_ctx
                    ) -> dict[str, Any]:
                        conn = http.client.HTTPSConnection(
                            "127.0.0.1", int(port), context=ctx, timeout=10
                        )
                        conn.request("GET", "/stats")
                        out: dict[str, Any] = json.loads(conn.getresponse().read())
                        conn.close()
                        return out

                    called = lambda: sync_stats()["calls"] > 0  # noqa: E731
                stack.register(self.skr_api, body)
                vwc_name = body["metadata"]["name"]
                self.wait_called(ns, called)
                time.sleep(0.5)
            load = os.getloadavg()[0]
            hook = HOOKS.get("tether" if base in NOOPS else kind, "-")
            adm0 = admission_seconds(self.writer, hook)
            gets0 = configmap_gets(self.writer)
            cpu0 = cpu_snapshot(roots)
            listener0 = self.listener.metrics()
            res = drive(self.writer, ns, self.args.clients, self.args.seconds, idx, self.args.rate)
            ended = time.monotonic()
            cpu1 = cpu_snapshot(roots)
            adm1 = admission_seconds(self.writer, hook)
            calls = adm1[1] - adm0[1]
            res["admission_calls"] = calls
            res["admission_mean_ms"] = 1000 * (adm1[0] - adm0[0]) / calls if calls else None
            writes = res.pop("writes")
            res["cpu_seconds"] = {k: round(cpu1[k] - cpu0[k], 2) for k in cpu0}
            res["cpu_ms_per_write"] = {
                k: round(1000 * v / max(len(writes), 1), 2) for k, v in res["cpu_seconds"].items()
            }
            res["load_average_1m"] = load
            if cond == "healthy" and base != "none":
                xs, lost = self.watch.latencies(ns, writes, "rv" if base == "tether" else "seq", 60)
                missing = len(lost)
                res["missing_writes"] = lost[:10]
                with self.watch.lock:
                    ats = [at for k, v in self.watch.seen.items() if k[0] == ns for _, _, at in v]
                res["_prop"] = xs
                res["propagation_by_second"] = by_second(
                    self.watch.acked, xs, ended - res["seconds"]
                )
                res["propagation"] = {
                    "writes": len(writes),
                    "missing": missing,
                    "last_record_after_window_s": max(ats, default=ended) - ended,
                    "p50_ms": 1000 * pct(xs, 0.5),
                    "p90_ms": 1000 * pct(xs, 0.9),
                    "p99_ms": 1000 * pct(xs, 0.99),
                    "max_ms": 1000 * max(xs, default=float("nan")),
                    "records": sum(len(v) for k, v in self.watch.seen.items() if k[0] == ns),
                }
            if cond == "healthy" and base != "none":
                extra["waits_ms"] = self.waits(listener0, proc)
                extra["readback_gets_per_write"] = round(
                    (configmap_gets(self.writer) - gets0) / max(len(writes), 1), 2
                )
            if proc is not None and base == "tether":
                extra["forwards"] = {
                    r: proc.metric("tether_webhook_forwards_total", result=r)
                    for r in ("ok", "retryable", "permanent", "abandoned")
                }
                extra["forwarded_records"] = proc.metric("tether_webhook_forwarded_records_total")
                extra["overflowed"] = proc.metric("tether_webhook_queue_overflowed_total")
                extra["admissions"] = proc.metric("tether_webhook_admission_requests_total")
                h = proc.metric(f"{REVIEW_SECONDS}_count", route="/validate")
                extra["handler_mean_ms"] = (
                    1000 * proc.metric(f"{REVIEW_SECONDS}_sum", route="/validate") / h
                    if h
                    else None
                )
                n = proc.metric("tether_webhook_delivery_seconds_count")
                extra["delivery_mean_ms"] = (
                    1000 * proc.metric("tether_webhook_delivery_seconds_sum") / n if n else None
                )
            if sync is not None:
                extra["sync"] = sync_stats()
        finally:
            if vwc_name:
                stack.unregister(self.skr_api, vwc_name)
            if proc is not None:
                proc.stop()
            if sync is not None:
                assert sync.stdin is not None
                sync.kill()
                sync.wait(10)
            if stoppable is not None:
                stoppable.stop()
        res.update(
            kind=kind,
            condition=cond if base not in ("none", *NOOPS) else "-",
            namespace=ns,
            **extra,
        )
        line = (
            f"{idx:2d} {kind:6s} {res['condition']:9s} {res['writes_per_second']:7.1f} writes/s  "
            f"p50 {res['p50_ms']:7.1f} ms  p99 {res['p99_ms']:8.1f} ms  errors {res['errors']}  "
            f"load {load:.1f}"
        )
        if res.get("admission_mean_ms") is not None:
            line += f"  admission call mean {res['admission_mean_ms']:.1f} ms"
        if "propagation" in res:
            p = res["propagation"]
            line += (
                f"  propagation p50 {p['p50_ms']:.1f} p99 {p['p99_ms']:.1f} ms "
                f"(missing {p['missing']})"
            )
        if "propagation_by_second" in res:
            line += "\n     by second [s, writes, p50, max ms]: " + " ".join(
                f"{s}:{n}/{p50}/{mx}" for s, n, p50, mx in res["propagation_by_second"]
            )
        if "readback_gets_per_write" in res:
            line += f"\n     ConfigMap GETs per write (read-back): {res['readback_gets_per_write']}"
        if "waits_ms" in res:
            line += "\n     mean ms: " + "  ".join(f"{k} {v}" for k, v in res["waits_ms"].items())
        print(line, flush=True)
        return res


def plan(conditions: list[str], kinds: list[str], rounds: int) -> list[tuple[str, str]]:
    """none, (tether, sync), none, (sync, tether), none, ... ending with none; the second
    round runs the conditions in reverse order."""
    out: list[tuple[str, str]] = [("none", "-")]
    i = 0
    noops, kinds = [k for k in kinds if k in NOOPS], [k for k in kinds if k not in NOOPS]
    for r in range(rounds):
        for k in noops if r % 2 == 0 else list(reversed(noops)):
            out.extend([(k, "-"), ("none", "-")])
        for cond in conditions if r % 2 == 0 else list(reversed(conditions)):
            order = kinds if i % 2 == 0 else list(reversed(kinds))
            i += 1
            out.extend((k, cond) for k in order)
            out.append(("none", "-"))
    return out


LISTENER = {"-": "—", "blackhole": "black-holed"}
PROPAGATION = {
    "tether": "tether (write acknowledged → record persisted in the KCP)",
    "sync": "sync (record persisted before the write is acknowledged)",
}


def configuration_table(doc: dict[str, Any]) -> str:
    """docs/performance.md's first table: throughput, latency and the ratio per configuration."""
    lines = [
        "| configuration | listener | writes/s | p50 ms | p99 ms | ratio vs none | "
        "admission call (apiserver's mean) |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    for x in doc["summary"]:
        listener = LISTENER.get(x["condition"], x["condition"])
        if x["condition"] == "slow":
            listener = f"slow ({doc['slow_seconds']:g} s)"
        rate, spread = f"{x['writes_per_second']:,.1f}", x["window_writes_per_second"]
        if len(spread) > 1:
            rate += f" ({min(spread):.0f}–{max(spread):.0f})"
        ratio = f"{x['ratio']:.2f}" if x["ratio"] >= 0.1 else f"{x['ratio']:.3f}"
        ratio = f"**{ratio}**" if x["kind"] == "tether" else ratio
        adm = x.get("admission_mean_ms")
        lines.append(
            f"| {x['kind']} | {listener} | {rate} | {x['p50_ms']:,.1f} | "
            f"{x['p99_ms']:,.1f} | {ratio} | "
            f"{'—' if adm is None else f'{adm:,.0f} ms'} |"
        )
    return "\n".join(lines)


def propagation_table(doc: dict[str, Any]) -> str:
    """docs/performance.md's second table: write acknowledged to record persisted."""

    def ms(v: float) -> str:
        return f"{v:,.0f}".replace("-", "−")

    lines = [
        "| propagation, listener healthy | writes | versions persisted | p50 ms | p99 ms "
        "| max ms | missing |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for x in doc["summary"]:
        if "propagation" in x:
            p = x["propagation"]
            lines.append(
                f"| {PROPAGATION.get(x['kind'], x['kind'])} | {p['writes']:,} | {p['records']:,} | "
                f"{ms(p['p50_ms'])} | {ms(p['p99_ms'])} | {ms(p['max_ms'])} | {p['missing']} |"
            )
    return "\n".join(lines)


def noop_table(doc: dict[str, Any]) -> str:
    """Tether healthy against each no-op of the same run: its writes/s and its admission
    call (the apiserver's mean, while it forwards) as ratios of the no-op's (goals: ≥ 0.9
    and ≤ 1.2 against the Python no-op)."""
    by = {(x["kind"], x["condition"]): x for x in doc["summary"]}
    tether = by.get(("tether", "healthy"))
    lines = [
        "| against the no-op | no-op writes/s | Tether ÷ no-op writes/s | no-op admission call "
        "| Tether ÷ no-op admission call |",
        "|---|---:|---:|---:|---:|",
    ]
    for noop in NOOPS:
        x = by.get((noop, "-"))
        if x is None or tether is None:
            continue
        adm, tadm = x.get("admission_mean_ms"), tether.get("admission_mean_ms")
        lines.append(
            f"| {noop} | {x['writes_per_second']:,.1f} | "
            f"{tether['writes_per_second'] / x['writes_per_second']:.2f} | "
            f"{'—' if adm is None else f'{adm:,.1f} ms'} | "
            f"{'—' if adm is None or tadm is None else f'{tadm / adm:.2f}'} |"
        )
    return "\n".join(lines) if len(lines) > 2 else ""


def report(doc: dict[str, Any]) -> None:
    skeleton.report(
        doc, configuration_table(doc), propagation_table(doc), *filter(None, [noop_table(doc)])
    )


def main() -> int:
    ap = skeleton.options("e2e", __doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=20.0, help="per window")
    ap.add_argument("--rounds", type=int, default=1, help="windows per configuration and condition")
    ap.add_argument("--clients", type=int, default=8, help="concurrent writers")
    ap.add_argument(
        "--rate",
        type=float,
        default=None,
        help="writes/s in all, paced (default: closed loop, each writer as fast as it can)",
    )
    ap.add_argument(
        "--webhook-env",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a setting of Tether's webhook for this run (repeatable)",
    )
    ap.add_argument("--conditions", default=",".join(CONDITIONS))
    ap.add_argument("--kinds", default=",".join(KINDS))
    ap.add_argument("--keep", action="store_true", help="keep the work folder (logs)")
    ap.add_argument(
        "--placement",
        choices=cpuset.KINDS,
        default="split",
        help="split: listener and webhook on the last core, the writers on the "
        "others (cgroup cpusets); none: unpinned. The planes stay unpinned",
    )
    ap.add_argument(
        "--listener-env",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a setting of the listener for this run (repeatable; one listener serves all windows)",
    )
    ap.add_argument(
        "--variant",
        action="append",
        default=[],
        metavar="NAME:NAME=VALUE[,NAME=VALUE]",
        help="webhook settings of the kind tether+NAME (list it in --kinds), e.g. "
        "--variant lanes1:TETHER_WEBHOOK_FORWARDER_READ_LANES=1 --kinds tether,tether+lanes1: "
        "settings compared in alternating windows of one run",
    )
    args = skeleton.parse(ap, report)
    args.variants = {
        name: dict(kv.split("=", 1) for kv in env.split(","))
        for name, env in (v.split(":", 1) for v in args.variant)
    }
    began = provenance.start()
    conditions, kinds = args.conditions.split(","), args.kinds.split(",")
    started = time.monotonic()
    load_before = os.getloadavg()
    work = pathlib.Path(tempfile.mkdtemp(prefix="tether-bench-e2e-"))
    bench = Bench(args, work)
    windows: list[dict[str, Any]] = []
    placement = bench.placement.describe()
    try:
        for idx, (kind, cond) in enumerate(plan(conditions, kinds, args.rounds)):
            windows.append(bench.run(idx, kind, cond))
    finally:
        bench.close()
        if args.keep:
            print(f"work folder kept: {work}")
        else:
            subprocess.run(["rm", "-rf", str(work)], check=False)
    base_idx = [i for i, w in enumerate(windows) if w["kind"] == "none"]
    for i, w in enumerate(windows):
        before = max((b for b in base_idx if b < i), default=None)
        after = min((b for b in base_idx if b > i), default=None)
        around = [windows[b]["writes_per_second"] for b in (before, after) if b is not None]
        w["baseline_writes_per_second"] = statistics.mean(around) if w["kind"] != "none" else None
        w["ratio"] = (
            w["writes_per_second"] / w["baseline_writes_per_second"]
            if w["kind"] != "none"
            else None
        )
    baselines = [windows[b] for b in base_idx]

    def pooled(ws: list[dict[str, Any]], kind: str, cond: str) -> dict[str, Any]:
        lat = sorted(x for w in ws for x in w["_lat"])
        n = sum(w["writes_per_second"] * w["seconds"] for w in ws)
        out = {
            "kind": kind,
            "condition": cond,
            "windows": len(ws),
            "writes_per_second": n / sum(w["seconds"] for w in ws),
            "p50_ms": 1000 * pct(lat, 0.5),
            "p99_ms": 1000 * pct(lat, 0.99),
            "errors": sum(w["errors"] for w in ws),
            "window_writes_per_second": [round(w["writes_per_second"], 1) for w in ws],
        }
        if kind != "none":
            out["ratio"] = statistics.mean(w["ratio"] for w in ws)
            out["window_ratios"] = [round(w["ratio"], 3) for w in ws]
            adm = [w["admission_mean_ms"] for w in ws if w.get("admission_mean_ms") is not None]
            out["admission_mean_ms"] = statistics.mean(adm) if adm else None
        else:
            out["ratio"] = 1.0
        props = [w for w in ws if "propagation" in w]
        if props:
            xs = sorted(x for w in props for x in w["_prop"])
            out["propagation"] = {
                "writes": sum(w["propagation"]["writes"] for w in props),
                "records": sum(w["propagation"]["records"] for w in props),
                "missing": sum(w["propagation"]["missing"] for w in props),
                "p50_ms": 1000 * pct(xs, 0.5),
                "p90_ms": 1000 * pct(xs, 0.9),
                "p99_ms": 1000 * pct(xs, 0.99),
                "max_ms": 1000 * max(xs, default=float("nan")),
            }
        return out

    summary: list[dict[str, Any]] = [pooled(baselines, "none", "-")]
    for noop in (k for k in NOOPS if k in kinds):
        summary.append(pooled([x for x in windows if x["kind"] == noop], noop, "-"))
    for kind in (k for k in kinds if k not in NOOPS):
        for cond in conditions:
            summary.append(
                pooled(
                    [x for x in windows if x["kind"] == kind and x["condition"] == cond], kind, cond
                )
            )
    for w in windows:
        w.pop("_lat", None)
        w.pop("_prop", None)

    print()
    print(
        f"{'configuration':14s} {'listener':10s} {'writes/s':>9s} {'p50 ms':>8s} {'p99 ms':>9s} "
        f"{'ratio':>6s} {'admission call ms':>18s}"
    )
    for s in summary:
        adm = s.get("admission_mean_ms")
        print(
            f"{s['kind']:14s} {s['condition']:10s} {s['writes_per_second']:9.1f} "
            f"{s['p50_ms']:8.1f} "
            f"{s['p99_ms']:9.1f} {s['ratio']:6.2f} {adm if adm is None else round(adm, 1)!s:>18s}"
        )
    rates = ", ".join(f"{w['writes_per_second']:.1f}" for w in baselines)
    print(f"  (no-webhook windows: {rates} writes/s)")
    print()
    print(
        f"{'propagation':14s} {'writes':>7s} {'records':>8s} {'p50 ms':>8s} {'p99 ms':>8s} "
        f"{'max ms':>8s} {'missing':>8s}"
    )
    for s in summary:
        if "propagation" in s:
            p = s["propagation"]
            print(
                f"{s['kind']:14s} {p['writes']:7d} {p['records']:8d} {p['p50_ms']:8.1f} "
                f"{p['p99_ms']:8.1f} {p['max_ms']:8.1f} {p['missing']:8d}"
            )
    print()
    parts = [
        "skr-apiserver",
        "skr-etcd",
        "webhook",
        "listener",
        "kcp-apiserver",
        "kcp-etcd",
        "generator",
    ]
    print(f"{'CPU ms per write':24s} " + " ".join(f"{p:>13s}" for p in parts) + f" {'machine':>8s}")
    for w in windows:
        c = w["cpu_ms_per_write"]
        print(
            f"{w['kind'] + ' ' + w['condition']:24s} "
            + " ".join(f"{c.get(p, 0.0):13.2f}" for p in parts)
            + f" {c['machine']:8.2f}"
        )
    # paced writers (--rate) write as many with a webhook as without: no throughput ratio
    goal = None if args.rate else all(s["ratio"] >= 0.9 for s in summary if s["kind"] == "tether")
    if goal is not None:
        print(
            "\ngoal (tether >= 0.9 of no-webhook writes/s in every condition): "
            f"{'met' if goal else 'missed'}"
        )
    prop = next(
        (s["propagation"] for s in summary if s["kind"] == "tether" and "propagation" in s), None
    )
    prop_goal = (
        None if prop is None or not args.rate else prop["p99_ms"] <= 1000 and not prop["missing"]
    )
    if prop_goal is not None:
        print(
            f"goal (propagation p99 <= 1 s at {args.rate:g} writes/s, nothing missing): "
            f"{'met' if prop_goal else 'missed'}"
        )
    print(f"placement: {placement}")
    doc = {
        "machine": skeleton.machine(
            kube_apiserver=controlplane.kube_apiserver_version(),
            load_average_before=load_before,
            load_average_after=os.getloadavg(),
        ),
        "settings": {k: v for k, v in vars(args).items() if k not in ("out", "report")},
        "slow_seconds": SLOW_SECONDS,
        "placement": placement,
        "summary": summary,
        "windows": windows,
        "goal": 0.9,
        "goal_met": goal,
        "propagation_goal_met": prop_goal,
        "seconds_total": round(time.monotonic() - started, 1),
    }
    doc = skeleton.write(args.out, "e2e", began, doc)
    print()
    report(doc)
    return 0


if __name__ == "__main__":
    sys.exit(main())
