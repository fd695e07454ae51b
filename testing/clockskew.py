"""A runtime's clock skewed against the KCP's, for the runtime's Tether processes (the
webhook and the pollers of ``testing.faultstack``; tests/faults/test_clock_skew.py).

How: libfaketime (Debian's ``faketime`` package, ``make faketime``; a prerequisite of
``make test``) preloaded into the process, its offset read from a file
(``FAKETIME_TIMESTAMP_FILE``, re-read every second), so a test can move the clock of
running processes (``Skew.set``: "the node's clock is corrected"). Wall-clock time only:
``CLOCK_REALTIME``, ``time()``, so Python's ``time.time``/``datetime.now`` and OpenSSL's
certificate validity checks, while the monotonic clock stays real
(``FAKETIME_DONT_FAKE_MONOTONIC``: faked, every ``threading`` wait with a timeout hangs).
libfaketime 0.9.10 then fails Python's ``time.sleep`` (EINVAL): ``clockshim/`` (put first
on ``PYTHONPATH`` as ``sitecustomize``) sleeps in ``select`` instead.

Why not the others: a time namespace (``unshare -T``) offsets only the monotonic and boot
clocks, never ``CLOCK_REALTIME``, which certificates and timestamps use; no part has an
injected clock for its wall time, and one would not reach OpenSSL. What is not skewed: the
SKR's kube-apiserver (a static Go binary reads the clock through the vDSO, which
libfaketime cannot intercept), so the runtime's apiserver keeps the KCP's time.
"""

from __future__ import annotations

import glob
import os
import pathlib
import subprocess
import sys

from testing import controlplane

SHIM = pathlib.Path(__file__).with_name("clockshim")
LIBRARY_GLOB = "/usr/lib/*/faketime/libfaketime.so.1"
REFRESH_SECONDS = 1  # how often a process re-reads the offset file


def library() -> pathlib.Path:
    """libfaketime's path; fails loudly when it is not installed."""
    found = sorted(glob.glob(LIBRARY_GLOB))
    if not found:
        raise AssertionError(
            f"libfaketime is missing ({LIBRARY_GLOB}): run `make faketime` "
            "(the Debian package faketime); the clock-skew tests need it"
        )
    return pathlib.Path(found[0])


class Skew:
    """One skewed clock: ``env()`` for the processes that run on it, ``set(seconds)`` to
    move it (ahead: positive) while they run."""

    def __init__(self, workdir: pathlib.Path, seconds: float = 0.0) -> None:
        self.lib = library()
        self.file = workdir / "faketime-offset"
        self.seconds = 0.0
        self.set(seconds)

    def set(self, seconds: float) -> None:
        """The clock's offset from the real time; the processes apply it within
        ``REFRESH_SECONDS``."""
        tmp = self.file.with_suffix(".new")
        tmp.write_text(f"{int(round(seconds)):+d}s\n")
        os.replace(tmp, self.file)
        self.seconds = float(int(round(seconds)))

    def env(self) -> dict[str, str]:
        return {
            "LD_PRELOAD": str(self.lib),
            "FAKETIME_TIMESTAMP_FILE": str(self.file),
            "FAKETIME_CACHE_DURATION": str(REFRESH_SECONDS),
            "FAKETIME_DONT_FAKE_MONOTONIC": "1",
            "PYTHONPATH": f"{SHIM}{os.pathsep}{controlplane.REPO_ROOT}",
        }

    def now(self) -> float:
        """The wall time a process on this clock reads (also the check that the
        preload works on this machine: it fails loudly, not as a silently unskewed test)."""
        done = subprocess.run(
            [sys.executable, "-c", "import time; time.sleep(0.01); print(time.time())"],
            env={**os.environ, **self.env()},
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
        if done.returncode != 0:
            raise AssertionError(f"a process under libfaketime failed: {done.stderr[-1000:]}")
        return float(done.stdout.strip())
