"""The suite's three tiers, chosen for each test from what it needs, and the guard that keeps
a test in the tier it was put in.

- ``unit``: plain data, no control plane, no process: ``make unit``.
- ``check``: the session's two planes (an SKR and a KCP), no other process: ``make check``
  runs ``unit`` and ``check``.
- ``full``: everything else (listeners, webhooks and pollers as processes, extra planes,
  faults, the deployed form, cert-manager, the release, version skew, the browser): only
  ``make test``, which runs all three.

A test's tier follows from its fixtures (``planes`` or anything built on it: ``check``; a
fixture of ``PROCESS_FIXTURES``: ``full``) or from a ``processes`` mark on the test or its
module, for a test that starts a process in its own body. ``decide`` is that rule.

The guard (``Guard``) makes the rule hold: in every run, a test of ``unit`` or ``check`` that
starts a process (``subprocess``, ``os.fork``, ``multiprocessing``) fails at that call with
what to do. The session's planes start under ``Guard.allowed()``.
"""

from __future__ import annotations

import contextlib
import multiprocessing.process
import os
import subprocess
import threading
from collections.abc import Callable, Iterable, Iterator
from typing import Any

TIERS = ("unit", "check", "full")

# fixtures that start a process beyond the session's planes (a test using one is ``full``)
PROCESS_FIXTURES = frozenset({"listener", "listener_a", "part", "fault_planes"})


def decide(fixtures: Iterable[str], marks: Iterable[str]) -> str:
    """The tier of a test that uses ``fixtures`` and carries ``marks``."""
    fixtures, marks = set(fixtures), set(marks)
    if "processes" in marks or fixtures & PROCESS_FIXTURES:
        return "full"
    return "check" if "planes" in fixtures else "unit"


class TierViolation(AssertionError):
    """A test of ``unit`` or ``check`` started a process."""


class _Depth(threading.local):
    depth = 0  # how many ``allowed()`` blocks this thread is in


class Guard:
    """Fails a test that starts a process while its tier says it starts none.

    ``current`` is set by the conftest around each test's setup, call and teardown: the test's
    id and tier. Outside a test (collection, the report header) and under ``allowed()``
    nothing is checked."""

    def __init__(self, record: str = "") -> None:
        self.current: tuple[str, str] | None = None
        self.record = record  # a file: note every start there instead of failing (a survey)
        self._allowed = _Depth()
        self._undo: list[Callable[[], None]] = []

    @contextlib.contextmanager
    def allowed(self) -> Iterator[None]:
        depth = self._allowed.depth
        self._allowed.depth = depth + 1
        try:
            yield
        finally:
            self._allowed.depth = depth

    def check(self, what: str) -> None:
        current = self.current
        if current is None or self._allowed.depth:
            return
        test, tier = current
        if self.record:
            with open(self.record, "a") as f:
                f.write(f"{test}\t{tier}\t{what}\n")
            return
        if tier == "full":
            return
        raise TierViolation(
            f"{test} is in tier {tier!r} but starts a process ({what}): give it a fixture "
            f"that says so (testing.tiers.PROCESS_FIXTURES) or mark it "
            f"`pytest.mark.processes` (its module: `pytestmark = pytest.mark.processes`)"
        )

    def install(self) -> None:
        guard = self
        popen_init = subprocess.Popen.__init__
        fork = os.fork
        start = multiprocessing.process.BaseProcess.start

        def guarded_popen(self: subprocess.Popen[Any], args: Any, *a: Any, **kw: Any) -> None:
            guard.check(f"subprocess {str(args if isinstance(args, str) else list(args)[:2])[:80]}")
            popen_init(self, args, *a, **kw)

        def guarded_fork() -> int:
            guard.check("os.fork")
            return fork()

        def guarded_start(self: multiprocessing.process.BaseProcess) -> None:
            guard.check(f"multiprocessing {self.name}")
            start(self)

        subprocess.Popen.__init__ = guarded_popen  # type: ignore[method-assign]
        os.fork = guarded_fork
        multiprocessing.process.BaseProcess.start = guarded_start  # type: ignore[method-assign]

        def undo() -> None:
            subprocess.Popen.__init__ = popen_init  # type: ignore[method-assign]
            os.fork = fork
            multiprocessing.process.BaseProcess.start = start  # type: ignore[method-assign]

        self._undo.append(undo)

    def uninstall(self) -> None:
        while self._undo:
            self._undo.pop()()
