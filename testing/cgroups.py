"""Container limits as a kubelet enforces them: one cgroup per container of the pod runner
(``testing.podrunner``), with the container's ``resources.limits`` as a memory limit and a
CFS quota.

    support = cgroups.detect()            # cgroup v1 or v2, or why not (support.reason)
    group = cgroups.Group(support, "pod-abc_web", cgroups.limits_of(container_spec))
    argv = group.wrap(argv)               # the process joins the group before it execs
    ...
    group.oom_kills()                     # the kernel's OOM kills in the group so far
    group.remove()

cgroup v1 (a ``memory`` and a ``cpu`` hierarchy): ``memory.limit_in_bytes`` (and
``memory.memsw.limit_in_bytes`` when present, so swap does not stretch the limit),
``cpu.cfs_period_us``/``cpu.cfs_quota_us``; an OOM kill is counted in ``memory.oom_control``
(``oom_kill``). cgroup v2 (unified, the ``memory`` and ``cpu`` controllers enabled below the
root): ``memory.max``, ``memory.swap.max``, ``cpu.max``; OOM kills in ``memory.events``
(``oom_kill``). The groups live under ``tether-podrunner`` at the root of each hierarchy.

``TETHER_PODRUNNER_LIMITS=off`` turns enforcement off (``detect`` says so as its reason).

A part the tests run as a plain process (the listener's abuse tests) can be confined the same
way: ``confine(name, manifest_limits(deployment, "listener"))`` is a Group with the
manifest's limits (None when limits are off on purpose, ``NotEnforced`` when the machine
cannot), and ``held(group.usage(), what)`` after the run says its peak against the limit and
fails when the kernel OOM-killed anything in it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import os
import pathlib
import re
import signal
import time
from collections.abc import Mapping
from typing import Any

import yaml

PARENT = "tether-podrunner"
ENV = "TETHER_PODRUNNER_LIMITS"
CFS_PERIOD_US = 100_000
_MEMORY_SUFFIX = {
    "": 1,
    "k": 1000,
    "M": 1000**2,
    "G": 1000**3,
    "T": 1000**4,
    "Ki": 1024,
    "Mi": 1024**2,
    "Gi": 1024**3,
    "Ti": 1024**4,
}
_QUANTITY = re.compile(r"^([0-9]+(?:\.[0-9]+)?)(m|[kMGT]i?|)$")


class Invalid(ValueError):
    """A resources quantity the runner cannot read."""


class NotEnforced(RuntimeError):
    """Limits were asked for and this machine cannot enforce them (the reason)."""


def parse_memory(q: str | int) -> int:
    """Bytes of a Kubernetes memory quantity (``768Mi``, ``1Gi``, ``500M``, ``1048576``)."""
    m = _QUANTITY.match(str(q).strip())
    if not m or m.group(2) == "m":
        raise Invalid(f"memory quantity {q!r} is not understood")
    return int(float(m.group(1)) * _MEMORY_SUFFIX[m.group(2)])


def parse_cpu(q: str | int | float) -> int:
    """Millicores of a Kubernetes CPU quantity (``500m``, ``1``, ``0.25``)."""
    m = _QUANTITY.match(str(q).strip())
    if not m or m.group(2) not in ("", "m"):
        raise Invalid(f"cpu quantity {q!r} is not understood")
    value = float(m.group(1))
    return max(1, int(value if m.group(2) == "m" else value * 1000))


@dataclasses.dataclass(frozen=True)
class Limits:
    memory: int | None = None  # bytes
    cpu: int | None = None  # millicores
    text: str = "no limits"  # as the manifest says them: "memory 768Mi, cpu 500m"


def limits_of(container: Mapping[str, Any]) -> Limits:
    """The limits of a container spec (requests are for a scheduler: not applied)."""
    limits = (container.get("resources") or {}).get("limits") or {}
    memory = parse_memory(limits["memory"]) if "memory" in limits else None
    cpu = parse_cpu(limits["cpu"]) if "cpu" in limits else None
    words = [f"{k} {limits[k]}" for k in ("memory", "cpu") if k in limits]
    return Limits(memory, cpu, ", ".join(words) or "no limits")


def manifest_limits(manifest: pathlib.Path, container: str) -> Limits:
    """The limits of the container named ``container`` in a manifest's pod templates."""
    for doc in yaml.safe_load_all(manifest.read_text()):
        spec = ((doc or {}).get("spec") or {}).get("template", {}).get("spec") or {}
        for c in spec.get("containers") or []:
            if c.get("name") == container:
                return limits_of(c)
    raise Invalid(f"no container {container!r} in {manifest}")


