"""Benchmark: admission handling of the webhook vs a no-op endpoint (plain WSGI), same gunicorn
settings (gthread workers, TLS, keep-alive), same run.

Starts one real SKR control plane (the forwarder reads objects back), the recording mTLS
receiver as the listener (its own process), the real webhook (`tether webhook`), the
no-op baseline (bench/webhook_noop_server.py: parses the review, answers its uid) with
identical settings and the Go no-op (testing/gonoop: the floor), and drives them in
rotating windows (medians over the windows are reported), each
with CONNECTIONS keep-alive HTTPS connections POSTing realistic ConfigMap UPDATE reviews
(about 1 KiB of data, object and oldObject) over KEYS ConfigMaps. Prints a table and writes
bench/results/webhook_admission_keys<KEYS>.json.

    .venv/bin/python bench/webhook_admission.py [--keys 50] [--seconds 3] [--rounds 10]
    .venv/bin/python bench/webhook_admission.py --report [--keys 50 | --out FILE]   # docs tables

The JSON (``--out``) records the commit, load average and command (bench/provenance.py).

Besides throughput and latency it reports requests per CPU-second of each server's
processes (master and workers; the webhook's include its forwarder threads), which the
load of other processes on a shared machine disturbs far less than wall-clock throughput.
"""

from __future__ import annotations

import http.client
import json
import os
import pathlib
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

from testing import controlplane, gonoop
from testing import webhookstack as stack
from tether.base import certs

NAMESPACE = "bench"
TARGETS = ("webhook", "baseline", "go")  # the webhook, the Python no-op, the Go no-op


def review(name: str, i: int) -> bytes:
    data = {f"key-{k}": f"value-{i}-{k}-" + "x" * 40 for k in range(16)}
    meta = {
        "name": name,
        "namespace": NAMESPACE,
        "uid": f"uid-{name}",
        "resourceVersion": "",
        "labels": {"app": "bench"},
        "annotations": {"owner": "team-a"},
    }
    old = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {**meta, "resourceVersion": "1"},
        "data": {**data, "key-0": "old"},
    }
    new = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": data}
    return json.dumps(
        {
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "request": {
                "uid": f"req-{i}",
                "operation": "UPDATE",
                "kind": {"group": "", "version": "v1", "kind": "ConfigMap"},
                "resource": {"group": "", "version": "v1", "resource": "configmaps"},
                "namespace": NAMESPACE,
                "name": name,
                "dryRun": False,
                "object": new,
                "oldObject": old,
                "userInfo": {"username": "bench"},
            },
        }
    ).encode()


