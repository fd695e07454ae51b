"""Benchmark: the enroller's cost to enroll runtimes, and its steady-state cost per runtime
per interval (goal: no write and at most one read in the runtime when nothing changed).

Each runtime needs a real API server of its own (Tether's SKR objects have fixed names, so
runtimes cannot share one), so the bench starts ``--runtimes`` planes (default 10) plus the
KCP and runs the enroller in-process (``reconcile.Enroller``: what ``tether enroller``
schedules) over them:

* **first run**: every runtime installed (certificates issued, the bundle applied);
* **steady runs** (the baseline ratio, same invocation): nothing changed, ``--steady`` runs;
* the time for 1,000 runtimes is **extrapolated**, not measured: a run works
  ``CONCURRENCY`` runtimes at once, so 1,000 take ``ceil(1000 / concurrency)`` waves of the
  measured time per wave (first run time / its waves); the KCP side's fleet-wide lists are
  one request per 500 objects and left out of the model.

    .venv/bin/python bench/enroller_scale.py [--runtimes 10] [--concurrency 8] [--steady 3]
    .venv/bin/python bench/enroller_scale.py --report [--out FILE]   # docs/performance.md's table

The JSON (``--out``, bench/results/enroller_scale.json) records the commit, load average and
command (bench/provenance.py).
"""

from __future__ import annotations

import logging
import math
import sys
import time
from typing import Any

import provenance
import skeleton
from kubernetes import client

from enroller import metrics, reconcile
from enroller import settings as settings_mod
from testing import compassenv, controlplane, localnet
from tether.base import certs
from tether.kube import gateway, skr_clients

CRD = (
    skeleton.REPO / "manifests" / "kcp" / "crds" / "tether.kyma-project.io_runtimeenrollments.yaml"
)


def counter(e: reconcile.Enroller, verb: str) -> float:
    return float(e.stats.requests.labels(verb)._value.get())


