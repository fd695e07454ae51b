"""Benchmark: propagation of a ConfigMap write through the webhook to the listener,
leading-edge delivery against the trailing coalescing window it replaced, same run.

Starts one real SKR control plane, a recording mTLS receiver standing in for the listener
(``testing.receiver``, in its own process so that the load generator's threads do not delay
it: it stamps each request on arrival with the system-wide monotonic clock, which this
process reads too), and one real webhook (`tether webhook`, gunicorn, default workers) per
configuration, each registered with the apiserver (the manifest's
ValidatingWebhookConfiguration) for its own namespace:

* ``trailing``: the previous defaults, ``TETHER_WEBHOOK_COALESCE_SECONDS=0.1`` and
  ``TETHER_WEBHOOK_HOT_KEY_SECONDS=0.5`` (every key waits 100 ms after its first
  admission; a key is handed out at most every 0.5 s);
* ``leading``: the defaults (hand-out at admission, coalescing only while a key's send is
  in flight or it was handed out within 0.25 s);
* ``leading-hot0.5``: leading edge with the old hot-key interval (what each of the two
  changes contributes).

Measured per write: from the write's acknowledgement (the PATCH returned) to the arrival at
the receiver of the first record of that ConfigMap whose resourceVersion is at least the
write's (that record carries the write's state or a later one). Two phases, each
alternating between the configurations so that drifting load hits all alike:

* isolated writes: ``--isolated`` PATCHes per configuration, ``--spacing`` seconds apart,
  round-robin over 20 ConfigMaps (a ConfigMap is written again only after several seconds);
* load: ``--rate`` writes/s over ``--keys`` ConfigMaps (chosen at random, seeded) for
  ``--seconds`` per configuration, in two halves.

Prints a table and writes bench/results/webhook_propagation.json.

    .venv/bin/python bench/webhook_propagation.py [--isolated 200] [--rate 50] [--keys 20]
        [--seconds 20]
    .venv/bin/python bench/webhook_propagation.py --report [--out FILE]
        # docs/performance.md's table

The JSON (``--out``) records the commit, load average and command (bench/provenance.py).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import pathlib
import random
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any

import provenance
import skeleton
from kubernetes import client

from testing import controlplane, receiver
from testing import webhookstack as stack
from tether.base import certs

CONFIGS: dict[str, dict[str, str]] = {
    "trailing": {"TETHER_WEBHOOK_COALESCE_SECONDS": "0.1", "TETHER_WEBHOOK_HOT_KEY_SECONDS": "0.5"},
    "leading": {},
    "leading-hot0.5": {"TETHER_WEBHOOK_HOT_KEY_SECONDS": "0.5"},
}


class Stamped(list[dict[str, Any]]):
    """The receiver's request log, each entry stamped (monotonic) when it is appended."""

    def append(self, entry: dict[str, Any]) -> None:
        entry["at"] = time.monotonic()
        super().append(entry)


Arrivals = dict[tuple[str, str], list[tuple[int, float]]]


def arrivals_of(entries: list[dict[str, Any]]) -> Arrivals:
    """(namespace, name) -> [(resourceVersion, arrival)] of every acknowledged record."""
    out: Arrivals = {}
    for e in entries:
        if e["answered"] != 200:
            continue
        body = e["body"]
        for r in body["items"] if body.get("kind") == "ConfigMapChangeList" else [body]:
            out.setdefault((r["namespace"], r["name"]), []).append(
                (int(r["resourceVersion"]), e["at"])
            )
    return out


def serve(workdir: str, ca_file: str) -> int:
    """The receiver process: prints its port, then answers each line on stdin with one line
    of JSON: the arrivals so far (``[[namespace, name, resourceVersion, at], ...]``)."""
    import dataclasses

    from cryptography import x509

    ca = certs.CertificateAuthority.create("unused")
    ca = dataclasses.replace(
        ca, cert=x509.load_pem_x509_certificate(pathlib.Path(ca_file).read_bytes())
    )
    rec = receiver.Receiver(pathlib.Path(workdir), ca)
    rec.requests = Stamped()
    rec.start()
    print(rec.port, flush=True)
    for _ in sys.stdin:
        with rec.lock:
            entries = list(rec.requests)
        print(
            json.dumps(
                [
                    [ns, name, rv, at]
                    for (ns, name), xs in arrivals_of(entries).items()
                    for rv, at in xs
                ]
            ),
            flush=True,
        )
    rec.stop()
    return 0


