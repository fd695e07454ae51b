"""The injector against hostile tenants (issue 38), on the session's KCP plane, the injector
run as a process under its Deployment's container limit (``manifests/kcp/injector``:
memory 512Mi, a cgroup as the pod runner makes one, ``testing.cgroups``).

OFFENDERS runtimes (12; why not 50: below) fill their whole storage quota (the listener's
2 MiB) with records of 10,000 tiny keys under a Watch with inject: the shape that cost the
injector ~39 MB of RSS per runtime when it held the values (about 12 of them OOM-killed it at
512Mi). Beside them
HONEST runtimes store a few small ConfigMaps, written after the offenders so they queue
behind them. Shown: every honest runtime's values reach its Sample CR (and a later edit
too), every offender is refused alone and named (its target's ConfigurationInjected
condition says which bound, tether_injector_runtimes_refused counts them), none of an
offender's keys reaches any target, and the injector's memory peak stays under its limit
with no OOM kill. The records are written as the listener stores them (its size
annotation included).
"""

from __future__ import annotations

import concurrent.futures
import json
import pathlib
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client

from injector import merge
from listener.storage import records, rules
from testing import cgroups, controlplane, listenerenv, watchenv
from testing import loopenv as loop
from testing.injectorenv import GROUP, new_namespace
from tether.kube import apitypes
from tether.wire import storagebudget

pytestmark = pytest.mark.processes
DEPLOYMENT = controlplane.REPO_ROOT / "manifests" / "kcp" / "injector" / "deployment.yaml"
# the issue measured ~39 MB of RSS per such runtime while the injector held values: 12 of
# them OOM-killed it at 512Mi. 50 (as the issue asks) take ~4 min to write on the test
# planes (the API server validates 10,000-key maps at ~4 records/s): 12 show the same bound
OFFENDERS = 12
FLAT = 128 * 2**20  # the process (~60 MiB) and the read budget in Python (~40 MiB), with room
HONEST = 5
KEYS = 10_000  # per offender record: the listener's cap of a map, ten times the injector's


class ConfinedInjector(loop.InjectorProcess):
    """``tether injector`` in a cgroup with the Deployment's limits."""

    def __init__(
        self, workdir: pathlib.Path, name: str, env: dict[str, str], group: cgroups.Group | None
    ) -> None:
        super().__init__(workdir, name, env)
        self.group = group

    def start(self, timeout: float = 60.0) -> ConfinedInjector:
        argv = [sys.executable, "-m", "command.cli", "injector"]
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                self.group.wrap(argv) if self.group else argv,
                env=self.env,
                cwd=controlplane.REPO_ROOT,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                preexec_fn=controlplane.die_with_parent(),
            )
        loop.wait_until(
            self._healthy, timeout, f"the injector healthy:\n{self.log()}", interval=0.2
        )
        return self


def record_body(rt: str, watch: str, ns: str, name: str, data: dict[str, str]) -> dict[str, Any]:
    rec = {
        "runtimeId": rt,
        "watch": watch,
        "resource": {"group": "", "version": "v1", "kind": "ConfigMap"},
        "namespace": "app",
        "name": name,
        "uid": f"uid-{name}",
        "resourceVersion": "7",
        "observedAt": "2026-12-04T21:00:00Z",
        "deleted": False,
        "source": "webhook",
        "epoch": 0,
        "labels": {},
        "annotations": {},
        "data": data,
    }
    body = records.body(rec, ns)
    rules.annotate(body)  # the size the listener counts against the quota
    return body


def offender_records(rt: str, watch: str, ns: str) -> list[dict[str, Any]]:
    """As many 10,000-key records as fit the runtime's bytes quota."""
    data = {f"k{i:04d}": "" for i in range(KEYS)}
    out: list[dict[str, Any]] = []
    used = 0
    while True:
        body = record_body(rt, watch, ns, f"flood-{len(out):03d}", data)
        size = rules.stored_size(body["metadata"])
        if used + size > storagebudget.RECORD_BYTES_FLOOR:
            return out
        used += size
        out.append(body)


@pytest.fixture(scope="module")
def planes_ready(
    kcp: controlplane.ControlPlane, kcp_api: client.ApiClient
) -> Iterator[tuple[controlplane.ControlPlane, client.ApiClient]]:
    watchenv.install_crd(kcp_api)
    controlplane.install_crds(kcp_api, listenerenv.CRD_FILE, loop.sample_crd(GROUP))
    yield kcp, kcp_api


