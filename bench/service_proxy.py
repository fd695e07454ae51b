"""Benchmark: what the test harness's Service proxy (testing/serviceproxy.py, the pod
runner's kube-proxy) adds to a request/response round trip (issue 26 item 7).

Starts the no-op admission endpoint (bench/webhook_noop_server.py: the webhook's gunicorn
settings, worker class, TLS and keep-alive) and, in front of it, ``serviceproxy.Proxy`` of
this checkout; with ``--before REV`` also the ``Proxy`` of ``testing/serviceproxy.py`` at
commit REV (read with ``git show``, loaded from a temporary file: the old and the new proxy
are measured in the same invocation, under the same load). Then, in ``--rounds`` alternating
windows, one keep-alive HTTPS connection per path sends ``--requests`` AdmissionReview-sized
POSTs (bench/webhook_admission.py's ConfigMap UPDATE review, about 3.5 KiB) one after
another, as the kube-apiserver calls a webhook: ``direct`` to the server's port, ``proxy``
through this checkout's proxy, ``proxy@REV`` through the old one. Reports p50/p99 per path
and their ratio to direct; writes bench/results/service_proxy.json.

    .venv/bin/python bench/service_proxy.py --before 0551d42   # --requests 200 --rounds 5
    .venv/bin/python bench/service_proxy.py --report            # the table again, from the JSON
"""

from __future__ import annotations

import http.client
import importlib.util
import pathlib
import ssl
import subprocess
import sys
import tempfile
import time
from typing import Any

import provenance
import skeleton
from webhook_admission import review

from testing import controlplane, serviceproxy
from testing import webhookstack as stack
from tether.base import certs


def old_proxy(rev: str, work: pathlib.Path) -> Any:
    """The ``Proxy`` class of testing/serviceproxy.py at ``rev`` (stdlib only, loaded from a
    file)."""
    src = subprocess.run(
        ["git", "show", f"{rev}:testing/serviceproxy.py"],
        cwd=skeleton.REPO,
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    path = work / "serviceproxy_before.py"
    path.write_text(src)
    spec = importlib.util.spec_from_file_location("serviceproxy_before", path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.Proxy


def server(work: pathlib.Path) -> stack.WebhookProcess:
    """The no-op admission endpoint under the webhook's gunicorn (1 worker, 4 threads)."""
    ca = certs.CertificateAuthority.create("bench-proxy-ca")
    ca.issue("rt-bench", client=True).write(work / "rt.crt", work / "rt.key")
    (work / "ca.crt").write_bytes(ca.cert_pem)
    env = {
        "TETHER_RUNTIME_ID": "rt-bench",
        "TETHER_LISTENER_URL": "https://127.0.0.1:1",
        "TETHER_LISTENER_CA_FILE": str(work / "ca.crt"),
        "TETHER_CLIENT_CERT_FILE": str(work / "rt.crt"),
        "TETHER_CLIENT_KEY_FILE": str(work / "rt.key"),
        "TETHER_LOG_LEVEL": "WARNING",
        "PYTHONPATH": str(skeleton.REPO),
    }
    proc = stack.WebhookProcess(work, env)
    proc.command = [sys.executable, str(skeleton.REPO / "bench" / "webhook_noop_server.py")]
    return proc.start()


def window(port: int, ctx: ssl.SSLContext, bodies: list[bytes], n: int) -> list[float]:
    """``n`` sequential POSTs on one keep-alive connection (a warm-up request first); seconds
    each."""
    conn = http.client.HTTPSConnection("127.0.0.1", port, context=ctx, timeout=30)
    out: list[float] = []
    try:
        for i in range(n + 1):
            t0 = time.perf_counter()
            conn.request(
                "POST", "/validate", bodies[i % len(bodies)], {"Content-Type": "application/json"}
            )
            resp = conn.getresponse()
            resp.read()
            if resp.status != 200:
                raise AssertionError(f"port {port}: HTTP {resp.status}")
            if i:
                out.append(time.perf_counter() - t0)
    finally:
        conn.close()
    return out


def dist(xs: list[float]) -> dict[str, float]:
    s = sorted(xs)
    return {
        "n": len(s),
        "p50_ms": round(1000 * s[len(s) // 2], 3),
        "p99_ms": round(1000 * s[min(len(s) - 1, int(len(s) * 0.99))], 3),
        "max_ms": round(1000 * s[-1], 3),
    }


def report(doc: dict[str, Any]) -> None:
    paths = doc["paths"]
    direct = paths["direct"]
    print(
        f"{'path':28s} {'n':>5s} {'p50 ms':>8s} {'p99 ms':>8s} {'max ms':>8s} {'p50/direct':>10s} "
        f"{'p99/direct':>10s}"
    )
    for name, d in paths.items():
        print(
            f"{name:28s} {d['n']:5d} {d['p50_ms']:8.2f} {d['p99_ms']:8.2f} {d['max_ms']:8.2f} "
            f"{d['p50_ms'] / direct['p50_ms']:10.2f} {d['p99_ms'] / direct['p99_ms']:10.2f}"
        )
    print(provenance.footer(doc))


def main() -> int:
    ap = skeleton.options("service_proxy", __doc__, raw=True)
    ap.add_argument("--requests", type=int, default=200, help="per path and round")
    ap.add_argument("--rounds", type=int, default=5, help="alternating windows")
    ap.add_argument(
        "--before", help="also measure the proxy of this commit (e.g. the one before the fix)"
    )
    args = skeleton.parse(ap, report)
    began = provenance.start()
    bodies = [review(f"cm-{k % 50}", k) for k in range(200)]
    lat: dict[str, list[float]] = {}
    with tempfile.TemporaryDirectory(prefix="bench-proxy-") as tmp:
        work = pathlib.Path(tmp)
        srv = server(work)
        proxies: list[Any] = []
        try:
            ports = {"direct": srv.port}
            classes = {"proxy": serviceproxy.Proxy}
            if args.before:
                classes[f"proxy@{args.before}"] = old_proxy(args.before, work)
            for name, cls in classes.items():
                p = cls("bench", "127.0.0.1", controlplane.free_port())
                p.backends = [("127.0.0.1", srv.port)]
                proxies.append(p)
                ports[name] = p.port
            ctx = srv.context()
            for r in range(args.rounds):
                order = list(ports) if r % 2 == 0 else list(reversed(ports))
                for name in order:
                    xs = window(ports[name], ctx, bodies, args.requests)
                    lat.setdefault(name, []).extend(xs)
                    print(f"round {r + 1} {name:22s} p50 {dist(xs)['p50_ms']:7.2f} ms", flush=True)
        finally:
            for p in proxies:
                p.close()
            srv.stop()
    doc = skeleton.write(
        args.out,
        "service_proxy",
        began,
        {"settings": skeleton.settings(args), "paths": {name: dist(lat[name]) for name in ports}},
    )
    print()
    report(doc)
    return 0


if __name__ == "__main__":
    sys.exit(main())