def v1_files(limits: Limits, memsw: bool) -> dict[tuple[str, str], str]:
    """What a v1 group's files get: (controller, file) -> value. No limit is -1, as in a
    fresh group (a restarted runner may reuse a name)."""
    mem = str(limits.memory) if limits.memory is not None else "-1"
    files = {("memory", "memory.limit_in_bytes"): mem}
    if memsw:
        files[("memory", "memory.memsw.limit_in_bytes")] = mem
    files[("cpu", "cpu.cfs_period_us")] = str(CFS_PERIOD_US)
    quota = max(1000, limits.cpu * CFS_PERIOD_US // 1000) if limits.cpu is not None else -1
    files[("cpu", "cpu.cfs_quota_us")] = str(quota)
    return files


def v2_files(limits: Limits) -> dict[str, str]:
    """What a v2 group's files get."""
    quota = max(1000, limits.cpu * CFS_PERIOD_US // 1000) if limits.cpu is not None else "max"
    return {
        "memory.max": str(limits.memory) if limits.memory is not None else "max",
        "memory.swap.max": "0" if limits.memory is not None else "max",
        "cpu.max": f"{quota} {CFS_PERIOD_US}",
    }


def count_oom_kills(text: str) -> int:
    """The ``oom_kill`` counter of v1 memory.oom_control or v2 memory.events."""
    for line in text.splitlines():
        key, _, value = line.partition(" ")
        if key == "oom_kill":
            return int(value)
    return 0


@dataclasses.dataclass(frozen=True)
class Support:
    version: int | None  # 1, 2, or None: limits are not enforced
    reason: str  # why not, when version is None
    roots: Mapping[str, pathlib.Path] = dataclasses.field(
        default_factory=dict
    )  # controller -> parent

    @property
    def enforced(self) -> bool:
        return self.version is not None

    def describe(self, limits: Limits) -> str:
        if self.version is None:
            return f"resources: not enforced ({self.reason})"
        return f"resources: enforced (cgroup v{self.version}: {limits.text})"


def _mounts() -> list[tuple[str, str, set[str]]]:
    out = []
    with open("/proc/self/mounts") as f:
        for line in f:
            _, point, kind, options, *_ = line.split()
            out.append((point, kind, set(options.split(","))))
    return out


def detect() -> Support:
    """Which cgroups this machine lets the runner write, and a parent made in each."""
    if os.environ.get(ENV, "").lower() == "off":
        return Support(None, f"{ENV}=off")
    mounts = _mounts()
    v1 = {
        c: pathlib.Path(p)
        for p, kind, opts in mounts
        if kind == "cgroup"
        for c in ("memory", "cpu")
        if c in opts
    }
    try:
        if "memory" in v1 and "cpu" in v1:
            roots = {c: v1[c] / PARENT for c in ("memory", "cpu")}
            for root in roots.values():
                _writable(root)
                _prune(root)
            return Support(1, "", roots)
        for point, kind, _ in mounts:
            root = pathlib.Path(point)
            if kind == "cgroup2" and {"memory", "cpu"} <= set(
                (root / "cgroup.controllers").read_text().split()
            ):
                (root / "cgroup.subtree_control").write_text("+memory +cpu")
                parent = root / PARENT
                _writable(parent)
                (parent / "cgroup.subtree_control").write_text("+memory +cpu")
                _prune(parent)
                return Support(2, "", {"unified": parent})
    except OSError as e:
        return Support(None, f"cgroups not writable: {e.strerror} ({e.filename})")
    return Support(
        None, "no cgroup v1 memory and cpu hierarchies, no cgroup v2 with memory and cpu"
    )


def _writable(parent: pathlib.Path) -> None:
    """Make the parent; one another user made is not this runner's to write."""
    parent.mkdir(exist_ok=True)
    if not os.access(parent, os.W_OK):
        raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(parent))


def _prune(parent: pathlib.Path, age: float = 3600.0) -> None:
    """Remove the empty groups an interrupted run left (older than ``age``: a group just
    made by another runner is not yet joined)."""
    for d in parent.iterdir():
        if d.is_dir() and time.time() - d.stat().st_mtime > age:
            with contextlib.suppress(OSError):  # not empty, or gone meanwhile: leave it
                d.rmdir()


class Group:
    """One container's cgroup (one per controller in v1), made with its limits."""

    def __init__(self, support: Support, name: str, limits: Limits) -> None:
        assert support.enforced, support.reason
        self.support, self.limits = support, limits
        self.dirs = {c: root / name for c, root in support.roots.items()}
        for d in self.dirs.values():
            d.mkdir(exist_ok=True)
        if support.version == 1:
            memsw = (self.dirs["memory"] / "memory.memsw.limit_in_bytes").exists()
            for (controller, file), value in v1_files(limits, memsw).items():
                (self.dirs[controller] / file).write_text(value)
        else:
            for file, value in v2_files(limits).items():
                with contextlib.suppress(FileNotFoundError):  # no swap accounting: nothing to cap
                    (self.dirs["unified"] / file).write_text(value)

    def read(self, file: str) -> str:
        """A file of the group (``memory.limit_in_bytes``, ``cpu.max``, ...)."""
        for d in self.dirs.values():
            if (d / file).exists():
                return (d / file).read_text().strip()
        raise FileNotFoundError(file)

    def wrap(self, argv: list[str]) -> list[str]:
        """``argv`` started by a shell that first moves itself into the group (``echo 0``
        to cgroup.procs), then execs: nothing of the container runs outside its limits.
        Exit 125 when a group cannot be joined (its message in the container's log)."""
        script = (
            'while [ "$1" != -- ]; do echo 0 > "$1" || '
            '{ echo "cgroup: cannot join $1" >&2; exit 125; }; '
            'shift; done; shift; exec "$@"'
        )
        procs = [str(d / "cgroup.procs") for d in self.dirs.values()]
        return ["/bin/sh", "-c", script, "sh", *procs, "--", *argv]

    def oom_kills(self) -> int:
        """The kernel's OOM kills in this group (a reused name: since it was first made)."""
        if self.support.version == 1:
            text = (self.dirs["memory"] / "memory.oom_control").read_text()
        else:
            text = (self.dirs["unified"] / "memory.events").read_text()
        return count_oom_kills(text)

    def peak_memory(self) -> int | None:
        """The most memory the group has held (v2 kernels before 5.19 do not say)."""
        try:
            return int(
                self.read(
                    "memory.max_usage_in_bytes" if self.support.version == 1 else "memory.peak"
                )
            )
        except FileNotFoundError:
            return None

    def pids(self) -> list[int]:
        out: set[int] = set()
        for d in self.dirs.values():
            with contextlib.suppress(FileNotFoundError):
                out |= {int(p) for p in (d / "cgroup.procs").read_text().split()}
        return sorted(out)

    def kill(self) -> None:
        """SIGKILL what is left in the group: a container's children outlive it here (no
        PID namespace whose end takes them along, as in a container)."""
        for pid in self.pids():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)

    def remove(self, timeout: float = 10.0) -> None:
        """Kill what is left in the group and remove it."""
        deadline = time.monotonic() + timeout
        for d in self.dirs.values():
            while True:
                self.kill()
                try:
                    d.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError as e:
                    if e.errno != errno.EBUSY or time.monotonic() > deadline:
                        raise
                    time.sleep(0.1)

    def usage(self) -> Usage:
        """The memory the group held at most against its limit, and the OOM kills in it
        (v1 memory.failcnt is not used: this machine's kernel leaves it 0 even with an OOM
        kill; the oom_kill counter is what a kubelet's OOMKilled reads too)."""
        return Usage(self.limits, self.peak_memory(), self.oom_kills())