def cpu_seconds(root: int) -> float:
    """User+system CPU of a process and its children (gunicorn master and workers)."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0.0
    for entry in pathlib.Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        pid, ppid = int(entry.name), int(fields[1])
        if pid == root or ppid == root:
            total += (int(fields[11]) + int(fields[12])) / tick
    return total


def wsgi_costs(bodies: list[bytes], metrics_dir: pathlib.Path) -> dict[str, float]:
    """Microseconds per request of each app called in-process through WSGI (no TLS, no
    gunicorn: only what differs between the two), best of 7 repeats: robust to load."""
    import io
    import timeit

    metrics_dir.mkdir(exist_ok=True)
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = str(metrics_dir)  # as in gunicorn; before the import
    from werkzeug.test import EnvironBuilder

    from tether.runtime import sender
    from tether.wire import filters
    from webhook import app as app_mod
    from webhook import keyqueue, metrics
    from webhook import services as services_mod
    from webhook import settings as settings_mod

    sys.path.insert(0, str(skeleton.REPO / "bench"))
    import webhook_noop_server

    s = settings_mod.Settings(
        runtime_id="rt",
        listener=sender.ClientSettings("https://l", "rt", "ca", "c", "k"),
        server=settings_mod.ServerSettings(),
        forwarder=settings_mod.ForwarderSettings(),
        filter=filters.ConfigMapFilter(),
        queue_size=1_000_000,
    )
    fw = s.forwarder
    svc = services_mod.Services(
        s,
        keyqueue.KeyQueue(s.queue_size, fw.coalesce_seconds, fw.hot_key_seconds),
        metrics.build(None),
        None,
    )
    apps = {"webhook": app_mod.create_app(s, svc), "baseline": webhook_noop_server.create_app()}
    environs = [
        EnvironBuilder(
            method="POST", path="/validate", data=b, content_type="application/json"
        ).get_environ()
        for b in bodies[:200]
    ]

    def run(app: Any) -> None:
        for env, body in zip(environs, bodies, strict=False):
            e = dict(env)
            e["wsgi.input"] = io.BytesIO(body)
            b"".join(app(e, lambda *a: None))

    out = {}
    for name, app in apps.items():
        run(app)
        out[name] = (
            min(timeit.repeat(lambda a=app: run(a), number=5, repeat=7)) / (5 * len(environs)) * 1e6
        )
    return out


def drive(
    port: int, ca_file: pathlib.Path, bodies: list[bytes], connections: int, seconds: float
) -> dict[str, Any]:
    ctx = ssl.create_default_context(cafile=str(ca_file))
    latencies: list[list[float]] = [[] for _ in range(connections)]
    errors = [0] * connections
    stop = time.monotonic() + seconds
    handshakes = [0] * connections

    def run(n: int) -> None:
        conn = http.client.HTTPSConnection("127.0.0.1", port, context=ctx, timeout=10)
        handshakes[n] += 1
        i = n
        while time.monotonic() < stop:
            body = bodies[i % len(bodies)]
            i += connections
            t0 = time.perf_counter()
            try:
                conn.request("POST", "/validate", body, {"Content-Type": "application/json"})
                resp = conn.getresponse()
                resp.read()
                ok = resp.status == 200
            except (OSError, http.client.HTTPException):
                ok = False
                conn.close()
                conn = http.client.HTTPSConnection("127.0.0.1", port, context=ctx, timeout=10)
                handshakes[n] += 1
            latencies[n].append(time.perf_counter() - t0)
            if not ok:
                errors[n] += 1
        conn.close()

    threads = [threading.Thread(target=run, args=(n,)) for n in range(connections)]
    t0 = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.monotonic() - t0
    lat = sorted(x for xs in latencies for x in xs)
    return {
        "requests": len(lat),
        "errors": sum(errors),
        "seconds": elapsed,
        "throughput": len(lat) / elapsed,
        "p50_ms": 1000 * lat[len(lat) // 2],
        "p99_ms": 1000 * lat[int(len(lat) * 0.99)],
        "connections_opened": sum(handshakes),
    }


def tables(doc: dict[str, Any]) -> str:
    """docs/performance.md's tables: medians per server, then the ratios."""
    scenario, s = f"keys {doc['settings']['keys']}", doc["summary"]
    lines = [
        "| scenario | server | req/s | p50 ms | p99 ms | req per CPU-s | records forwarded |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    for target, label, forwarded in (
        ("go", "Go no-op", "—"),
        ("baseline", "no-op baseline", "—"),
        ("webhook", "webhook", f"{doc['records_forwarded']:,}"),
    ):
        if target not in s:  # a run before the Go no-op
            continue
        x = s[target]
        lines.append(
            f"| {scenario} | {label} | {x['throughput']:,.0f} | {x['p50_ms']:.2f} | "
            f"{x['p99_ms']:.1f} | "
            f"{x['requests_per_cpu_second']:,.0f} | {forwarded} |"
        )
    go = doc.get("go_throughput_ratio")
    lines += [
        "",
        "| scenario | throughput ratio | CPU-normalised ratio | handler adds (in-process) "
        "| ratio to the Go no-op |",
        "|---|---:|---:|---:|---:|",
        f"| {scenario} | {doc['throughput_ratio']:.3f} | {doc['cpu_efficiency_ratio']:.3f} | "
        f"{doc['wsgi_handler_extra_us']:.0f} µs | {'—' if go is None else f'{go:.3f}'} |",
    ]
    return "\n".join(lines)


