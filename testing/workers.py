"""What a test process shares with the other workers of a parallel run, kept apart.

``make test`` runs the suite on several pytest-xdist workers at once, each with its own
session planes. Ports are what they would otherwise share by accident: a port taken from the
kernel's ephemeral range (``bind(("127.0.0.1", 0))``, then closed, then handed to a server)
can be taken by any outgoing connection of another worker before the server binds it. So each
worker hands out ports from its own block *below* the ephemeral range, never twice while its
process lives, and checks each is free on 127.0.0.1 before handing it out.

    workers.index()        # 0 for "gw0" or a run without workers, 3 for "gw3"
    workers.port()         # a free port of this worker's block
    workers.slot(64, 128)  # this worker's share of a range of numbers (ClusterIP /16s)

A worker is named by pytest-xdist (``PYTEST_XDIST_WORKER``); a process it starts (the demo,
a part under test) inherits the name, and with it the block.
"""

from __future__ import annotations

import os
import random
import socket
import threading

# below the kernel's ephemeral range (32768-60999 by default; read at import)
_LOW, _HIGH = 10240, 32768
BLOCKS = 8  # ports and ranges are split in this many shares (worker index modulo)

_lock = threading.Lock()
_handed: set[int] = set()


def index() -> int:
    """This process's worker number (``gw3`` is 3); 0 outside a parallel run."""
    name = os.environ.get("PYTEST_XDIST_WORKER", "")
    digits = name[2:] if name.startswith("gw") else ""
    return int(digits) if digits.isdigit() else 0


def _ephemeral_low() -> int:
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return _HIGH


def slot(low: int, high: int) -> range:
    """This worker's share of ``range(low, high)`` (one of ``BLOCKS`` equal parts)."""
    size = (high - low) // BLOCKS
    start = low + (index() % BLOCKS) * size
    return range(start, start + size)


def _bindable(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def port() -> int:
    """A port free on 127.0.0.1 now, from this worker's block, not handed out before by this
    process (servers that bind another loopback address use the same number there)."""
    block = slot(_LOW, min(_HIGH, _ephemeral_low()))
    with _lock:
        candidates = [p for p in block if p not in _handed]
        random.shuffle(candidates)
        for p in candidates:
            if _bindable(p):
                _handed.add(p)
                return p
    raise OSError(f"no free port left in worker {index()}'s block {block.start}-{block.stop - 1}")
