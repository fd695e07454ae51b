"""docs/performance.md's tables cite the runs they were printed from (issue 26, item 6), and
the run history beside the benches names the JSON of every run it keeps (issue 43, item 5).

Every bench/results/*.json records its commit, load average and command (bench/provenance.py)
or is allowed below, with the reason; every footer under a table in docs/performance.md is
the footer of the JSON named nearest above it, so a table never cites a JSON that holds
another run; and every JSON that records its run has its footer in docs/performance.md (its
current figure). bench/HISTORY.md keeps earlier runs, whose JSONs later runs replaced: each
of its footers names, nearest above it, a JSON of the bench its command ran (the one its
``--out`` wrote, when it says)."""

from __future__ import annotations

import importlib.util
import json
import pathlib
import re
from types import ModuleType
from typing import Any

REPO = pathlib.Path(__file__).resolve().parents[2]
RESULTS = REPO / "bench" / "results"
DOCS = REPO / "docs" / "performance.md"
HISTORY = REPO / "bench" / "HISTORY.md"

# JSONs written before the benches recorded provenance (2026-12-04), allowed with a reason
# until their bench is re-run. Empty since 2026-12-05: every bench/results JSON records its
# commit, load average and command; a new one without them fails the first test.
NOT_RECORDED: dict[str, str] = {}

FOOTER = re.compile(
    r"^(commit \S+, load average \[.*\], command: .*|provenance: not recorded \(run .*\))$"
)
CITED = re.compile(r"bench/results/([A-Za-z0-9_]+)\.json")
RAN = re.compile(r"command: bench/([A-Za-z0-9_]+)\.py")
OUT = re.compile(r"--out bench/results/([A-Za-z0-9_]+)\.json")


def provenance() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "bench_provenance", REPO / "bench" / "provenance.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def results() -> dict[str, dict[str, Any]]:
    return {path.stem: json.loads(path.read_text()) for path in sorted(RESULTS.glob("*.json"))}


def footers(text: str) -> list[tuple[str | None, int, str]]:
    """(the JSON named nearest above, line number, footer) for every footer line of `text`."""
    cited: str | None = None
    found = []
    for number, line in enumerate(text.splitlines(), start=1):
        if FOOTER.match(line.strip()):
            found.append((cited, number, line.strip()))
        names = CITED.findall(line)
        if names:
            cited = names[-1]
    return found


def test_footers_are_found_and_name_their_json() -> None:
    text = (
        "Results (`bench/results/a.json`):\n\n    x 1\n"
        "    commit abc, load average [1.0, 2.0], command: bench/a.py\n"
        "see bench/results/b.json\nprovenance: not recorded (run 2026-12-01)\n"
    )
    assert footers(text) == [
        ("a", 4, "commit abc, load average [1.0, 2.0], command: bench/a.py"),
        ("b", 6, "provenance: not recorded (run 2026-12-01)"),
    ]


def test_the_command_is_recorded_shell_quoted() -> None:
    assert (
        provenance().command(["/x/bench/listener_abuse.py", "--shapes", "", "--out", "a b.json"])
        == "bench/listener_abuse.py --shapes '' --out 'a b.json'"
    )


def test_a_result_without_provenance_says_so_with_its_date() -> None:
    footer = provenance().footer
    assert (
        footer({"when": "2026-12-02T02:12:28+00:00"}) == "provenance: not recorded (run 2026-12-02)"
    )
    assert (
        footer({"date": "2026-11-30T11:45:03+00:00", "command": "x"})
        == "provenance: not recorded (run 2026-11-30)"
    )
    assert footer({}) == "provenance: not recorded (run before 2026-12-04)"


def test_every_result_records_its_run_or_is_allowed_with_a_reason() -> None:
    recorded = provenance().recorded
    docs = results()
    missing = sorted(
        name for name, doc in docs.items() if not recorded(doc) and name not in NOT_RECORDED
    )
    assert not missing, f"bench/results JSONs without commit/load_average_1m/command: {missing}"
    stale = sorted(name for name in NOT_RECORDED if name not in docs or recorded(docs[name]))
    assert not stale, (
        f"allowed without provenance but gone or now recorded (remove from NOT_RECORDED): {stale}"
    )


def test_every_footer_in_the_docs_is_the_footer_of_the_json_it_cites() -> None:
    footer = provenance().footer
    docs = results()
    wrong = []
    for cited, number, line in footers(DOCS.read_text()):
        if cited is None or cited not in docs:
            wrong.append(f"line {number}: no bench/results JSON named above it ({cited})")
        elif footer(docs[cited]) != line:
            wrong.append(
                f"line {number}: {line!r} but bench/results/{cited}.json holds "
                f"{footer(docs[cited])!r}"
            )
    assert not wrong, "\n".join(wrong)


def test_every_recorded_json_has_its_footer_in_the_docs() -> None:
    recorded = provenance().recorded
    shown = {cited for cited, _, _ in footers(DOCS.read_text())}
    absent = sorted(name for name, doc in results().items() if recorded(doc) and name not in shown)
    assert not absent, (
        f"JSONs whose run no table in docs/performance.md cites with its footer: {absent}"
    )


def misnamed(found: list[tuple[str | None, int, str]]) -> list[str]:
    """The footers of `found` that name no JSON above them, or one their command did not
    write: another bench's (a JSON is named for its bench, ``fleet_sim_settled`` for
    ``bench/fleet_sim.py``), or not the file its ``--out`` names."""
    wrong = []
    for cited, number, line in found:
        ran, out = RAN.search(line), OUT.search(line)
        if cited is None:
            wrong.append(f"line {number}: no bench/results JSON named above it")
        elif ran is not None and not cited.startswith(ran.group(1)):
            wrong.append(f"line {number}: bench/{ran.group(1)}.py's run under {cited}.json")
        elif out is not None and out.group(1) != cited:
            wrong.append(f"line {number}: written to {out.group(1)}.json, under {cited}.json")
    return wrong


def test_a_history_footer_must_name_the_json_its_run_wrote() -> None:
    run = "commit a, load average [1.0, 2.0], command: bench/"
    text = (
        "`bench/results/e2e_rate50.json`:\n"
        f"{run}e2e.py --out bench/results/e2e_rate50.json\n"
        f"{run}e2e.py --out bench/results/e2e.json\n"
        "`bench/results/e2e.json`:\n"
        f"{run}soak.py\n"
    )
    assert misnamed(footers(text)) == [
        "line 3: written to e2e.json, under e2e_rate50.json",
        "line 5: bench/soak.py's run under e2e.json",
    ]
    assert misnamed(footers("provenance: not recorded (run 2026-12-01)\n")) == [
        "line 1: no bench/results JSON named above it"
    ]


def test_every_footer_in_the_history_names_the_json_of_its_run() -> None:
    found = footers(HISTORY.read_text())
    assert found, "bench/HISTORY.md holds no footer: the run history moved or its format changed"
    wrong = misnamed(found)
    assert not wrong, "bench/HISTORY.md:\n" + "\n".join(wrong)
