"""The skeleton every bench in bench/ shares: the checkout on ``sys.path``, the options every
bench takes, the JSON it writes and the report it prints from that JSON.

Importing this module puts the checkout first on ``sys.path``, so a bench imports it before
the parts it measures (``testing``, ``listener``, ...): `import skeleton` sorts among the
third-party imports, above the first-party ones. A bench then runs in this order:

    ap = skeleton.options("name", __doc__)       # --out (bench/results/name.json), --report
    ap.add_argument(...)                         # its own options
    args = skeleton.parse(ap, report, argv)      # with --report: prints --out's run, exits
    began = provenance.start()
    ...                                          # what it measures
    report(skeleton.write(args.out, "name", began, doc))

where the bench's ``report(doc)`` is ``skeleton.report(doc, table(doc))`` for a bench whose
tables docs/performance.md prints. The JSON opens with bench/provenance.py's fields (the
commit, the load average, the command) and the report ends with its footer, so a table in
docs/performance.md names the run it was printed from."""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import platform
import sys
from collections.abc import Callable
from typing import Any

import provenance

REPO = provenance.REPO
RESULTS = provenance.RESULTS
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))


def options(
    bench: str | None, description: str | None = None, *, raw: bool = False
) -> argparse.ArgumentParser:
    """A bench's parser, holding ``--out`` (default bench/results/BENCH.json; with `bench`
    None, no default: the bench picks the file from its other options) and ``--report``.
    `raw` keeps the description's line breaks (a module docstring as the help)."""
    ap = argparse.ArgumentParser(
        description=description,
        formatter_class=argparse.RawDescriptionHelpFormatter if raw else argparse.HelpFormatter,
    )
    if bench is None:
        ap.add_argument(
            "--out",
            type=pathlib.Path,
            help="the JSON of the run (default: in bench/results/, named by the other options)",
        )
    else:
        ap.add_argument(
            "--out",
            type=pathlib.Path,
            default=RESULTS / f"{bench}.json",
            help=f"the JSON of the run (default: bench/results/{bench}.json)",
        )
    ap.add_argument(
        "--report", action="store_true", help="print the report of --out's run and exit"
    )
    return ap


def parse(
    ap: argparse.ArgumentParser,
    show: Callable[[dict[str, Any]], None],
    argv: list[str] | None = None,
    *,
    named: Callable[[argparse.Namespace], str] | None = None,
) -> argparse.Namespace:
    """The options of a run. With ``--report``, `show` prints the report of ``--out``'s run
    and the bench exits. A bench whose file depends on its options (``options(None)``)
    gives `named`: ``--out`` left out is bench/results/``named(args)``."""
    args = ap.parse_args(argv)
    if args.out is None and named is not None:
        args.out = RESULTS / named(args)
    if args.report:
        show(load(args.out))
        ap.exit()
    return args


def settings(args: argparse.Namespace) -> dict[str, Any]:
    """The options of a run as its JSON keeps them: all but ``--out`` (the file is the JSON)."""
    return {k: v for k, v in vars(args).items() if k != "out"}


def machine(**more: Any) -> dict[str, Any]:
    """The machine a run had, as the benches' JSON name it: CPUs and Python, and `more`."""
    return {"cpus": os.cpu_count(), "python": platform.python_version(), **more}


def load(path: pathlib.Path) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(path.read_text())
    return doc


def write(
    path: pathlib.Path, bench: str, began: provenance.Start, doc: dict[str, Any], *, indent: int = 2
) -> dict[str, Any]:
    """`doc` after the provenance of its run (a key of `doc` overrides one of provenance's in
    place), written to `path`, its folder made; returns what was written. `indent` is the
    one the bench's committed JSON has (1 or 2), so a new run's diff shows values only."""
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
