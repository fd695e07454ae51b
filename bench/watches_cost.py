"""Benchmark: what Watches cost the webhook's admission path: three Watches of different
kinds against one, same run (issue 24).

Starts one real SKR control plane (the forwarder reads objects back), the recording mTLS
receiver as the listener (its own process), and three servers with identical gunicorn
settings, driven in alternating windows (medians over the windows):

  baseline   the no-op endpoint (bench/webhook_noop_server.py, plain WSGI)
  watches-1  the webhook in Watch mode, its runtime's list one Watch (ConfigMaps, full)
  watches-3  the webhook in Watch mode, three Watches of different kinds: ConfigMaps
             (full), Secrets (digest) and a custom resource (Widgets, full)

All get the same ConfigMap UPDATE reviews (bench/webhook_admission.py's, ~1 KiB of data,
KEYS ConfigMaps), covered by one Watch in both lists; watches-3 also gets a mixed stream
(a third each of ConfigMaps, Secrets and Widgets: each review is reduced for its own Watch,
a Secret's values hashed) as a row of its own, on a fourth server with the three Watches (so
its forwarding backlog never lands in another row's window). ratio = watches-3 / watches-1
(throughput and requests per server CPU-second, which other load on the machine disturbs far
less). Prints a table and writes bench/results/watches_cost.json (commit, load average,
command).

    .venv/bin/python bench/watches_cost.py [--keys 50] [--seconds 3] [--rounds 6]
    .venv/bin/python bench/watches_cost.py --report
"""

from __future__ import annotations

import argparse
import base64
import json
import pathlib
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

import provenance
import skeleton
import webhook_admission as wa
from kubernetes import client

from testing import controlplane, watchenv
from testing import webhookstack as stack
from tether.base import certs
from tether.wire import watches, watchwire

NS = wa.NAMESPACE
GROUP = "bench.example.com"
CM = {"group": "", "version": "v1", "resource": "configmaps", "kind": "ConfigMap"}
SECRET = {"group": "", "version": "v1", "resource": "secrets", "kind": "Secret"}
WIDGET = watchenv.widgets(GROUP)
CRD = watchenv.widget_crd(GROUP)
SERVERS = ("baseline", "watches-1", "watches-3", "watches-3-mixed")


def _watch(name: str, resource: dict[str, str], **spec: Any) -> watches.Watch:
    return watches.parse(
        {
            "metadata": {"name": name, "generation": 1},
            "spec": {"resource": resource, "namespaces": [NS], **spec},
        }
    )


LISTS = {
    "watches-1": (_watch("configuration", CM),),
    "watches-3": (
        _watch("configuration", CM),
        _watch("secrets", SECRET, send={"mode": "digest"}),
        _watch("widgets", WIDGET),
    ),
}


def _review(kind: str, name: str, i: int) -> bytes:
    if kind == "ConfigMap":
        return wa.review(name, i)
    values = {f"key-{k}": f"value-{i}-{k}-" + "x" * 40 for k in range(16)}
    meta = {
        "name": name,
        "namespace": NS,
        "uid": f"uid-{name}",
        "resourceVersion": "",
        "labels": {"app": "bench"},
    }
    if kind == "Secret":
        res = {"group": "", "version": "v1", "resource": "secrets"}
        obj = {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": meta,
            "type": "Opaque",
            "data": {k: base64.b64encode(v.encode()).decode() for k, v in values.items()},
        }
    else:
        res = {"group": GROUP, "version": "v1", "resource": "widgets"}
        obj = {"apiVersion": f"{GROUP}/v1", "kind": "Widget", "metadata": meta, "spec": values}
    old = {**obj, "metadata": {**meta, "resourceVersion": "1"}}
    return json.dumps(
        {
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "request": {
                "uid": f"req-{i}",
                "operation": "UPDATE",
                "kind": {"group": res["group"], "version": "v1", "kind": kind},
                "resource": res,
                "namespace": NS,
                "name": name,
                "dryRun": False,
                "object": obj,
                "oldObject": old,
                "userInfo": {"username": "bench"},
            },
        }
    ).encode()


def _objects(api: client.ApiClient, keys: int) -> list[str]:
    core, custom = client.CoreV1Api(api), client.CustomObjectsApi(api)
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=NS)))
    controlplane.install_crds(api, CRD)
    names = [f"obj-{k}" for k in range(keys)]
    for n in names:
        meta = client.V1ObjectMeta(name=n, labels={"app": "bench"})
        core.create_namespaced_config_map(NS, client.V1ConfigMap(metadata=meta, data={"k": "v"}))
        core.create_namespaced_secret(NS, client.V1Secret(metadata=meta, string_data={"k": "v"}))
        custom.create_namespaced_custom_object(
            GROUP,
            "v1",
            NS,
            "widgets",
            {
                "apiVersion": f"{GROUP}/v1",
                "kind": "Widget",
                "metadata": {"name": n, "labels": {"app": "bench"}},
                "spec": {"k": "v"},
            },
        )
    for name, ws in LISTS.items():
        core.create_namespaced_config_map(
            NS,
            client.V1ConfigMap(
                metadata=client.V1ObjectMeta(name=f"tether-{name}"),
                data={watchwire.WIRE_KEY: watchwire.to_wire(ws)},
            ),
        )
    return names


