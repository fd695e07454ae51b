"""The record of every release, ``releases.json`` at the repository's root
(docs/releasing.md): what ``make release`` checks a version against and adds to, and where
the skew tests find "the previous release" (``previous``).

Each entry: ``version`` (``X.Y.Z``, also the git tag), ``tag``, ``commit`` (the full hash, so
a clone without tags finds it), ``date``, ``image`` (``REGISTRY@sha256:...`` or null for a
release without artefacts), ``manifests`` (rendered file -> sha256), ``sha256sums`` (of the
release's signed SHA256SUMS) and ``key`` (sha256 of the public key it was signed with).
"""

from __future__ import annotations

import json
import pathlib
import re
from typing import Any

RECORD = pathlib.Path(__file__).resolve().parents[1] / "releases.json"
VERSION = re.compile(r"(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)")


def key(version: str) -> tuple[int, int, int]:
    found = VERSION.fullmatch(version)
    if not found:
        raise ValueError(f"{version!r} is no release version X.Y.Z")
    return int(found.group(1)), int(found.group(2)), int(found.group(3))


def load(path: pathlib.Path = RECORD) -> list[dict[str, Any]]:
    """The entries, oldest first; every version X.Y.Z, every commit a full hash, no
    version twice."""
    entries: list[dict[str, Any]] = json.loads(path.read_text())["releases"]
    seen: set[str] = set()
    for e in entries:
        key(e["version"])
        if not re.fullmatch(r"[0-9a-f]{40}", e.get("commit") or ""):
            raise ValueError(f"{path.name}: {e['version']}: commit {e.get('commit')!r}")
        if e["version"] in seen:
            raise ValueError(f"{path.name}: {e['version']} twice")
        seen.add(e["version"])
    return sorted(entries, key=lambda e: key(e["version"]))


def previous(path: pathlib.Path = RECORD) -> dict[str, Any]:
    """The newest recorded release: what the runtimes in the field run while this checkout's
    changes land (the skew tests run it beside this checkout)."""
    return load(path)[-1]


def check(version: str, head: str, entries: list[dict[str, Any]]) -> str | None:
    """Why ``version`` may not be released from commit ``head`` (None: it may): a recorded
    version only from its recorded commit; a new one only above every recorded one."""
    try:
        wanted = key(version)
    except ValueError as bad:
        return str(bad)
    for entry in entries:
        if entry["version"] == version:
            if entry["commit"] != head:
                return (
                    f"{version} was released from {entry['commit'][:12]} (releases.json), "
                    f"not {head[:12]}: raise the version"
                )
            return None
    newest = max(entries, key=lambda e: key(e["version"]), default=None)
    if newest and key(newest["version"]) >= wanted:
        return f"{version} is not above the newest release {newest['version']} (releases.json)"
    return None


def record(entry: dict[str, Any], path: pathlib.Path = RECORD) -> None:
    """``entry`` added to the record (replacing one of its version)."""
    doc = json.loads(path.read_text())
    doc["releases"] = [e for e in doc["releases"] if e["version"] != entry["version"]] + [entry]
    doc["releases"].sort(key=lambda e: key(e["version"]))
    path.write_text(json.dumps(doc, indent=2) + "\n")