class RemoteReceiver:
    """The receiver process, seen from the benchmark."""

    def __init__(self, work: pathlib.Path, ca_file: pathlib.Path) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, __file__, "--serve-receiver", str(work), str(ca_file)],
            cwd=skeleton.REPO,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            preexec_fn=controlplane.die_with_parent(),
        )
        assert self.proc.stdout is not None and self.proc.stdin is not None
        self.url = f"https://127.0.0.1:{int(self.proc.stdout.readline())}"
        self.ca_file = work / "receiver-ca.crt"
        self._lock = threading.Lock()

    def arrivals(self) -> Arrivals:
        assert self.proc.stdout is not None and self.proc.stdin is not None
        with self._lock:
            self.proc.stdin.write("\n")
            self.proc.stdin.flush()
            rows = json.loads(self.proc.stdout.readline())
        out: Arrivals = {}
        for ns, name, rv, at in rows:
            out.setdefault((ns, name), []).append((rv, at))
        return out

    def stop(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        self.proc.wait(10)


def latencies(
    writes: list[tuple[str, str, int, float]], rec: RemoteReceiver, timeout: float = 15.0
) -> tuple[list[float], int]:
    """Seconds from each write's acknowledgement to the first record at least as new;
    waits up to ``timeout`` for the last ones. Returns (latencies, writes never seen)."""
    deadline = time.monotonic() + timeout
    while True:
        got = rec.arrivals()
        out, missing = [], 0
        for ns, name, rv, acked in writes:
            seen = [at for r, at in got.get((ns, name), []) if r >= rv]
            if seen:
                out.append(min(seen) - acked)
            else:
                missing += 1
        if not missing or time.monotonic() > deadline:
            return out, missing
        time.sleep(0.2)


def pct(xs: list[float], q: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, int(len(s) * q))] if s else float("nan")


def summary(xs: list[float], missing: int, extra: dict[str, Any] | None = None) -> dict[str, Any]:
    return {
        "writes": len(xs) + missing,
        "missing": missing,
        "p50_ms": 1000 * pct(xs, 0.5),
        "p90_ms": 1000 * pct(xs, 0.9),
        "p99_ms": 1000 * pct(xs, 0.99),
        "max_ms": 1000 * max(xs, default=float("nan")),
        **(extra or {}),
    }


def table(doc: dict[str, Any]) -> str:
    """docs/performance.md's table: latency per phase and configuration, ratios to the baseline."""
    base, goals, st = doc["ratios_to"], doc["goals"], doc["settings"]
    phases = {
        "isolated": (
            "isolated",
            f"p50 ≤ {goals['isolated_p50_ms']}, p99 ≤ {goals['isolated_p99_ms']}",
        ),
        "load": (f"{st['rate']:g} writes/s, {st['keys']} keys", f"p99 ≤ {goals['load_p99_ms']}"),
    }
    lines = [
        "| phase | config | p50 ms | p90 ms | p99 ms | max ms | p50 ratio | p99 ratio | goal |",
        "|---|---|---:|---:|---:|---:|---:|---:|---|",
    ]
    for phase, (label, goal) in phases.items():
        for name, r in doc["results"][phase].items():
            ratio = doc["ratios"][phase][name]

            def b(text: str, name: str = name) -> str:
                return f"**{text}**" if name == "leading" else text

            cells = [
                label,
                f"{name} (baseline)" if name == base else b(name),
                b(f"{r['p50_ms']:,.1f}"),
                f"{r['p90_ms']:,.1f}",
                b(f"{r['p99_ms']:,.1f}"),
                f"{r['max_ms']:,.1f}",
                b(f"{ratio['p50']:.2f}"),
                b(f"{ratio['p99']:.2f}"),
                goal if name == "leading" else "",
            ]
            lines.append(("| " + " | ".join(cells) + " |").replace("|  |", "| |"))
    return "\n".join(lines)


def report(doc: dict[str, Any]) -> None:
    skeleton.report(doc, table(doc))


