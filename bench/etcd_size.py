"""Benchmark: what the listener's records cost the KCP's etcd, per record and for a fleet.

Starts one KCP control plane (real etcd and kube-apiserver), installs the listener's CRDs,
and per variant creates N records (default 10,000) into a namespace of their own, as the
listener stores them (``listener.storage.records.body``: its labels, annotations and spec),
through the API server with 8 concurrent writers. Before and after each variant etcd is
compacted to its current revision and defragmented, and ``etcdctl endpoint status`` gives
the database's size in use; the difference over N is the etcd bytes per record. The
baseline is the plain size of the same objects: the JSON the API server is sent (a
custom resource is stored as JSON; what etcd adds is its key, the API server's metadata
(uid, resourceVersion, managedFields) and the B-tree's pages), so ratio = etcd bytes per
record / JSON bytes per record.

Variants (the send modes of docs/watches.md):

  full       16 values of ~50 bytes each (a typical configuration ConfigMap, ~1 KiB of data)
  digest     the same 16 keys, each value a sha256 digest (a Secret under a digest Watch)
  metadata   labels and annotations only, no value
  tombstone  a deleted object's record

Then the fleet's worth: records per runtime x runtimes for the KCP budget the listener's
quota defaults are derived from (docs/performance.md, "KCP storage"). Prints a table and
writes bench/results/etcd_size.json (commit, load average, command).

    .venv/bin/python bench/etcd_size.py [--records 10000] [--threads 8]
    .venv/bin/python bench/etcd_size.py --report     # the table again, from the JSON
"""

from __future__ import annotations

import concurrent.futures
import hashlib
import json
import subprocess
import sys
import time
from typing import Any

import provenance
import skeleton
from kubernetes import client

from listener import settings as listener_settings
from listener.storage import records
from testing import controlplane
from testing import listenerenv as lt
from tether.kube import apitypes
from tether.wire import conversion, storagebudget

VARIANTS = ("full", "digest", "metadata", "tombstone")


def _record(variant: str, i: int) -> dict[str, Any]:
    meta = {
        "namespace": f"team-{i % 50}",
        "name": f"settings-{i:06d}",
        "uid": f"u-{i}",
        "resourceVersion": str(1000 + i),
        "labels": {"app": "shop", "tier": "web"},
    }
    if variant == "tombstone":
        return dict(
            conversion.tombstone(
                runtime_id="rt-bench",
                namespace=meta["namespace"],
                name=meta["name"],
                uid=meta["uid"],
                resource_version=meta["resourceVersion"],
                source="webhook",
            )
        )
    values = {f"key-{k}": f"value-{i}-{k}-" + "x" * 40 for k in range(16)}
    if variant == "digest":
        values = {k: "sha256:" + hashlib.sha256(v.encode()).hexdigest() for k, v in values.items()}
    data = {} if variant == "metadata" else values
    return dict(
        conversion.from_configmap(
            {"metadata": meta, "data": data}, runtime_id="rt-bench", source="webhook"
        )
    )


def _etcd(plane: controlplane.ControlPlane, *args: str) -> str:
    tool = controlplane.binaries() / "etcdctl"
    done = subprocess.run(
        [str(tool), f"--endpoints=http://127.0.0.1:{plane.etcd_port}", *args],
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    return done.stdout


def _in_use(plane: controlplane.ControlPlane) -> int:
    """etcd's database size in use, after compacting to the current revision and a defrag."""
    status = json.loads(_etcd(plane, "endpoint", "status", "-w", "json"))[0]["Status"]
    _etcd(plane, "compact", str(status["header"]["revision"]))
    _etcd(plane, "defrag")
    status = json.loads(_etcd(plane, "endpoint", "status", "-w", "json"))[0]["Status"]
    return int(status.get("dbSizeInUse") or status["dbSize"])


def _variant(
    plane: controlplane.ControlPlane, api: client.ApiClient, variant: str, n: int, threads: int
) -> dict[str, Any]:
    ns = f"size-{variant}"
    client.CoreV1Api(api).create_namespace({"metadata": {"name": ns}})
    bodies = [records.body(_record(variant, i), ns) for i in range(n)]
    json_bytes = sum(len(json.dumps(b, separators=(",", ":"))) for b in bodies)
    co = client.CustomObjectsApi(api)
    r = apitypes.RUNTIME_CONFIGMAPS
    before = _in_use(plane)
    t0 = time.monotonic()
    with concurrent.futures.ThreadPoolExecutor(threads) as pool:
        list(
            pool.map(
                lambda b: co.create_namespaced_custom_object(r.group, r.version, ns, r.plural, b),
                bodies,
            )
        )
    secs = time.monotonic() - t0
    after = _in_use(plane)
    per = (after - before) / n
    return {
        "variant": variant,
        "records": n,
        "json_bytes_per_record": round(json_bytes / n),
        "etcd_bytes_per_record": round(per),
        "ratio": round(per / (json_bytes / n), 2),
        "create_seconds": round(secs, 1),
    }


def _fleet(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The fleet the quota defaults allow, at the measured cost of a full record."""
    s = listener_settings.Storage()
    full = max(r["etcd_bytes_per_record"] for r in rows)
    return {
        "quota_records_per_runtime": s.quota_records,
        "runtimes": storagebudget.RUNTIMES,
        "kcp_budget_bytes": storagebudget.records_bytes(),
        "etcd_bytes_per_record_assumed": storagebudget.ETCD_BYTES_PER_RECORD,
        "etcd_bytes_fleet_at_quota": full * s.quota_records * storagebudget.RUNTIMES,
    }


def _print(doc: dict[str, Any]) -> None:
    print(
        f"{'variant':<10} {'records':>8} {'JSON B/rec':>11} {'etcd B/rec':>11} {'ratio':>6} "
        f"{'create s':>9}"
    )
    for r in doc["rows"]:
        print(
            f"{r['variant']:<10} {r['records']:>8} {r['json_bytes_per_record']:>11} "
            f"{r['etcd_bytes_per_record']:>11} {r['ratio']:>6.2f} {r['create_seconds']:>9.1f}"
        )
    f = doc["fleet"]
    gib = 1024**3
    print(
        f"\nfleet: {f['runtimes']} runtimes x {f['quota_records_per_runtime']} records (the quota "
        "default) at the largest cost measured = "
        f"{f['etcd_bytes_fleet_at_quota'] / gib:.2f} GiB of etcd; "
        f"budget {f['kcp_budget_bytes'] / gib:.2f} GiB (tether/wire/storagebudget.py assumes "
        f"{f['etcd_bytes_per_record_assumed']} B per record)"
    )
    print(provenance.footer(doc))


def main() -> int:
    ap = skeleton.options("etcd_size", __doc__, raw=True)
    ap.add_argument("--records", type=int, default=10_000)
    ap.add_argument("--threads", type=int, default=8)
    args = skeleton.parse(ap, _print)
    began = provenance.start()
    with controlplane.planes("etcd-size") as planes:
        plane = planes["etcd-size"]
        api = plane.api_client()
        lt.install_crd(api)
        rows = [_variant(plane, api, v, args.records, args.threads) for v in VARIANTS]
    doc = skeleton.write(
        args.out,
        "etcd_size",
        began,
        {"kubernetes": controlplane.kube_apiserver_version(), "rows": rows, "fleet": _fleet(rows)},
    )
    _print(doc)
    return 0


if __name__ == "__main__":
    sys.exit(main())
