"""Loaded (as ``sitecustomize``) by the Python processes ``testing.clockskew`` runs under
libfaketime: ``time.sleep`` without ``clock_nanosleep``.

libfaketime 0.9.10 (Debian 12) with ``FAKETIME_DONT_FAKE_MONOTONIC=1`` answers Python's
``time.sleep`` (``clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME)``) with EINVAL; without
that setting it fakes the monotonic clock too, and every ``threading`` wait with a timeout
(``sem_clockwait`` on the real monotonic clock) never ends. So the monotonic clock stays
real and sleeping waits in ``select`` (a relative timeout, which libfaketime leaves alone).
Only the harness puts this directory on ``PYTHONPATH``; the product never sees it.
"""

from __future__ import annotations

import select
import time
from typing import SupportsIndex

_monotonic = time.monotonic


def _sleep(seconds: float | SupportsIndex) -> None:
    seconds = float(seconds)
    if seconds < 0:
        raise ValueError("sleep length must be non-negative")
    deadline = _monotonic() + seconds
    while True:
        left = deadline - _monotonic()
        if left <= 0:
            return
        select.select([], [], [], left)


time.sleep = _sleep
