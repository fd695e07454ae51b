"""Benchmark: a customer ConfigMap write with Tether's webhook, lifecycle-manager's watcher
webhook, both, or neither (issue 27 item 3: the write is not slowed beyond the two calls).

Starts one real SKR control plane, the recording mTLS receiver as the listener (its own
process, testing/receiver.py), Tether's webhook (`tether webhook`, its manifest's
configuration scoped to one namespace) and the runtime-watcher stand-in (its own process,
testing/watcherpeer.py) registered as lifecycle-manager registers it (``skr-webhook``: its
own Watcher of Kymas and a module's Watcher of labelled ConfigMaps, objectSelector only).
Four namespaces: ``none``, ``tether`` (Tether's webhook), ``watcher`` (labelled ConfigMaps:
the watcher's webhook), ``both``. Each round PATCHes ``--writes`` ConfigMaps of every
namespace in turn, one write at a time (``--spacing`` apart), timing each PATCH at the
client (the apiserver answers after every matching validating webhook answered). Reports
per configuration the median, p90 and p99 of the write, and what the webhooks add over
``none``: the apiserver calls validating webhooks in parallel, so ``both`` should add about
the slower of the two, never more than their sum. Writes bench/results/two_webhooks.json.

    .venv/bin/python bench/two_webhooks.py [--writes 50] [--rounds 4] [--spacing 0.05]
    .venv/bin/python bench/two_webhooks.py --report
"""

from __future__ import annotations

import pathlib
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

import provenance
import skeleton
from kubernetes import client

from testing import controlplane, watcherpeer
from testing import webhookstack as stack
from tether.base import certs

CONFIGS = ("none", "tether", "watcher", "both")
MODULE_LABEL = {"example.kyma-project.io/watched-by": "bench"}


class Child:
    """``python -m <module> WORKDIR [ARG]``: prints its port, serves until stdin closes."""

    def __init__(self, module: str, *args: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", module, *args],
            cwd=skeleton.REPO,
            text=True,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            preexec_fn=controlplane.die_with_parent(),
        )
        assert self.proc.stdout is not None
        self.url = f"https://127.0.0.1:{int(self.proc.stdout.readline())}"

    def stop(self) -> str:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.close()
        out = self.proc.stdout.read().strip()
        self.proc.wait(10)
        return out


def pct(xs: list[float], q: float) -> float:
    return sorted(xs)[min(len(xs) - 1, int(q * len(xs)))]


def setup(
    plane: controlplane.ControlPlane, work: pathlib.Path, writes: int
) -> tuple[Any, list[Any]]:
    """The four namespaces with their ConfigMaps, both registrations; returns (webhook,
    children) to stop."""
    api = plane.api_client()
    core = client.CoreV1Api(api)
    runtime_ca = certs.CertificateAuthority.create("bench-runtime-ca")
    runtime_ca.issue("rt-bench", client=True).write(work / "rt.crt", work / "rt.key")
    (work / "runtime-ca.crt").write_bytes(runtime_ca.cert_pem)
    receiver = Child("testing.receiver", str(work), str(work / "runtime-ca.crt"))
    peer = Child("testing.watcherpeer", str(work))
    (work / "tether").mkdir()
    wh = stack.WebhookProcess(
        work / "tether",
        {
            "TETHER_RUNTIME_ID": "rt-bench",
            "TETHER_LISTENER_URL": receiver.url,
            "TETHER_LISTENER_CA_FILE": str(work / "receiver-ca.crt"),
            "TETHER_CLIENT_CERT_FILE": str(work / "rt.crt"),
            "TETHER_CLIENT_KEY_FILE": str(work / "rt.key"),
            "TETHER_KUBECONFIG": str(plane.kubeconfig),
            "TETHER_WEBHOOK_WORKERS": "2",
            "TETHER_WEBHOOK_THREADS": "8",
            "TETHER_LOG_LEVEL": "WARNING",
        },
    ).start()
    for name in CONFIGS:
        core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=f"two-{name}")))
        labels = MODULE_LABEL if name in ("watcher", "both") else {}
        for k in range(writes):
            core.create_namespaced_config_map(
                f"two-{name}",
                client.V1ConfigMap(
                    metadata=client.V1ObjectMeta(name=f"cm-{k}", labels=labels), data={"i": "0"}
                ),
            )
    module = watcherpeer.Watcher(
        "kcp-system", "configmaps", "example-module", MODULE_LABEL, "", "v1", "configmaps"
    )
    ca = (work / "klm-watcher-ca.crt").read_bytes()
    stack.register(api, watcherpeer.vwc_body(ca, [watcherpeer.KLM_WATCHER, module], peer.url))
    for name in ("tether", "both"):
        stack.register(
            api,
            stack.vwc_body(
                f"tether-configmaps-{name}", wh.url + "/validate", wh.ca.cert_pem, f"two-{name}"
            ),
        )
    return wh, [receiver, peer]


