"""What every benchmark's JSON records of its run (docs/performance.md): the commit, the
machine's 1-minute load average before and after, and the command; and the line that
prints them under a table."""

from __future__ import annotations

import datetime
import os
import pathlib
import subprocess
import sys
from typing import Any, NamedTuple

REPO = pathlib.Path(__file__).resolve().parents[1]


class Start(NamedTuple):
    commit: str
    load: float


def start() -> Start:
    """Taken before the run: the checkout's commit and the load average."""
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True,
                            text=True, check=True).stdout.strip()
    return Start(commit, os.getloadavg()[0])


def stamp(bench: str, began: Start) -> dict[str, Any]:
    """The fields every result holds, after the run."""
    return {"bench": bench, "when": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
            "commit": began.commit, "machine": f"{os.cpu_count()} CPUs",
            "load_average_1m": [round(began.load, 1), round(os.getloadavg()[0], 1)],
            "command": " ".join([f"bench/{pathlib.Path(sys.argv[0]).name}", *sys.argv[1:]])}


def footer(doc: dict[str, Any]) -> str:
    return f"commit {doc['commit']}, load average {doc['load_average_1m']}, command: {doc['command']}"
