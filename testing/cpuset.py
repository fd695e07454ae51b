"""CPU placement for benchmarks: the part under test and the load generator on separate
cores, with cgroup v1 cpusets (``/sys/fs/cgroup/cpuset``), so that a generator's CPU is not
the part's latency.

    placement = cpuset.split()               # "split": part on the last core,
                                             # generator on the others
    try:
        placement.generator.add(os.getpid()) # this process and what it starts from now on
        placement.part.add_tree(listener_pid)   # a running process and all its descendants
        doc["placement"] = placement.describe()
    finally:
        placement.close()                    # members back to the root cpuset, groups removed

A process moved into a cpuset gets its CPU affinity narrowed to the set's cpus by the kernel
(``sched_getaffinity``, ``Cpus_allowed_list`` in /proc/<pid>/status); children forked later
inherit the set. A machine without a writable cpuset hierarchy, or with a single core, gets
``Placement("none", reason)``: the bench records it and runs unpinned. Groups live under
``tether-bench`` at the root of the cpuset hierarchy (one per bench process: pid in the name).
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import os
import pathlib
from typing import Any

PARENT = "tether-bench"
KINDS = ("split", "none")


def parse_cpus(text: str) -> set[int]:
    """``0-2,5`` -> {0, 1, 2, 5} (the kernel's list format)."""
    out: set[int] = set()
    for part in text.strip().split(","):
        if not part:
            continue
        lo, _, hi = part.partition("-")
        out.update(range(int(lo), int(hi or lo) + 1))
    return out


def format_cpus(cpus: set[int]) -> str:
    return ",".join(str(c) for c in sorted(cpus))


def split_cpus(cpus: set[int]) -> tuple[set[int], set[int]] | None:
    """(part, generator): the part gets the last core, the generator the others; None with
    fewer than two cores."""
    if len(cpus) < 2:
        return None
    last = max(cpus)
    return {last}, cpus - {last}


def cpuset_root() -> pathlib.Path | None:
    """The mount point of the cgroup v1 cpuset hierarchy, if there is one."""
    with open("/proc/self/mounts") as f:
        for line in f:
            _, point, kind, options, *_ = line.split()
            if kind == "cgroup" and "cpuset" in options.split(","):
                return pathlib.Path(point)
    return None


def descendants(pid: int) -> list[int]:
    """``pid`` and every process below it (``/proc/<pid>/task/*/children``)."""
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        with contextlib.suppress(OSError):
            for task in pathlib.Path(f"/proc/{p}/task").iterdir():
                with contextlib.suppress(OSError):
                    todo.extend(int(c) for c in (task / "children").read_text().split())
    return out


class CpuSet:
    """One child cpuset with its cpus (and the parent's memory nodes)."""

    def __init__(self, path: pathlib.Path, cpus: set[int], mems: str) -> None:
        self.path, self.cpus = path, cpus
        path.mkdir(exist_ok=True)
        try:
            (path / "cpuset.cpus").write_text(format_cpus(cpus))  # cpus and mems before any task
            (path / "cpuset.mems").write_text(mems)
        except OSError:
            path.rmdir()
            raise

    def add(self, pid: int) -> None:
        """Move a process (all its threads: ``cgroup.procs``) into the set."""
        with contextlib.suppress(ProcessLookupError):  # gone meanwhile: nothing to place
            (self.path / "cgroup.procs").write_text(str(pid))

    def add_tree(self, pid: int) -> None:
        """A running process and all its descendants (gunicorn's workers, a plane's etcd)."""
        for p in descendants(pid):
            self.add(p)

    def pids(self) -> list[int]:
        with contextlib.suppress(FileNotFoundError):
            return sorted(int(p) for p in (self.path / "cgroup.procs").read_text().split())
        return []

    def remove(self, root: pathlib.Path) -> None:
        """Members back to ``root`` (the hierarchy's root cpuset: every cpu), then the set."""
        for pid in self.pids():
            with contextlib.suppress(ProcessLookupError):
                (root / "cgroup.procs").write_text(str(pid))
        with contextlib.suppress(FileNotFoundError):
            self.path.rmdir()


@dataclasses.dataclass
class Placement:
    kind: str  # "split" or "none"
    reason: str = ""  # why "none"
    part: CpuSet | None = None
    generator: CpuSet | None = None
    root: pathlib.Path | None = None

    def describe(self) -> dict[str, Any]:
        """What a bench's JSON records."""
        if self.part is None or self.generator is None:
            return {"kind": "none", "reason": self.reason}
        return {
            "kind": "split",
            "part_cpus": format_cpus(self.part.cpus),
            "generator_cpus": format_cpus(self.generator.cpus),
            "others": "unpinned (all cpus)",
        }

    def text(self) -> str:
        d = self.describe()
        if d["kind"] == "none":
            return f"placement: none ({d['reason']})"
        return (
            f"placement: split (part on cpu {d['part_cpus']}, "
            f"generator on cpu {d['generator_cpus']})"
        )

    def to_part(self, pid: int) -> None:
        if self.part is not None:
            self.part.add_tree(pid)

    def to_generator(self, pid: int) -> None:
        if self.generator is not None:
            self.generator.add_tree(pid)

    def close(self) -> None:
        if self.root is None:
            return
        for s in (self.part, self.generator):
            if s is not None:
                s.remove(self.root)
        with contextlib.suppress(OSError):  # another bench's sets still there: keep the parent
            (self.root / PARENT).rmdir()


def split(name: str = "") -> Placement:
    """The split placement if this machine allows it, else ``Placement("none", reason)``."""
    root = cpuset_root()
    made: Placement | None = None
    if root is None:
        return Placement("none", "no cgroup v1 cpuset hierarchy mounted")
    try:
        cpus = parse_cpus(
            (root / "cpuset.effective_cpus").read_text()
            if (root / "cpuset.effective_cpus").exists()
            else (root / "cpuset.cpus").read_text()
        )
        halves = split_cpus(cpus & os.sched_getaffinity(0))
        if halves is None:
            return Placement("none", f"one cpu only ({format_cpus(cpus)})")
        mems = (root / "cpuset.mems").read_text().strip()
        parent = root / PARENT
        parent.mkdir(exist_ok=True)
        if not os.access(parent, os.W_OK):
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(parent))
        (parent / "cpuset.cpus").write_text(format_cpus(cpus))
        (parent / "cpuset.mems").write_text(mems)
        tag = f"{name or 'bench'}-{os.getpid()}"
        made = Placement("split", "", root=root)
        made.part = CpuSet(parent / f"{tag}-part", halves[0], mems)
        made.generator = CpuSet(parent / f"{tag}-generator", halves[1], mems)
    except OSError as e:
        if made is not None:
            made.close()  # a set made before the failure
        return Placement("none", f"cpuset not writable: {e.strerror} ({e.filename})")
    return made


def placement(kind: str, name: str = "") -> Placement:
    """``--placement split|none``: split where the machine allows it."""
    if kind == "none":
        return Placement("none", "asked for (--placement none)")
    return split(name)
