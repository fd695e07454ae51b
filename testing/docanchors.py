"""docs/operations.md and its headings' anchors as GitHub renders them, for the tests that
check that a runbook link (from the admin pages, ``tether status`` or an alert) lands on a
section that exists."""

from __future__ import annotations

import re

from testing import controlplane

OPERATIONS = controlplane.REPO_ROOT / "docs" / "operations.md"


def github_anchors(markdown: str) -> dict[str, str]:
    """Anchor -> section text, as GitHub renders the headings (github-slugger): the text
    lowercased, characters other than letters, digits, ``_``, ``-`` and spaces dropped,
    spaces to hyphens, a repeated anchor suffixed ``-1``, ``-2``...; fenced code skipped."""
    sections: dict[str, list[str]] = {}
    seen: dict[str, int] = {}
    fenced = False
    current: list[str] = []
    for line in markdown.splitlines():
        if line.startswith("```"):
            fenced = not fenced
        m = None if fenced else re.match(r"^(#{1,6}) +(.+?) *#*$", line)
        if m is None:
            current.append(line)
            continue
        base = re.sub(r"[^\w\- ]", "", m.group(2).lower()).replace(" ", "-")
        n = seen.get(base, 0)
        seen[base] = n + 1
        current = sections[base if n == 0 else f"{base}-{n}"] = []
    return {k: "\n".join(v) for k, v in sections.items()}