def table(doc: dict[str, Any]) -> str:
    """docs/performance.md's table: the first run and the median steady run."""
    steady = doc["steady_runs"]

    def median(key: str) -> float:
        return float(sorted(x[key] for x in steady)[len(steady) // 2])

    return "\n".join(
        [
            "| run | runtimes | seconds | reads per runtime | writes per runtime |",
            "|---|---|---|---|---|",
            f"| first (install: certificates issued, bundle applied) | {doc['runtimes']} | "
            f"{doc['first_run_seconds']:.2f} | {doc['first_run_reads_per_runtime']:g} | "
            f"{doc['first_run_writes_per_runtime']:g} |",
            f"| steady (nothing changed), median of {len(steady)} | {doc['runtimes']} | "
            f"{doc['steady_run_seconds_median']:.3f} | {median('reads_per_runtime'):g} | "
            f"{median('writes_per_runtime'):g} |",
        ]
    )


def report(doc: dict[str, Any]) -> None:
    skeleton.report(doc, table(doc))


def main(argv: list[str]) -> int:
    ap = skeleton.options("enroller_scale", __doc__, raw=True)
    ap.add_argument("--runtimes", type=int, default=10)
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--steady", type=int, default=3)
    args = skeleton.parse(ap, report, argv)
    began = provenance.start()
    logging.basicConfig(level=logging.WARNING)
    t0 = time.monotonic()
    names = ["kcp"] + [f"r{i}" for i in range(args.runtimes)]
    with controlplane.planes(*names) as planes:
        setup_s = time.monotonic() - t0
        kcp = planes["kcp"]
        api = kcp.api_client()
        controlplane.install_crds(api, controlplane.KYMA_CRD, CRD)
        ns = "kcp-system"
        client.CoreV1Api(api).create_namespace(
            client.V1Namespace(metadata=client.V1ObjectMeta(name=ns))
        )
        for i in range(args.runtimes):
            name = f"kyma-{i}"
            labels = compassenv.kyma_labels("ga", name, **{"kyma-project.io/runtime-id": f"rt-{i}"})
            client.CustomObjectsApi(api).create_namespaced_custom_object(
                "operator.kyma-project.io",
                "v1beta2",
                ns,
                "kymas",
                {
                    "apiVersion": "operator.kyma-project.io/v1beta2",
                    "kind": "Kyma",
                    "metadata": {
                        "name": name,
                        "labels": labels,
                        "annotations": {"skr-domain": f"{name}.example.com"},
                    },
                    "spec": {"channel": "regular"},
                },
            )
            compassenv.create_kubeconfig_secret(api, ns, name, planes[f"r{i}"])
        gw = gateway.from_kubeconfig(str(kcp.kubeconfig))
        s = settings_mod.Settings(
            listener_url="https://listener.example.com",
            listener_ca=certs.CertificateAuthority.create("l").cert_pem,
            kcp_namespace=ns,
            namespace=ns,
            concurrency=args.concurrency,
        )
        audit = logging.getLogger("bench.audit")
        audit.propagate = False
        e = reconcile.Enroller(
            s,
            gw,
            skr_clients.SkrClients(gw, ns, localnet.policy(timeout=s.skr_timeout)),
            metrics.Metrics(),
            audit,
        )
        t = time.monotonic()
        states = e.run()
        first_s = time.monotonic() - t
        assert states == {"Ready": args.runtimes}, states
        first_reads, first_writes = counter(e, "read"), counter(e, "write")
        # the webhook Deployments of these runtimes have no pods: the enroller reads their
        # status each run until they serve; mark them serving to measure the healthy state
        for m in e.memory.values():
            m.webhook_serving = True
        steady = []
        rvs: dict[str, str] = {}
        for n in range(args.steady):
            if n == 1:  # after the first steady run, which writes WebhookServing=True once
                rvs = {
                    o["metadata"]["name"]: o["metadata"]["resourceVersion"]
                    for o in client.CustomObjectsApi(api).list_namespaced_custom_object(
                        "tether.kyma-project.io", "v1alpha1", ns, "runtimeenrollments"
                    )["items"]
                }
            r0, w0 = counter(e, "read"), counter(e, "write")
            t = time.monotonic()
            e.run()
            steady.append(
                {
                    "seconds": time.monotonic() - t,
                    "reads_per_runtime": (counter(e, "read") - r0) / args.runtimes,
                    "writes_per_runtime": (counter(e, "write") - w0) / args.runtimes,
                }
            )
        rvs_after = {
            o["metadata"]["name"]: o["metadata"]["resourceVersion"]
            for o in client.CustomObjectsApi(api).list_namespaced_custom_object(
                "tether.kyma-project.io", "v1alpha1", ns, "runtimeenrollments"
            )["items"]
        }
        gw.close()
        api.close()
    waves = math.ceil(args.runtimes / args.concurrency)
    per_wave = first_s / waves
    steady_s = sorted(x["seconds"] for x in steady)[len(steady) // 2]
    result: dict[str, Any] = {
        "machine": skeleton.machine(),
        "runtimes": args.runtimes,
        "concurrency": args.concurrency,
        "first_run_seconds": round(first_s, 2),
        "first_run_reads_per_runtime": first_reads / args.runtimes,
        "first_run_writes_per_runtime": first_writes / args.runtimes,
        "steady_runs": steady,
        "steady_run_seconds_median": round(steady_s, 3),
        "steady_over_first_ratio": round(steady_s / first_s, 3),
        "kcp_status_writes_after_the_first_steady_run": sum(
            rvs[n] != rvs_after.get(n) for n in rvs
        ),
        "extrapolated_seconds_for_1000": round(math.ceil(1000 / args.concurrency) * per_wave, 1),
        "setup_seconds": round(setup_s, 1),
    }
    print(
        f"{'run':<8} {'runtimes':>8} {'conc':>5} {'seconds':>8} {'reads/rt':>9} {'writes/rt':>10}"
    )
    print(
        f"{'first':<8} {args.runtimes:>8} {args.concurrency:>5} {first_s:>8.2f} "
        f"{result['first_run_reads_per_runtime']:>9.1f} "
        f"{result['first_run_writes_per_runtime']:>10.1f}"
    )
    for i, x in enumerate(steady, 1):
        print(
            f"{'steady' + str(i):<8} {args.runtimes:>8} {args.concurrency:>5} {x['seconds']:>8.2f} "
            f"{x['reads_per_runtime']:>9.1f} {x['writes_per_runtime']:>10.1f}"
        )
    print(
        f"steady/first time ratio {result['steady_over_first_ratio']}; "
        "KCP status writes after the first steady run "
        f"{result['kcp_status_writes_after_the_first_steady_run']}; "
        "1,000 runtimes extrapolated: "
        f"{result['extrapolated_seconds_for_1000']} s "
        f"({math.ceil(1000 / args.concurrency)} waves of {per_wave:.2f} s)"
    )
    result = skeleton.write(args.out, "enroller_scale", began, result, indent=1)
    report(result)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
