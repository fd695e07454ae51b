"""What every benchmark's JSON records of its run (docs/performance.md): the commit, the
machine's 1-minute load average before and after, and the command (shell-quoted, so it can
be pasted back); and the line that prints them under a table. A JSON written before a bench
recorded these gets a footer that says so, with the date it was run before."""

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


class Start(NamedTuple):
    commit: str
    load: float


def start() -> Start:
    """Taken before the run: the checkout's commit and the load average."""
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True,
                            text=True, check=True).stdout.strip()
    return Start(commit, os.getloadavg()[0])


def command(argv: list[str]) -> str:
    """The command as typed: `--shapes ""` stays `--shapes ''`, not `--shapes ` (shlex)."""
    return shlex.join([f"bench/{pathlib.Path(argv[0]).name}", *argv[1:]])


def stamp(bench: str, began: Start) -> dict[str, Any]:
    """The fields every result holds, after the run."""
    return {"bench": bench, "when": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
            "commit": began.commit, "machine": f"{os.cpu_count()} CPUs",
            "load_average_1m": [round(began.load, 1), round(os.getloadavg()[0], 1)],
            "command": command(sys.argv)}


def recorded(doc: dict[str, Any]) -> bool:
    return all(key in doc for key in ("commit", "load_average_1m", "command"))


def footer(doc: dict[str, Any], path: pathlib.Path | None = None) -> str:
    """The line under a table printed from `doc` (read from `path`, if given)."""
    if recorded(doc):
        return f"commit {doc['commit']}, load average {doc['load_average_1m']}, command: {doc['command']}"
    return f"provenance: not recorded (run before {run_before(doc, path)})"


def run_before(doc: dict[str, Any], path: pathlib.Path | None) -> str:
    """The run's date if the JSON holds one, else the date its file was first committed."""
    when = doc.get("when")
    if isinstance(when, str) and when:
        return when[:10]
    if path is not None:
        dates = subprocess.run(["git", "log", "--format=%cs", "--", str(path)], cwd=REPO,
                               capture_output=True, text=True, check=False).stdout.split()
        if dates:
            return dates[-1]
    return "provenance was recorded"
