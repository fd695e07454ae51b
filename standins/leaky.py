"""A deliberately misbehaving container for the pod runner's limits (tests only):

    python standins/leaky.py memory [STEP_MIB]   # allocates (and touches) memory until killed
    python standins/leaky.py cpu                 # spins on one core until killed

Run under the pod runner with a memory limit, the first is OOM-killed by the kernel; with a
CPU limit, the second gets only its CFS quota. Each line of output says how far it got.
"""

from __future__ import annotations

import sys
import time


def leak(step_mib: int) -> None:
    held = []
    while True:
        block = bytearray(step_mib << 20)
        for i in range(0, len(block), 4096):  # touch every page: resident, charged to the cgroup
            block[i] = 1
        held.append(block)
        print(f"leaky: holding {len(held) * step_mib} MiB", flush=True)
        time.sleep(0.05)


def spin() -> None:
    print("leaky: spinning", flush=True)
    n = 0
    while True:
        n += 1


def main(argv: list[str]) -> None:
    mode = argv[1] if len(argv) > 1 else "memory"
    if mode == "memory":
        leak(int(argv[2]) if len(argv) > 2 else 8)
    elif mode == "cpu":
        spin()
    else:
        raise SystemExit(f"leaky: unknown mode {mode!r} (memory, cpu)")


if __name__ == "__main__":
    main(sys.argv)
