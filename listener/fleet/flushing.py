"""The worker thread that flushes what a worker merged in memory (delivery counts, state
summaries) into the KCP on a schedule, for runtimes whose next request may go elsewhere."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable


def every(interval: float, flush: Callable[[], object], name: str) -> threading.Thread:
    """A started daemon thread calling ``flush`` every ``interval`` seconds (at least every
    second)."""

    def loop() -> None:
        while True:
            time.sleep(max(1.0, interval))
            flush()

    t = threading.Thread(target=loop, name=name, daemon=True)
    t.start()
    return t