@dataclasses.dataclass(frozen=True)
class Usage:
    limits: Limits
    peak: int | None  # bytes (page cache included, as a kubelet counts it)
    oom_kills: int

    def text(self) -> str:
        peak = "unknown" if self.peak is None else f"{self.peak / 2**20:.0f} MiB"
        limit = (
            "no limit" if self.limits.memory is None else f"{self.limits.memory / 2**20:.0f} MiB"
        )
        return f"memory peak {peak} of {limit} ({self.limits.text}), OOM kills {self.oom_kills}"


def confine(name: str, limits: Limits) -> Group | None:
    """A group for a plain process with ``limits`` (``group.wrap(argv)``); None when
    ``TETHER_PODRUNNER_LIMITS=off`` says so on purpose; NotEnforced when they cannot be."""
    support = detect()
    if support.enforced:
        return Group(support, name, limits)
    if os.environ.get(ENV, "").lower() == "off":
        print(f"{name}: {support.describe(limits)}", flush=True)
        return None
    raise NotEnforced(f"{name}: {support.describe(limits)}")


def held(usage: Usage | None, what: str) -> str:
    """The usage line of a confined run; AssertionError when the kernel OOM-killed a
    process of it."""
    if usage is None:
        return f"{what}: limits not enforced ({ENV}=off)"
    line = f"{what}: {usage.text()}"
    print(line, flush=True)
    if usage.oom_kills:
        raise AssertionError(f"OOM-killed under its limit: {line}")
    return line
