"""The pod runner enforces ``resources.limits`` as a kubelet does (testing/cgroups.py): a
leaky container with a 64Mi limit is OOM-killed by the kernel, reported as ``OOMKilled``
(in the runner's table and the Pod's ``lastState``) and restarted with the doubling backoff;
a spinning container with a 100m CPU limit gets about a tenth of a core.

These tests need writable cgroups (v1 memory and cpu, or v2 with both controllers): without
them they fail, saying why, unless ``TETHER_PODRUNNER_LIMITS=off`` says on purpose that
limits are not enforced on this machine (then they are skipped with that reason)."""

from __future__ import annotations

import os
import pathlib
import time
from collections.abc import Callable
from typing import Any

import pytest
from kubernetes import client

from testing import cgroups, controlplane, podrunner

pytestmark = pytest.mark.processes  # starts processes of its own (testing/tiers.py)

LEAKY = controlplane.REPO_ROOT / "standins" / "leaky.py"
TICKS = os.sysconf("SC_CLK_TCK")


# -- the decisions, on plain data -------------------------------------------------------


def test_quantities_as_kubernetes_writes_them() -> None:
    assert cgroups.parse_memory("768Mi") == 768 << 20
    assert cgroups.parse_memory("1Gi") == 1 << 30
    assert cgroups.parse_memory("500M") == 500_000_000
    assert cgroups.parse_memory(1048576) == 1048576
    assert cgroups.parse_cpu("500m") == 500
    assert cgroups.parse_cpu("2") == 2000
    assert cgroups.parse_cpu("0.25") == 250
    for bad in ("12x", "-1Mi", "1m", ""):
        with pytest.raises(cgroups.Invalid):
            cgroups.parse_memory(bad)
    with pytest.raises(cgroups.Invalid):
        cgroups.parse_cpu("1Gi")


def test_limits_become_cgroup_files() -> None:
    spec = {"resources": {"requests": {"cpu": "50m"}, "limits": {"memory": "768Mi", "cpu": "500m"}}}
    limits = cgroups.limits_of(spec)
    assert limits == cgroups.Limits(768 << 20, 500, "memory 768Mi, cpu 500m")
    assert cgroups.v1_files(limits, memsw=True) == {
        ("memory", "memory.limit_in_bytes"): str(768 << 20),
        ("memory", "memory.memsw.limit_in_bytes"): str(768 << 20),
        ("cpu", "cpu.cfs_period_us"): "100000",
        ("cpu", "cpu.cfs_quota_us"): "50000",
    }
    assert cgroups.v2_files(limits) == {
        "memory.max": str(768 << 20),
        "memory.swap.max": "0",
        "cpu.max": "50000 100000",
    }
    none = cgroups.limits_of({"resources": {"requests": {"memory": "1Gi"}}})
    assert none.text == "no limits"
    assert cgroups.v1_files(none, memsw=False)[("memory", "memory.limit_in_bytes")] == "-1"
    assert cgroups.v1_files(none, memsw=False)[("cpu", "cpu.cfs_quota_us")] == "-1"
    assert cgroups.v2_files(none)["cpu.max"] == "max 100000"
    tiny = cgroups.limits_of({"resources": {"limits": {"cpu": "1m"}}})
    assert (
        cgroups.v1_files(tiny, memsw=False)[("cpu", "cpu.cfs_quota_us")] == "1000"
    )  # the kernel's minimum
    assert (
        cgroups.Support(1, "").describe(limits)
        == "resources: enforced (cgroup v1: memory 768Mi, cpu 500m)"
    )
    assert cgroups.Support(None, "x").describe(limits) == "resources: not enforced (x)"


def test_oom_kills_are_read_from_either_version() -> None:
    assert (
        cgroups.count_oom_kills("oom_kill_disable 0\nunder_oom 0\noom_kill 3\n") == 3
    )  # v1 oom_control
    assert (
        cgroups.count_oom_kills("low 0\nhigh 0\nmax 9\noom 2\noom_kill 2\noom_group_kill 0\n") == 2
    )  # v2
    assert cgroups.count_oom_kills("oom_kill_disable 0\nunder_oom 0\n") == 0  # an old kernel


def test_backoff_doubles_from_the_base_to_five_minutes() -> None:
    assert [podrunner.backoff_delay(10, n) for n in range(7)] == [10, 20, 40, 80, 160, 300, 300]


def test_off_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(cgroups.ENV, "off")
    support = cgroups.detect()
    assert not support.enforced
    assert support.describe(cgroups.Limits()) == f"resources: not enforced ({cgroups.ENV}=off)"


# -- enforced, on a real plane ------------------------------------------------------------


@pytest.fixture
def enforced() -> cgroups.Support:
    support = cgroups.detect()
    if os.environ.get(cgroups.ENV, "").lower() == "off":
        pytest.skip(f"{cgroups.ENV}=off: limits are not enforced on this machine, on purpose")
    assert support.enforced, (
        f"the pod runner cannot enforce limits here: {support.reason} "
        f"(set {cgroups.ENV}=off to run the suite without them)"
    )
    return support


