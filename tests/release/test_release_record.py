"""The pure decisions of a release, on plain data: which version releases.json allows from a
commit (testing/releaserecord.py), the Debian packages read from a dpkg status file and the
SBOM's deb purls (hack/release.py), and the names the verifier refuses in SHA256SUMS
(hack/verify_release.py)."""

from __future__ import annotations

import importlib.util
import json
import pathlib
from typing import Any

import pytest

from testing import controlplane, releaserecord

ROOT = controlplane.REPO_ROOT
A = "a" * 40
B = "b" * 40


def _load(name: str) -> Any:
    spec = importlib.util.spec_from_file_location(name, ROOT / "hack" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


ENTRIES = [
    {"version": "0.1.0", "commit": A},
    {"version": "0.2.0", "commit": B},
]


@pytest.mark.parametrize(
    ("version", "head", "refused"),
    [
        ("0.2.0", B, None),  # the recorded release, from its commit (a re-run)
        ("0.3.0", A, None),  # a new version above every recorded one
        ("0.2.1", B, None),
        ("1.0.0", A, None),
        ("0.2.0", A, "0.2.0 was released from bbbbbbbbbbbb"),  # re-cut from another commit
        ("0.1.5", A, "not above the newest release 0.2.0"),
        ("0.1.0", B, "was released from"),
        ("v0.3.0", A, "no release version"),
        ("0.3.0rc1", A, "no release version"),
        ("0.03.0", A, "no release version"),
    ],
)
def test_the_record_decides_which_version_a_commit_may_release(
    version: str, head: str, refused: str | None
) -> None:
    got = releaserecord.check(version, head, ENTRIES)
    assert (got is None) if refused is None else (got is not None and refused in got), got


def test_the_committed_record_is_valid_and_names_the_previous_release() -> None:
    entries = releaserecord.load()
    assert entries[0]["version"] == "0.1.0"
    assert entries[0]["commit"].startswith("7f735a4")
    assert all(e["tag"] == e["version"] for e in entries)  # the tag is X.Y.Z
    assert releaserecord.previous() == entries[-1]


def test_a_record_with_a_version_twice_or_a_short_commit_is_refused(
    tmp_path: pathlib.Path,
) -> None:
    path = tmp_path / "releases.json"
    path.write_text(json.dumps({"releases": [*ENTRIES, {"version": "0.2.0", "commit": A}]}))
    with pytest.raises(ValueError, match="twice"):
        releaserecord.load(path)
    path.write_text(json.dumps({"releases": [{"version": "0.1.0", "commit": "7f735a4"}]}))
    with pytest.raises(ValueError, match="commit"):
        releaserecord.load(path)


def test_record_adds_or_replaces_in_version_order(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "releases.json"
    path.write_text(json.dumps({"comment": "kept", "releases": ENTRIES}))
    releaserecord.record({"version": "0.10.0", "commit": A, "image": "r@sha256:1"}, path)
    releaserecord.record({"version": "0.2.0", "commit": B, "image": "r@sha256:2"}, path)
    doc = json.loads(path.read_text())
    assert doc["comment"] == "kept"
    assert [e["version"] for e in doc["releases"]] == ["0.1.0", "0.2.0", "0.10.0"]
    assert doc["releases"][1]["image"] == "r@sha256:2"
    assert releaserecord.previous(path)["version"] == "0.10.0"  # 10 > 2, not text order


STATUS = """\
Package: libc6
Status: install ok installed
Architecture: amd64
Multi-Arch: same
Source: glibc
Version: 2.36-9+deb12u10
Description: GNU C Library: Shared libraries
 Contains the standard libraries.
 .
 More text: with a colon.

Package: removed-one
Status: deinstall ok config-files
Architecture: amd64
Version: 1.0-1

Package: python3.11-minimal
Status: install ok installed
Architecture: amd64
Source: python3.11 (3.11.2-6+deb12u6)
Version: 3.11.2-6+deb12u6

Package: base-files
Status: install ok installed
Architecture: amd64
Version: 1:12.4+deb12u11
"""


def test_debian_packages_are_the_installed_stanzas() -> None:
    release = _load("release")
    got = release.debian_packages(STATUS)
    assert [(d["name"], d["version"], d["source"]) for d in got] == [
        ("base-files", "1:12.4+deb12u11", ""),
        ("libc6", "2.36-9+deb12u10", "glibc"),
        ("python3.11-minimal", "3.11.2-6+deb12u6", "python3.11"),
    ]
    assert release.os_release('ID=debian\nVERSION_ID="12"\n# c\n') == {
        "ID": "debian",
        "VERSION_ID": "12",
    }


@pytest.mark.parametrize(
    "line",
    [
        f"{'0' * 64}  ../outside",
        f"{'0' * 64}  /etc/passwd",
        f"{'0' * 64}  manifests/../../x",
        f"{'0' * 63}  short",
        "not a line",
    ],
)
def test_the_verifier_refuses_names_outside_the_release(tmp_path: pathlib.Path, line: str) -> None:
    verify = _load("verify_release")
    (tmp_path / "SHA256SUMS").write_text(f"{'1' * 64}  release.json\n{line}\n")
    with pytest.raises(verify.Failed):
        verify.listed(tmp_path)


def test_a_release_without_its_key_is_refused(
    monkeypatch: pytest.MonkeyPatch, tmp_path: pathlib.Path
) -> None:
    """No TETHER_RELEASE_KEY: a release refuses (a snapshot would make a throwaway key); a
    key file that is not there is refused by name, without reading anything."""
    release = _load("release")
    monkeypatch.delenv("TETHER_RELEASE_KEY", raising=False)
    with pytest.raises(SystemExit, match="no signing key: set TETHER_RELEASE_KEY"):
        release.signing_key(False, tmp_path)
    monkeypatch.setenv("TETHER_RELEASE_KEY", str(tmp_path / "missing.key"))
    with pytest.raises(SystemExit, match="missing.key: no such file"):
        release.signing_key(True, tmp_path)
    (tmp_path / "release.key").write_text("not read here")
    monkeypatch.setenv("TETHER_RELEASE_KEY", str(tmp_path / "release.key"))
    assert release.signing_key(False, tmp_path) == (tmp_path / "release.key", "TETHER_RELEASE_KEY")
