"""CPU placement for benchmarks (testing/cpuset.py): a process placed in the part's cpuset
runs only on the part's core, its children too, and closing the placement puts every member
back on all cpus and removes the sets.

Needs a writable cgroup v1 cpuset hierarchy and two cores: without them the test fails,
saying why (a bench there records "placement: none (reason)")."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys
import time

import pytest

from testing import cpuset

pytestmark = pytest.mark.processes  # starts processes of its own (testing/tiers.py)

SPIN = (
    "import os, sys, time\n"
    "if sys.argv[1] == 'fork':\n"
    "    sys.stdin.readline()\n"
    "    os.fork()\n"
    "end = time.time() + 60\n"
    "while time.time() < end:\n"
    "    pass\n"
)


# -- the decisions, on plain data -------------------------------------------------------


def test_cpu_lists_as_the_kernel_writes_them() -> None:
    assert cpuset.parse_cpus("0-1\n") == {0, 1}
    assert cpuset.parse_cpus("0,2-4,7") == {0, 2, 3, 4, 7}
    assert cpuset.parse_cpus("") == set()
    assert cpuset.format_cpus({3, 0, 1}) == "0,1,3"
    assert cpuset.split_cpus({0, 1}) == ({1}, {0})
    assert cpuset.split_cpus({0, 1, 2, 3}) == ({3}, {0, 1, 2})
    assert cpuset.split_cpus({0}) is None


def test_none_says_why() -> None:
    p = cpuset.placement("none")
    assert p.describe() == {"kind": "none", "reason": "asked for (--placement none)"}
    assert p.text() == "placement: none (asked for (--placement none))"
    p.close()  # nothing to undo


# -- on this machine ----------------------------------------------------------------------


def _allowed(pid: int) -> str:
    for line in pathlib.Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("Cpus_allowed_list:"):
            return line.split(":", 1)[1].strip()
    raise AssertionError(f"no Cpus_allowed_list for {pid}")


def _last_cpu(pid: int) -> int:
    """The cpu the process last ran on (field 39 of /proc/<pid>/stat)."""
    fields = pathlib.Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[36])


def _forked(pid: int) -> list[int]:
    deadline = time.monotonic() + 30
    while True:
        pids = [p for p in cpuset.descendants(pid) if p != pid]
        if pids or time.monotonic() > deadline:
            return pids
        time.sleep(0.05)


def test_a_placed_process_runs_only_on_its_core() -> None:
    placement = cpuset.split("test")
    if placement.kind != "split":
        pytest.fail(f"no cpuset placement on this machine: {placement.reason}")
    assert placement.part is not None and placement.generator is not None
    everything = os.sched_getaffinity(0)
    (part_cpu,) = placement.part.cpus
    procs: list[subprocess.Popen[bytes]] = []
    try:
        spinner = subprocess.Popen([sys.executable, "-c", SPIN, "plain"])
        procs.append(spinner)
        time.sleep(0.5)  # running before it is placed, as a started listener
        placement.to_part(spinner.pid)
        parent = subprocess.Popen([sys.executable, "-c", SPIN, "fork"], stdin=subprocess.PIPE)
        procs.append(parent)
        placement.to_generator(parent.pid)
        assert parent.stdin is not None
        parent.stdin.write(b"go\n")  # it forks after it was placed
        parent.stdin.close()
        forked = _forked(parent.pid)
        assert len(forked) == 1, forked
        assert placement.part.pids() == [spinner.pid]
        assert sorted(placement.generator.pids()) == sorted([parent.pid, *forked])
        assert _allowed(spinner.pid) == str(part_cpu)
        assert os.sched_getaffinity(spinner.pid) == {part_cpu}
        for pid in (parent.pid, *forked):
            assert os.sched_getaffinity(pid) == placement.generator.cpus
        seen: dict[int, set[int]] = {pid: set() for pid in (spinner.pid, parent.pid, *forked)}
        for _ in range(40):  # 2 s of samples of where each one ran
            for pid, cpus in seen.items():
                cpus.add(_last_cpu(pid))
            time.sleep(0.05)
        print(f"{placement.text()}; ran on: {seen}")
        assert seen[spinner.pid] == {part_cpu}
        assert all(seen[p] <= placement.generator.cpus for p in (parent.pid, *forked))
        dirs = [placement.part.path, placement.generator.path]
        placement.close()
        assert not any(d.exists() for d in dirs)
        assert os.sched_getaffinity(spinner.pid) == everything  # back on every cpu
    finally:
        placement.close()
        for p in procs:
            for pid in cpuset.descendants(p.pid)[::-1]:
                os.kill(pid, 9)
            p.wait(10)