def deployment(name: str, args: list[str], limits: dict[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {
                    "automountServiceAccountToken": False,
                    "terminationGracePeriodSeconds": 2,
                    "containers": [
                        {
                            "name": name,
                            "image": "tether:test",
                            "command": ["python", str(LEAKY), *args],
                            "resources": {"requests": limits, "limits": limits},
                        }
                    ],
                },
            },
        },
    }


def wait(
    what: str, check: Callable[[], bool], runner: podrunner.PodRunner, timeout: float = 120.0
) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(
                f"{what}: not within {timeout:.0f}s\n{runner.table()}\n{runner.tail_logs()}"
            )
        time.sleep(0.2)


def test_a_leaky_container_is_oom_killed_and_restarted_with_backoff(
    enforced: cgroups.Support,
    kcp: controlplane.ControlPlane,
    kcp_api: client.ApiClient,
    kcp_namespace: str,
    tmp_path: pathlib.Path,
) -> None:
    body: Any = deployment("leaky", ["memory", "8"], {"memory": "64Mi"})
    client.AppsV1Api(kcp_api).create_namespaced_deployment(kcp_namespace, body)
    with podrunner.running(kcp, kcp_namespace, tmp_path, backoff_seconds=1.0) as runner:
        wait(
            "three OOM kills",
            lambda: any(c.restarts >= 3 for p in runner.pods_of("leaky") for c in p.containers),
            runner,
        )
        pod = runner.pods_of("leaky")[0]
        c = pod.containers[0]
        assert c.last_reason == "OOMKilled" and c.last_exit == -9, runner.table()
        assert c.delays[:3] == [1.0, 2.0, 4.0]  # the kubelet's backoff, doubling from the base
        assert c.group is not None
        assert c.group.oom_kills() >= 3
        peak = c.group.peak_memory()
        assert peak is None or peak <= 64 << 20  # never above its limit
        if enforced.version == 1:
            assert c.group.read("memory.limit_in_bytes") == str(64 << 20)
        else:
            assert c.group.read("memory.max") == str(64 << 20)
        held = [
            int(line.split()[2])
            for line in c.log_path.read_text().splitlines()
            if line.startswith("leaky: holding")
        ]
        assert held and max(held) < 64  # killed before it held its limit
        table = runner.table()
        assert "last OOMKilled" in table
        assert (
            f"container 'leaky'.resources: enforced (cgroup v{enforced.version}: memory 64Mi)"
            in table
        )
        assert "not enforced" not in table

        # the Pod's status says it as a kubelet would
        def reported() -> bool:
            st: Any = (
                client.CoreV1Api(kcp_api).read_namespaced_pod_status(pod.name, kcp_namespace).status
            )
            cs = (st.container_statuses or [None])[0]
            term = cs and cs.last_state and cs.last_state.terminated
            return bool(
                term
                and term.reason == "OOMKilled"
                and term.exit_code == 137
                and cs.restart_count >= 1
            )

        wait(
            "lastState.terminated.reason OOMKilled in the Pod's status",
            reported,
            runner,
            timeout=30,
        )
        dirs = list(c.group.dirs.values())
    assert not any(d.exists() for d in dirs)  # the pod stopped: its cgroups are gone


def _cpu_seconds(pid: int) -> float:
    fields = pathlib.Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS  # utime, stime


def test_a_spinning_container_gets_its_cpu_quota(
    enforced: cgroups.Support,
    kcp: controlplane.ControlPlane,
    kcp_api: client.ApiClient,
    kcp_namespace: str,
    tmp_path: pathlib.Path,
) -> None:
    body: Any = deployment("spinner", ["cpu"], {"cpu": "100m"})
    client.AppsV1Api(kcp_api).create_namespaced_deployment(kcp_namespace, body)
    with podrunner.running(kcp, kcp_namespace, tmp_path) as runner:

        def spinning() -> bool:
            pods = runner.pods_of("spinner")
            return bool(pods) and "leaky: spinning" in runner.logs("spinner")

        wait("the spinner running", spinning, runner)
        c = runner.pods_of("spinner")[0].containers[0]
        assert c.popen is not None and c.group is not None
        assert c.popen.pid in c.group.pids()  # the container's process itself, not a wrapper
        if enforced.version == 1:
            assert (
                c.group.read("cpu.cfs_quota_us") == "10000"
                and c.group.read("cpu.cfs_period_us") == "100000"
            )
        else:
            assert c.group.read("cpu.max") == "10000 100000"
        cpu0, t0 = _cpu_seconds(c.popen.pid), time.monotonic()
        time.sleep(5)
        share = (_cpu_seconds(c.popen.pid) - cpu0) / (time.monotonic() - t0)
        print(f"spinner with cpu 100m used {share:.1%} of a core over 5 s")
        assert 0.0 < share < 0.3, share  # about 10 %; unlimited it would take a whole core
        assert c.running and c.restarts == 0