def warm(core: client.CoreV1Api, wh: stack.WebhookProcess, seconds: float = 60.0) -> None:
    """Write until the apiserver calls Tether's webhook for both of its namespaces."""
    deadline = time.monotonic() + seconds
    for name in ("tether", "both"):
        while True:
            before = wh.metric("tether_webhook_admission_requests_total")
            core.patch_namespaced_config_map(
                "cm-0", f"two-{name}", {"data": {"i": str(time.time())}}
            )
            if wh.metric("tether_webhook_admission_requests_total") > before:
                break
            assert time.monotonic() < deadline, "Tether's webhook never called"
            time.sleep(0.3)
    time.sleep(2)  # the watcher's configuration, registered first, is picked up by now


def measure(
    core: client.CoreV1Api, writes: int, rounds: int, spacing: float
) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {c: [] for c in CONFIGS}
    for r in range(rounds):
        for name in CONFIGS if r % 2 == 0 else tuple(reversed(CONFIGS)):
            for k in range(writes):
                started = time.perf_counter()
                core.patch_namespaced_config_map(
                    f"cm-{k}", f"two-{name}", {"data": {"i": f"{r}-{k}"}}
                )
                out[name].append(time.perf_counter() - started)
                time.sleep(spacing)
    return out


def summarize(samples: dict[str, list[float]]) -> dict[str, dict[str, float]]:
    rows = {
        c: {
            "n": len(xs),
            "median_ms": statistics.median(xs) * 1000,
            "p90_ms": pct(xs, 0.9) * 1000,
            "p99_ms": pct(xs, 0.99) * 1000,
        }
        for c, xs in samples.items()
    }
    base = rows["none"]["median_ms"]
    for row in rows.values():
        row["added_median_ms"] = row["median_ms"] - base
    return rows


def report(doc: dict[str, Any]) -> None:
    print("| webhooks called | writes | median | p90 | p99 | added (median) |")
    print("|---|---|---|---|---|---|")
    for c in CONFIGS:
        r = doc["results"][c]
        print(
            f"| {c} | {r['n']} | {r['median_ms']:.1f} ms | {r['p90_ms']:.1f} ms "
            f"| {r['p99_ms']:.1f} ms "
            f"| {r['added_median_ms']:+.1f} ms |"
        )
    t, w, b = (doc["results"][c]["added_median_ms"] for c in ("tether", "watcher", "both"))
    print(
        f"\nboth adds {b:.1f} ms; the sum of the two alone {t + w:.1f} ms, "
        f"the slower {max(t, w):.1f} ms"
    )
    print(provenance.footer(doc))


def main() -> int:
    ap = skeleton.options("two_webhooks", __doc__.split("\n\n")[0])
    ap.add_argument(
        "--writes", type=int, default=50, help="ConfigMaps (writes) per namespace and round"
    )
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--spacing", type=float, default=0.05, help="seconds between writes")
    args = skeleton.parse(ap, report)
    began = provenance.start()
    work = pathlib.Path(tempfile.mkdtemp(prefix="tether-bench-two-webhooks-"))
    plane = controlplane.ControlPlane("bench-two-webhooks").start()
    children: list[Child] = []
    wh = None
    try:
        wh, children = setup(plane, work, args.writes)
        core = client.CoreV1Api(plane.api_client())
        warm(core, wh)
        samples = measure(core, args.writes, args.rounds, args.spacing)
    finally:
        if wh is not None:
            wh.stop()
        calls = [c.stop() for c in children]
        plane.stop()
    doc = {
        "writes": args.writes,
        "rounds": args.rounds,
        "watcher_calls": int(calls[1].splitlines()[-1]) if len(calls) > 1 and calls[1] else None,
        "results": summarize(samples),
    }
    doc = skeleton.write(args.out, "two_webhooks", began, doc)
    report(doc)
    return 0


if __name__ == "__main__":
    sys.exit(main())