def main() -> int:
    ap = skeleton.options("webhook_propagation", __doc__.split("\n\n")[0])
    ap.add_argument("--isolated", type=int, default=200, help="isolated writes per configuration")
    ap.add_argument("--spacing", type=float, default=0.15, help="seconds between isolated writes")
    ap.add_argument("--rate", type=float, default=50.0, help="writes/s in the load phase")
    ap.add_argument("--keys", type=int, default=20, help="ConfigMaps in the load phase")
    ap.add_argument("--seconds", type=float, default=20.0, help="load phase per configuration")
    ap.add_argument(
        "--serve-receiver", nargs=2, metavar=("WORKDIR", "CA_FILE"), help=argparse.SUPPRESS
    )
    ap.add_argument(
        "--configs",
        default=",".join(CONFIGS),
        help="comma-separated subset of " + ", ".join(CONFIGS),
    )
    args = skeleton.parse(ap, report)
    if args.serve_receiver:
        return serve(*args.serve_receiver)
    began = provenance.start()
    names = args.configs.split(",")
    work = pathlib.Path(tempfile.mkdtemp(prefix="tether-bench-propagation-"))
    load_before = os.getloadavg()
    plane = controlplane.ControlPlane("bench-propagation").start()
    runtime_ca = certs.CertificateAuthority.create("bench-runtime-ca")
    runtime_ca.issue("rt-bench", client=True).write(work / "rt.crt", work / "rt.key")
    (work / "runtime-ca.crt").write_bytes(runtime_ca.cert_pem)
    rec = RemoteReceiver(work, work / "runtime-ca.crt")
    procs: dict[str, stack.WebhookProcess] = {}
    vwcs: list[str] = []
    api = plane.api_client()
    core = client.CoreV1Api(api)
    try:
        for name in names:
            ns = f"prop-{name.replace('.', '')}"
            core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=ns)))
            d = work / name
            d.mkdir()
            procs[name] = stack.WebhookProcess(
                d,
                {
                    "TETHER_RUNTIME_ID": "rt-bench",
                    "TETHER_LISTENER_URL": rec.url,
                    "TETHER_LISTENER_CA_FILE": str(rec.ca_file),
                    "TETHER_CLIENT_CERT_FILE": str(work / "rt.crt"),
                    "TETHER_CLIENT_KEY_FILE": str(work / "rt.key"),
                    "TETHER_KUBECONFIG": str(plane.kubeconfig),
                    "TETHER_WEBHOOK_WORKERS": "2",
                    "TETHER_WEBHOOK_THREADS": "8",
                    "TETHER_LOG_LEVEL": "INFO",
                    "PYTHONPATH": str(skeleton.REPO),
                    **CONFIGS[name],
                },
            ).start()
            vwc = stack.vwc_body(
                f"tether-bench-{ns}", procs[name].url + "/validate", procs[name].ca.cert_pem, ns
            )
            stack.register(api, vwc)
            vwcs.append(vwc["metadata"]["name"])
            for k in range(max(args.keys, 20)):
                core.create_namespaced_config_map(
                    ns,
                    client.V1ConfigMap(
                        metadata=client.V1ObjectMeta(name=f"cm-{k}"), data={"i": "0"}
                    ),
                )
        ns_of = {name: f"prop-{name.replace('.', '')}" for name in names}
        # the apiserver picks configurations up asynchronously: write until each is called
        deadline = time.monotonic() + 60
        for name in names:
            n = 0
            while not rec.arrivals().get((ns_of[name], "cm-0")):
                assert time.monotonic() < deadline, procs[name].log()
                n += 1
                core.patch_namespaced_config_map("cm-0", ns_of[name], {"data": {"i": f"p{n}"}})
                time.sleep(0.3)
        time.sleep(1.0)

        def write(ns: str, cm: str, value: str) -> tuple[str, str, int, float]:
            got = core.patch_namespaced_config_map(cm, ns, {"data": {"i": value}})
            acked = time.monotonic()
            assert got.metadata is not None
            return ns, cm, int(str(got.metadata.resource_version)), acked

        # phase 1: isolated writes, configurations interleaved write by write
        isolated: dict[str, list[tuple[str, str, int, float]]] = {n: [] for n in names}
        t_next = time.monotonic()
        for i in range(args.isolated):
            for name in names:
                t_next += args.spacing
                time.sleep(max(0.0, t_next - time.monotonic()))
                isolated[name].append(write(ns_of[name], f"cm-{i % 20}", f"iso-{i}"))
        results: dict[str, dict[str, Any]] = {"isolated": {}, "load": {}}
        for name in names:
            xs, missing = latencies(isolated[name], rec)
            results["isolated"][name] = summary(xs, missing)
        time.sleep(1.0)

        # phase 2: load, two halves per configuration, alternating
        rng = random.Random(14)
        loaded: dict[str, list[tuple[str, str, int, float]]] = {n: [] for n in names}
        achieved: dict[str, list[float]] = {n: [] for n in names}
        pool = concurrent.futures.ThreadPoolExecutor(8)
        for half in range(2):
            for name in names if half == 0 else list(reversed(names)):
                count = int(args.rate * args.seconds / 2)
                t0 = time.monotonic()
                keys = [rng.randrange(args.keys) for _ in range(count)]

                def one(
                    i: int,
                    ns: str = ns_of[name],
                    t0: float = t0,
                    keys: list[int] = keys,
                    tag: str = f"load-{half}",
                ) -> tuple[str, str, int, float]:
                    time.sleep(max(0.0, t0 + i / args.rate - time.monotonic()))
                    return write(ns, f"cm-{keys[i]}", f"{tag}-{i}")

                done = list(pool.map(one, range(count)))
                achieved[name].append(count / (time.monotonic() - t0))
                loaded[name].extend(done)
                time.sleep(1.0)  # let the tail arrive before the next configuration runs
        pool.shutdown()
        for name in names:
            xs, missing = latencies(loaded[name], rec)
            results["load"][name] = summary(
                xs,
                missing,
                {
                    "writes_per_second": round(min(achieved[name]), 1),
                    # writes the apiserver sent to the webhook (all phases; a call that timed
                    # out under failurePolicy Ignore is missing here: only the poller sees it)
                    "admissions_all_phases": procs[name].metric(
                        "tether_webhook_admission_requests_total", operation="UPDATE"
                    ),
                    "writes_all_phases": len(isolated[name]) + len(loaded[name]),
                    # read-backs that found nothing to send (logged by the forwarder)
                    "not_forwarded": procs[name]
                    .log_path.read_text(errors="replace")
                    .count("not forwarding"),
                    "records": sum(
                        len(v) for (ns, _), v in rec.arrivals().items() if ns == ns_of[name]
                    ),
                },
            )
        load_after = os.getloadavg()

        base = "trailing" if "trailing" in names else names[0]
        print()
        print(
            f"{'phase':10s} {'config':16s} {'writes':>6s} {'p50 ms':>8s} {'p90 ms':>8s} "
            f"{'p99 ms':>8s} {'max ms':>8s} {'p50 ratio':>9s} {'p99 ratio':>9s}"
        )
        ratios: dict[str, dict[str, dict[str, float]]] = {}
        for phase in ("isolated", "load"):
            b = results[phase][base]
            for name in names:
                r = results[phase][name]
                ratios.setdefault(phase, {})[name] = {
                    "p50": r["p50_ms"] / b["p50_ms"],
                    "p99": r["p99_ms"] / b["p99_ms"],
                }
                print(
                    f"{phase:10s} {name:16s} {r['writes']:6d} {r['p50_ms']:8.1f} "
                    f"{r['p90_ms']:8.1f} "
                    f"{r['p99_ms']:8.1f} {r['max_ms']:8.1f} {ratios[phase][name]['p50']:9.2f} "
                    f"{ratios[phase][name]['p99']:9.2f}"
                    + (f"  missing {r['missing']}" if r["missing"] else "")
                )
        for name in names:
            r = results["load"][name]
            print(
                f"load {name}: {r['writes_per_second']} writes/s achieved (min of halves), "
                f"{r['records']} records received; webhook called for "
                f"{r['admissions_all_phases']:.0f} of {r['writes_all_phases']} measured writes "
                "(plus the probes and re-admissions); "
                f"{r['not_forwarded']} read-backs not forwarded"
            )
        print(
            f"load average before {load_before[0]:.1f}, after {load_after[0]:.1f} (2 shared CPUs)"
        )
        doc = {
            "machine": skeleton.machine(loadavg_before=load_before, loadavg_after=load_after),
            "settings": {k: v for k, v in vars(args).items() if k not in ("out", "report")},
            "configs": {n: CONFIGS[n] for n in names},
            "results": results,
            "ratios_to": base,
            "ratios": ratios,
            "goals": {"isolated_p50_ms": 30, "isolated_p99_ms": 100, "load_p99_ms": 500},
        }
        report(skeleton.write(args.out, "webhook_propagation", began, doc))
        return 0
    finally:
        for v in vwcs:
            stack.unregister(api, v)
        for proc in procs.values():
            proc.stop()
        rec.stop()
        plane.stop()


if __name__ == "__main__":
    sys.exit(main())
