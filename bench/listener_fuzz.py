"""Longer stateful schemathesis run against the listener (the test suite's is short).

Starts one KCP control plane, the RuntimeConfigMap and Kyma stand-in CRDs, a Kyma CR and
the listener (gunicorn, mTLS, the least-privilege Role), then runs the state machine of
``tests/listener/test_schemathesis.py`` (POST changes, then GET state through the
document's link; checks: not_a_server_error, status_code_conformance,
content_type_conformance, response_schema_conformance) for ``--examples`` scenarios of up
to ``--steps`` calls each. Prints a table of answers by operation and status and writes
bench/results/listener_fuzz.json (``--out``) with the commit, load average and command
(bench/provenance.py). Exits 1 when schemathesis found a failure.

    .venv/bin/python bench/listener_fuzz.py [--examples 300] [--steps 10]
    .venv/bin/python bench/listener_fuzz.py --report [--out FILE]   # docs/performance.md's table
"""

from __future__ import annotations

import os
import pathlib
import sys
import tempfile
import time
import traceback
from typing import Any

import provenance
import skeleton

from testing import controlplane
from testing import listenerenv as lt
from testing import schemafuzz as st


def table(doc: dict[str, Any]) -> str:
    """docs/performance.md's table: answers by operation (POST first) and status."""
    counts: dict[str, dict[str, int]] = {}
    for key, n in doc["statuses"].items():
        op, status = key.rsplit(" ", 1)
        counts.setdefault(op, {})[status] = n
    statuses = sorted({s for by in counts.values() for s in by}, key=int)
    lines = ["| operation | " + " | ".join(statuses) + " |", "|---|" + "---:|" * len(statuses)]
    for op in sorted(counts, reverse=True):
        lines.append(
            f"| {op} | " + " | ".join(str(counts[op].get(s, "—")) for s in statuses) + " |"
        )
    return "\n".join(lines)


def report(doc: dict[str, Any]) -> None:
    skeleton.report(doc, table(doc))


def main() -> int:
    ap = skeleton.options("listener_fuzz")
    ap.add_argument("--examples", type=int, default=300)
    ap.add_argument("--steps", type=int, default=10)
    args = skeleton.parse(ap, report)
    began = provenance.start()
    started = time.monotonic()
    load_before = os.getloadavg()[0]
    failure = ""
    with (
        tempfile.TemporaryDirectory(prefix="tether-bench-") as tmp,
        controlplane.ControlPlane("kcp") as kcp,
    ):
        d = pathlib.Path(tmp)
        api = kcp.api_client()
        controlplane.install_crds(api, controlplane.KYMA_CRD, *lt.CRD_FILES)
        env = lt.make_env(kcp, api, d, "bench")
        rt = lt.add_runtime(env, "rt-fuzz", "c-fuzz.kyma.example.com")
        proc = lt.ListenerProcess(env, "fuzz", TETHER_LISTENER_AUDIT_LOG=str(d / "audit.jsonl"))
        statuses: dict[str, int] = {}
        t0 = time.monotonic()
        try:
            statuses = st.run(proc, rt, args.examples, args.steps, statuses)
        except Exception as e:  # noqa: BLE001 - schemathesis' FailureGroup and friends: reported
            failure = "".join(traceback.format_exception_only(type(e), e))[-4000:]
        seconds = time.monotonic() - t0
        unexpected = "unexpected error" in proc.log_file.read_text()
        proc.stop()
    calls = sum(statuses.values())
    server_errors = sum(n for k, n in statuses.items() if int(k.rsplit(" ", 1)[1]) >= 500)
    print(f"{'operation':<45} {'status':>6} {'answers':>8}")
    for key in sorted(statuses):
        op, status = key.rsplit(" ", 1)
        print(f"{op:<45} {status:>6} {statuses[key]:>8}")
    print(f"{'total':<45} {'':>6} {calls:>8}")
    print(
        f"examples {args.examples}, steps <= {args.steps}, {seconds:.0f} s, 5xx {server_errors}, "
        f"failure: {failure.splitlines()[0] if failure else 'none'}"
    )
    doc = {
        "machine": skeleton.machine(load_before=round(load_before, 2)),
        "examples": args.examples,
        "max_steps": args.steps,
        "calls": calls,
        "seconds": round(seconds, 1),
        "total_seconds": round(time.monotonic() - started, 1),
        "checks": [c.__name__ for c in st.CHECKS],
        "statuses": dict(sorted(statuses.items())),
        "server_errors": server_errors,
        "unexpected_errors_logged": unexpected,
        "failure": failure,
    }
    doc = skeleton.write(args.out, "listener_fuzz", began, doc)
    report(doc)
    return 1 if failure or server_errors or unexpected else 0


if __name__ == "__main__":
    sys.exit(main())