def report(doc: dict[str, Any]) -> None:
    skeleton.report(doc, tables(doc))


def main() -> int:
    ap = skeleton.options(None, __doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=3.0, help="per measurement window")
    ap.add_argument("--rounds", type=int, default=10, help="alternating webhook/baseline windows")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--threads", type=int, default=8)
    ap.add_argument("--connections", type=int, default=8)
    ap.add_argument("--keys", type=int, default=50, help="distinct ConfigMaps in the reviews")
    args = skeleton.parse(ap, report, named=lambda a: f"webhook_admission_keys{a.keys}.json")
    began = provenance.start()

    work = pathlib.Path(tempfile.mkdtemp(prefix="tether-bench-webhook-"))
    plane = controlplane.ControlPlane("bench").start()
    rec = None
    try:
        core = client.CoreV1Api(plane.api_client())
        core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=NAMESPACE)))
        names = [f"cm-{k}" for k in range(args.keys)]
        for n in names:
            core.create_namespaced_config_map(
                NAMESPACE, client.V1ConfigMap(metadata=client.V1ObjectMeta(name=n), data={"k": "v"})
            )
        bodies = [review(names[i % len(names)], i) for i in range(1000)]
        runtime_ca = certs.CertificateAuthority.create("bench-runtime-ca")
        runtime_ca.issue("rt-bench", client=True).write(work / "rt.crt", work / "rt.key")
        (work / "runtime-ca.crt").write_bytes(runtime_ca.cert_pem)
        # the stand-in listener runs in its own process (not competing for this one's GIL)
        rec = subprocess.Popen(
            [sys.executable, "-m", "testing.receiver", str(work), str(work / "runtime-ca.crt")],
            cwd=skeleton.REPO,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            preexec_fn=controlplane.die_with_parent(),
        )
        assert rec.stdout is not None and rec.stdin is not None
        port = int(rec.stdout.readline())
        env = {
            "TETHER_RUNTIME_ID": "rt-bench",
            "TETHER_LISTENER_URL": f"https://127.0.0.1:{port}",
            "TETHER_LISTENER_CA_FILE": str(work / "receiver-ca.crt"),
            "TETHER_CLIENT_CERT_FILE": str(work / "rt.crt"),
            "TETHER_CLIENT_KEY_FILE": str(work / "rt.key"),
            "TETHER_KUBECONFIG": str(plane.kubeconfig),
            "TETHER_WEBHOOK_WORKERS": str(args.workers),
            "TETHER_WEBHOOK_THREADS": str(args.threads),
            "TETHER_LOG_LEVEL": "WARNING",
            "PYTHONPATH": str(skeleton.REPO),
        }
        results: dict[str, list[dict[str, Any]]] = {t: [] for t in TARGETS}
        # Both servers run for the whole benchmark; short measurement windows alternate
        # between them so that drifting load from elsewhere on the machine hits both alike.
        procs: dict[str, stack.WebhookProcess] = {}
        try:
            for target in TARGETS:
                d = work / target
                d.mkdir()
                proc = stack.WebhookProcess(d, env)
                if target == "baseline":
                    proc.command = [
                        sys.executable,
                        str(skeleton.REPO / "bench" / "webhook_noop_server.py"),
                    ]
                elif target == "go":
                    proc.command = [str(gonoop.binary())]
                procs[target] = proc.start()
                drive(proc.port, proc.ca_file, bodies, args.connections, 1.0)  # warm-up
            for r in range(args.rounds):
                order = TARGETS[r % len(TARGETS) :] + TARGETS[: r % len(TARGETS)]
                for target in order:
                    proc = procs[target]
                    assert proc.proc is not None
                    time.sleep(0.5)  # let the other server's background work settle
                    cpu0 = cpu_seconds(proc.proc.pid)
                    res = drive(proc.port, proc.ca_file, bodies, args.connections, args.seconds)
                    res["server_cpu_seconds"] = cpu_seconds(proc.proc.pid) - cpu0
                    res["requests_per_cpu_second"] = res["requests"] / max(
                        res["server_cpu_seconds"], 1e-6
                    )
                    results[target].append(res)
                    print(
                        f"round {r + 1} {target:8s} {res['throughput']:8.0f} req/s  "
                        f"p50 {res['p50_ms']:6.2f} ms  p99 {res['p99_ms']:6.2f} ms  "
                        f"{res['requests_per_cpu_second']:6.0f} req/cpu-s  errors {res['errors']}",
                        flush=True,
                    )
        finally:
            for proc in procs.values():
                proc.stop()
        summary = {}
        for target, rs in results.items():
            summary[target] = {
                "throughput": statistics.median(x["throughput"] for x in rs),
                "p50_ms": statistics.median(x["p50_ms"] for x in rs),
                "p99_ms": statistics.median(x["p99_ms"] for x in rs),
                "requests_per_cpu_second": statistics.median(
                    x["requests_per_cpu_second"] for x in rs
                ),
                "errors": sum(x["errors"] for x in rs),
                "connections_opened": sum(x["connections_opened"] for x in rs),
            }
        ratio = summary["webhook"]["throughput"] / summary["baseline"]["throughput"]
        cpu_ratio = (
            summary["webhook"]["requests_per_cpu_second"]
            / summary["baseline"]["requests_per_cpu_second"]
        )
        print()
        print(
            f"{'':10s} {'req/s':>9s} {'p50 ms':>8s} {'p99 ms':>8s} {'req/cpu-s':>10s} "
            f"{'errors':>7s}"
        )
        for target in ("go", "baseline", "webhook"):
            s = summary[target]
            print(
                f"{target:10s} {s['throughput']:9.0f} {s['p50_ms']:8.2f} {s['p99_ms']:8.2f} "
                f"{s['requests_per_cpu_second']:10.0f} {s['errors']:7d}"
            )
        go_ratio = summary["webhook"]["throughput"] / summary["go"]["throughput"]
        print(f"\nthroughput ratio webhook/baseline: {ratio:.3f} (goal >= 0.9)")
        print(f"throughput ratio webhook/Go no-op: {go_ratio:.3f}")
        print(
            f"requests per server CPU-second ratio webhook/baseline: {cpu_ratio:.3f} "
            "(includes the forwarder's work; robust to other load on the machine)"
        )
        rec.stdin.close()
        forwarded = int(rec.stdout.readline())
        rec.wait(10)
        rec = None
        print(f"records received by the stand-in listener: {forwarded}")
        wsgi = wsgi_costs(bodies, work / "wsgi-metrics")
        wsgi_extra = wsgi["webhook"] - wsgi["baseline"]
        print(
            f"in-process WSGI cost per request (no TLS, no gunicorn, no forwarder): webhook "
            f"{wsgi['webhook']:.0f} us, no-op {wsgi['baseline']:.0f} us: "
            f"the handler adds {wsgi_extra:.0f} us"
        )
        doc = {
            "machine": skeleton.machine(),
            "settings": {k: v for k, v in vars(args).items() if k not in ("out", "report")},
            "rounds": results,
            "summary": summary,
            "throughput_ratio": ratio,
            "go_throughput_ratio": go_ratio,
            "cpu_efficiency_ratio": cpu_ratio,
            "goal": 0.9,
            "records_forwarded": forwarded,
            "wsgi_us_per_request": wsgi,
            "wsgi_handler_extra_us": wsgi_extra,
        }
        report(skeleton.write(args.out, "webhook_admission", began, doc))
        return 0
    finally:
        if rec is not None:
            rec.kill()
        plane.stop()
        subprocess.run(["rm", "-rf", str(work)], check=False)


if __name__ == "__main__":
    sys.exit(main())