def _measure(
    procs: dict[str, stack.WebhookProcess],
    streams: dict[str, list[bytes]],
    args: argparse.Namespace,
) -> dict[str, list[dict[str, Any]]]:
    results: dict[str, list[dict[str, Any]]] = {s: [] for s in SERVERS}
    for r in range(args.rounds):
        order = SERVERS if r % 2 == 0 else tuple(reversed(SERVERS))
        for target in order:
            proc = procs[target]
            assert proc.proc is not None
            time.sleep(0.5)  # let the previous server's forwarding settle
            cpu0 = wa.cpu_seconds(proc.proc.pid)
            res = wa.drive(proc.port, proc.ca_file, streams[target], args.connections, args.seconds)
            res["server_cpu_seconds"] = wa.cpu_seconds(proc.proc.pid) - cpu0
            res["requests_per_cpu_second"] = res["requests"] / max(res["server_cpu_seconds"], 1e-6)
            results[target].append(res)
            print(
                f"round {r + 1} {target:16s} {res['throughput']:7.0f} req/s  "
                f"p50 {res['p50_ms']:6.2f} ms  "
                f"{res['requests_per_cpu_second']:6.0f} req/cpu-s  errors {res['errors']}",
                flush=True,
            )
    return results


def _summary(results: dict[str, list[dict[str, Any]]]) -> dict[str, dict[str, float]]:
    return {
        t: {
            "throughput": statistics.median(x["throughput"] for x in rs),
            "p50_ms": statistics.median(x["p50_ms"] for x in rs),
            "p99_ms": statistics.median(x["p99_ms"] for x in rs),
            "requests_per_cpu_second": statistics.median(x["requests_per_cpu_second"] for x in rs),
            "errors": sum(x["errors"] for x in rs),
        }
        for t, rs in results.items()
    }


def _print(doc: dict[str, Any]) -> None:
    print(
        f"{'server':16s} {'req/s':>8s} {'p50 ms':>7s} {'p99 ms':>7s} {'req/cpu-s':>10s} "
        f"{'errors':>7s}"
    )
    for t in SERVERS:
        s = doc["summary"][t]
        print(
            f"{t:16s} {s['throughput']:8.0f} {s['p50_ms']:7.2f} {s['p99_ms']:7.2f} "
            f"{s['requests_per_cpu_second']:10.0f} {s['errors']:7d}"
        )
    print(
        f"\nwatches-3 / watches-1: throughput {doc['throughput_ratio']:.3f}, "
        f"requests per CPU-second {doc['cpu_ratio']:.3f} (same ConfigMap reviews)"
    )
    print(provenance.footer(doc))


def main() -> int:
    ap = skeleton.options("watches_cost", __doc__, raw=True)
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--connections", type=int, default=8)
    ap.add_argument("--keys", type=int, default=50)
    args = skeleton.parse(ap, _print)
    began = provenance.start()
    work = pathlib.Path(tempfile.mkdtemp(prefix="tether-bench-watches-"))
    plane = controlplane.ControlPlane("bench-watches").start()
    rec = None
    procs: dict[str, stack.WebhookProcess] = {}
    try:
        names = _objects(plane.api_client(), args.keys)
        kinds = ("ConfigMap", "Secret", "Widget")
        cms = [_review("ConfigMap", names[i % len(names)], i) for i in range(1000)]
        mixed = [_review(kinds[i % 3], names[(i // 3) % len(names)], i) for i in range(1000)]
        streams = {"baseline": cms, "watches-1": cms, "watches-3": cms, "watches-3-mixed": mixed}
        ca = certs.CertificateAuthority.create("bench-runtime-ca")
        ca.issue("rt-bench", client=True).write(work / "rt.crt", work / "rt.key")
        (work / "runtime-ca.crt").write_bytes(ca.cert_pem)
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
            "TETHER_WEBHOOK_WORKERS": "2",
            "TETHER_WEBHOOK_THREADS": "8",
            "TETHER_LOG_LEVEL": "WARNING",
            "PYTHONPATH": str(skeleton.REPO),
        }
        for target in SERVERS:  # the mixed stream has a server of its own (its backlog is its own)
            d = work / target
            d.mkdir()
            wire = f"{NS}/tether-{target.removesuffix('-mixed')}"
            proc = stack.WebhookProcess(d, {**env, "TETHER_WATCHES_CONFIGMAP": wire})
            if target == "baseline":
                proc.command = [
                    sys.executable,
                    str(skeleton.REPO / "bench" / "webhook_noop_server.py"),
                ]
            procs[target] = proc.start()
            wa.drive(proc.port, proc.ca_file, streams[target], args.connections, 1.0)  # warm-up
        results = _measure(procs, streams, args)
    finally:
        for proc in procs.values():
            proc.stop()
        if rec is not None:
            rec.kill()
        plane.stop()
        subprocess.run(["rm", "-rf", str(work)], check=False)
    summary = _summary(results)
    doc = {
        "settings": skeleton.settings(args),
        "rounds": results,
        "summary": summary,
        "throughput_ratio": summary["watches-3"]["throughput"] / summary["watches-1"]["throughput"],
        "cpu_ratio": summary["watches-3"]["requests_per_cpu_second"]
        / summary["watches-1"]["requests_per_cpu_second"],
    }
    doc = skeleton.write(args.out, "watches_cost", began, doc)
    print()
    _print(doc)
    return 0


if __name__ == "__main__":
    sys.exit(main())
