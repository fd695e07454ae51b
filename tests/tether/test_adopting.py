"""docs/adopting.md keeps its order (issue 42 item 6): the steps in the order a landscape
takes them, each with a command and a check, the table of steps agreeing with the sections,
and README pointing at the page. That every command, path and setting the page names
exists is tests/tether/test_documented_defaults.py's."""

from __future__ import annotations

import pathlib
import re

REPO = pathlib.Path(__file__).resolve().parents[2]
PAGE = REPO / "docs" / "adopting.md"
ORDER = [
    "Compass: dry run, then adoption",
    "Next to the runtime-watcher",
    "Certificates",
    "Exposure",
    "Pilot",
    "Waves",
    "The module (optional)",
]


def sections() -> dict[str, str]:
    text = PAGE.read_text()
    parts = re.split(r"^## ", text, flags=re.M)[1:]
    return {p.split("\n", 1)[0]: p.split("\n", 1)[1] for p in parts}


def test_the_steps_are_in_order_each_with_a_command_and_a_check() -> None:
    steps = [h for h in sections() if re.match(r"\d+\. ", h)]
    assert steps == [f"{i}. {name}" for i, name in enumerate(ORDER, 1)]
    for head, body in sections().items():
        if head in steps:
            assert "**Check" in body, f"{head}: no check"
            assert "`" in body and ("    " in body or "kubectl" in body), f"{head}: no command"
    module = sections()[steps[-1]]
    assert "TETHER_ENROLLER_MODE=module" in module and "make push-module" in module


def test_the_table_of_steps_names_the_sections_in_their_order() -> None:
    text = PAGE.read_text()
    rows = re.findall(r"^\| (\d+\. [^|]+?) \|", text, flags=re.M)
    assert [r.split(" ", 1)[1] for r in rows] == ORDER


def test_readme_says_how_tether_relates_and_points_at_the_page() -> None:
    readme = (REPO / "README.md").read_text()
    para = next(p for p in readme.split("\n\n") if "docs/adopting.md" in p)
    for name in ("lifecycle-manager", "runtime-watcher", "compass-manager", "Provisioner"):
        assert name in para
    assert len(para.strip().splitlines()) <= 2
