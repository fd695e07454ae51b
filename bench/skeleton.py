"""The skeleton every bench in bench/ shares: the checkout on ``sys.path``, the options every
bench takes, the JSON it writes and the report it prints from that JSON.

Importing this module puts the checkout first on ``sys.path``, so a bench imports it before
the parts it measures (``testing``, ``listener``, ...): `import skeleton` sorts among the
third-party imports, above the first-party ones. The options are ``--out`` (the JSON,
bench/results/<bench>.json unless the bench names another) and ``--report`` (print the
report of ``--out``'s run and exit). The JSON opens with bench/provenance.py's fields (the
commit, the load average, the command) and the report ends with its footer, so a table in
docs/performance.md names the run it was printed from."""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import platform
import sys
from typing import Any

import provenance

REPO = provenance.REPO
RESULTS = provenance.RESULTS
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))


def options(bench: str | None, description: str | None = None, *,
            raw: bool = False) -> argparse.ArgumentParser:
    """A bench's parser, holding ``--out`` (default bench/results/BENCH.json; with `bench`
    None, no default: the bench picks the file from its other options) and ``--report``.
    `raw` keeps the description's line breaks (a module docstring as the help)."""
    ap = argparse.ArgumentParser(
        description=description,
        formatter_class=argparse.RawDescriptionHelpFormatter if raw else argparse.HelpFormatter)
    if bench is None:
        ap.add_argument("--out", type=pathlib.Path,
                        help="the JSON of the run (default: in bench/results/, named by the other options)")
    else:
        ap.add_argument("--out", type=pathlib.Path, default=RESULTS / f"{bench}.json",
                        help=f"the JSON of the run (default: bench/results/{bench}.json)")
    ap.add_argument("--report", action="store_true", help="print the report of --out's run and exit")
    return ap


def settings(args: argparse.Namespace) -> dict[str, Any]:
    """The options of a run as its JSON keeps them: all but ``--out`` (the file is the JSON)."""
    return {k: v for k, v in vars(args).items() if k != "out"}


def machine(**more: Any) -> dict[str, Any]:
    """The machine a run had, as the benches' JSON name it: CPUs and Python, and `more`."""
    return {"cpus": os.cpu_count(), "python": platform.python_version(), **more}


def load(path: pathlib.Path) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(path.read_text())
    return doc


def write(path: pathlib.Path, bench: str, began: provenance.Start, doc: dict[str, Any], *,
          indent: int = 2) -> dict[str, Any]:
    """`doc` after the provenance of its run (a key of `doc` overrides one of provenance's in
    place), written to `path`, its folder made; returns what was written."""
    doc = {**provenance.stamp(bench, began), **doc}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc, indent=indent) + "\n")
    return doc


def report(doc: dict[str, Any], *tables: str) -> None:
    """The tables printed from `doc`, a blank line apart, then the line naming its run."""
    for table in tables:
        print(table)
        print()
    print(provenance.footer(doc))