def test_offenders_at_their_quota_are_refused_alone_and_honest_runtimes_flow(
    planes_ready: tuple[controlplane.ControlPlane, client.ApiClient], tmp_path: pathlib.Path
) -> None:
    kcp, api = planes_ready
    ns, records_ns, target_ns = (new_namespace(api, p) for p in ("injh", "injhrec", "injhmod"))
    watch = f"injh-{uuid.uuid4().hex[:6]}"
    watchenv.apply(
        api,
        watchenv.watch(
            watch,
            loop.CM,
            ns,
            storage={"namespace": records_ns},
            inject={
                "resource": {"group": GROUP, "version": "v1", "resource": loop.SAMPLES},
                "namespace": target_ns,
                "field": "spec.configuration",
            },
        ),
    )
    co = client.CustomObjectsApi(api)
    offenders = [f"rt-off-{i:02d}-{uuid.uuid4().hex[:4]}" for i in range(OFFENDERS)]
    honest = [f"rt-ok-{i}-{uuid.uuid4().hex[:4]}" for i in range(HONEST)]
    for rt in offenders + honest:
        co.create_namespaced_custom_object(
            GROUP,
            "v1",
            target_ns,
            loop.SAMPLES,
            {
                "apiVersion": f"{GROUP}/v1",
                "kind": "Sample",
                "metadata": {
                    "name": loop.sample_name(rt),
                    "namespace": target_ns,
                    "labels": {apitypes.RUNTIME_ID_LABEL: rt},
                },
                "spec": {"replicas": 1},
            },
        )

    group = cgroups.confine(
        f"injector-hostile-{uuid.uuid4().hex[:6]}", cgroups.manifest_limits(DEPLOYMENT, "injector")
    )
    inj = ConfinedInjector(
        tmp_path,
        "hostile",
        {
            "TETHER_KCP_NAMESPACE": ns,
            "TETHER_INJECTOR_KUBECONFIG": str(kcp.kubeconfig),
            "TETHER_INJECTOR_LEASE_NAMESPACE": ns,
            "TETHER_INJECTOR_LEASE_SECONDS": "3",
            "TETHER_INJECTOR_WATCH_LIST_SECONDS": "1",
            "TETHER_INJECTOR_RESYNC_SECONDS": "30",
        },
        group,
    )
    r = apitypes.RUNTIME_CONFIGMAPS
    t0 = time.monotonic()
    try:
        inj.start()

        def put(body: dict[str, Any]) -> int:
            with kcp.api_client() as own:
                client.CustomObjectsApi(own).create_namespaced_custom_object(
                    r.group, r.version, records_ns, r.plural, body
                )
            return rules.stored_size(body["metadata"])

        flood = [b for rt in offenders for b in offender_records(rt, watch, records_ns)]
        with concurrent.futures.ThreadPoolExecutor(4) as pool:
            written = sum(pool.map(put, flood))
        t_flood = time.monotonic() - t0
        want: dict[str, dict[str, str]] = {}
        for i, rt in enumerate(honest):
            for name, data in (
                ("a", {"color": f"blue-{i}", "shared": "a"}),
                ("b", {"shared": "b", "size": "xl"}),
            ):
                put(record_body(rt, watch, records_ns, name, data))
            want[rt] = {"color": f"blue-{i}", "shared": "b", "size": "xl"}

        def configuration(rt: str) -> Any:
            return loop.configuration(api, target_ns, rt, GROUP)

        loop.wait_until(
            lambda: all(configuration(rt) == v for rt, v in want.items()),
            60,
            f"the honest runtimes' values in their CRs\n{inj.log()}",
            interval=0.5,
        )
        t_honest = time.monotonic() - t0

        def refused(rt: str) -> dict[str, Any] | None:
            obj = loop.sample(api, target_ns, rt, GROUP)
            return next(
                (
                    c
                    for c in (obj.get("status") or {}).get("conditions") or []
                    if c["type"] == merge.CONDITION and c["reason"] == "OverBounds"
                ),
                None,
            )

        loop.wait_until(
            lambda: all(refused(rt) for rt in offenders),
            60,
            f"every offender's condition\n{inj.log()}",
            interval=0.5,
        )
        loop.wait_until(
            lambda: (
                inj.metric("tether_injector_runtimes_refused", bound="keys_per_record") == OFFENDERS
            ),
            30,
            "the refused runtimes counted",
        )
        cond = refused(offenders[0])
        assert cond is not None and cond["status"] == "False"
        assert "10000 keys in one record" in cond["message"]
        assert "TETHER_INJECTOR_MAX_KEYS_PER_RECORD" in cond["message"]
        for rt in offenders:
            assert configuration(rt) is None  # nothing of an offender injected

        # the offenders refused, an honest edit still flows
        put_edit = record_body(honest[0], watch, records_ns, "c", {"late": "yes"})
        put(put_edit)
        want[honest[0]] = {**want[honest[0]], "late": "yes"}
        loop.wait_until(
            lambda: configuration(honest[0]) == want[honest[0]],
            30,
            f"an honest edit after the flood\n{inj.log()}",
            interval=0.2,
        )
        assert inj.get("/healthz")[0] == 200
        samples = json.dumps(co.list_namespaced_custom_object(GROUP, "v1", target_ns, loop.SAMPLES))
        assert '"k0000"' not in samples  # no offender key in any target
    finally:
        inj.stop()
        co.delete_collection_namespaced_custom_object(r.group, r.version, records_ns, r.plural)
        usage = group.usage() if group else None
        if group:
            group.remove()
    line = cgroups.held(usage, "the injector under the flood")
    print(
        f"{OFFENDERS} offenders: {len(flood)} records, {written / 2**20:.0f} MiB written in "
        f"{t_flood:.1f} s; honest values in {t_honest:.1f} s; {line}"
    )
    if usage is not None:
        assert usage.limits.memory is not None and usage.peak is not None
        # flat: what the offenders store is never held (12 x 39 MB when it was)
        assert usage.peak < FLAT < usage.limits.memory
