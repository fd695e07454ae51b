"""What every benchmark's JSON records of its run (docs/performance.md): the commit, the
machine's 1-minute load average before and after, and the command (shell-quoted, so it can
be pasted back); and the line that prints them under a table. A JSON written before a bench
recorded these gets a footer that says so, with the run's date (or "before SINCE", the day
the benches began to record provenance, when the JSON holds no date either)."""

from __future__ import annotations

import datetime
import os
import pathlib
import shlex
import subprocess
import sys
from typing import Any, NamedTuple

REPO = pathlib.Path(__file__).resolve().parents[1]
RESULTS = REPO / "bench" / "results"
SINCE = "2026-12-04"  # commit 4cb5216: the first bench recording its commit, load and command


class Start(NamedTuple):
    commit: str
    load: float


def start() -> Start:
    """Taken before the run: the checkout's commit and the load average."""
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    return Start(commit, os.getloadavg()[0])


def command(argv: list[str]) -> str:
    """The command as typed: `--shapes ""` stays `--shapes ''`, not `--shapes ` (shlex)."""
    return shlex.join([f"bench/{pathlib.Path(argv[0]).name}", *argv[1:]])


def stamp(bench: str, began: Start) -> dict[str, Any]:
    """The fields every result holds, after the run."""
    return {
        "bench": bench,
        "when": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "commit": began.commit,
        "machine": f"{os.cpu_count()} CPUs",
        "load_average_1m": [round(began.load, 1), round(os.getloadavg()[0], 1)],
        "command": command(sys.argv),
    }


def recorded(doc: dict[str, Any]) -> bool:
    return all(key in doc for key in ("commit", "load_average_1m", "command"))


def footer(doc: dict[str, Any]) -> str:
    """The line under a table printed from `doc`."""
    if recorded(doc):
        return (
            f"commit {doc['commit']}, load average {doc['load_average_1m']}, "
            f"command: {doc['command']}"
        )
    return f"provenance: not recorded (run {run_date(doc)})"


def run_date(doc: dict[str, Any]) -> str:
    """The day a JSON without provenance was written, from whichever date field its bench kept."""
    for key in ("when", "date", "at", "started"):
        value = doc.get(key)
        if isinstance(value, str) and len(value) >= 10:
            return value[:10]
    return f"before {SINCE}"
