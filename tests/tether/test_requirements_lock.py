"""The image's Python packages come from hash-pinned lock files (`make lock`) that agree
with the versions CI tests (constraints.txt), and the Dockerfile installs only those."""

from __future__ import annotations

import re
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[2]
HASH = re.compile(r"--hash=sha256:[0-9a-f]{64}")


def locked(path: Path) -> dict[str, tuple[str, list[str]]]:
    """name -> (version, hashes) of a pip-compile --generate-hashes file; fails on any
    requirement that is not ``name==version`` with at least one sha256."""
    text = re.sub(r"\\\n\s*", " ", path.read_text())  # join continuation lines
    pins: dict[str, tuple[str, list[str]]] = {}
    for raw in text.splitlines():
        line = raw.split("#")[0].strip()
        if not line:
            continue
        assert not line.startswith("-"), f"{path.name}: an option line: {raw!r}"
        spec, *options = line.split()
        req = Requirement(spec)
        assert not req.url and len(req.specifier) == 1, raw
        (pin,) = req.specifier
        assert pin.operator == "==", raw
        hashes = [o for o in options if o.startswith("--hash=")]
        assert hashes and all(HASH.fullmatch(h) for h in hashes), (
            f"{path.name}: {spec} has no sha256"
        )
        assert len(hashes) == len(options), raw
        pins[canonicalize_name(req.name)] = (pin.version, hashes)
    return pins


def pinned(path: Path) -> dict[str, str]:
    """name -> version of a requirements file of ``name==version`` lines."""
    out: dict[str, str] = {}
    for raw in path.read_text().splitlines():
        line = raw.split("#")[0].strip()
        if line and not line.startswith("-"):
            req = Requirement(line)
            (pin,) = req.specifier
            out[canonicalize_name(req.name)] = pin.version
    return out


def test_every_runtime_pin_carries_hashes_and_constraints_versions() -> None:
    lock = locked(ROOT / "requirements.lock")
    constraints = pinned(ROOT / "constraints.txt")
    assert len(lock) > 20
    differ = {n: (v, constraints.get(n)) for n, (v, _) in lock.items() if constraints.get(n) != v}
    assert differ == {}, "requirements.lock disagrees with constraints.txt: make lock"
    direct = pinned(ROOT / "requirements.txt")
    assert {n: lock.get(n, ("missing",))[0] for n in direct} == direct
    dev_only = set(pinned(ROOT / "requirements-dev.txt")) - set(direct)
    assert sorted(dev_only & lock.keys()) == []  # the runtime set only


def test_the_dev_lock_is_the_runtime_lock_plus_the_tools_all_hashed() -> None:
    """``make venv`` installs requirements-dev.lock alone with --require-hashes: it must hold
    every runtime pin of requirements.lock (same version, same hashes), every dev tool at its
    pinned version, and the setuptools the image builds with (tether is built without build
    isolation from it)."""
    dev = locked(ROOT / "requirements-dev.lock")
    runtime = locked(ROOT / "requirements.lock")
    assert {n: dev.get(n) for n in runtime} == runtime
    tools = pinned(ROOT / "requirements-dev.txt")
    assert {n: dev.get(n, ("missing",))[0] for n in tools} == tools
    constraints = pinned(ROOT / "constraints.txt")
    differ = {
        n: (v, constraints[n])
        for n, (v, _) in dev.items()
        if n in constraints and constraints[n] != v
    }
    assert differ == {}, "requirements-dev.lock disagrees with constraints.txt: make lock"
    build = locked(ROOT / "requirements-build.lock")
    assert dev["setuptools"][0] == build["setuptools"][0]
    make = (ROOT / "Makefile").read_text()
    assert "pip install -q --require-hashes --no-deps -r requirements-dev.lock" in make
    assert "--no-build-isolation -e ." in make
    assert not re.search(r"pip install (?!.*--require-hashes)(?!.*-e \.).*-r ", make)


def test_build_lock_pins_what_requirements_build_names() -> None:
    lock = locked(ROOT / "requirements-build.lock")
    assert {n: v for n, (v, _) in lock.items()} == pinned(ROOT / "requirements-build.txt")
    assert not lock.keys() & locked(ROOT / "requirements.lock").keys()


def test_no_machine_specific_source_in_the_locks() -> None:
    for name in ("requirements.lock", "requirements-dev.lock", "requirements-build.lock"):
        text = (ROOT / name).read_text()
        assert not re.search(
            r"^\s*--(index-url|extra-index-url|find-links|trusted-host)", text, re.M
        ), name
        assert "/opt/" not in text and "/home/" not in text, name


def test_the_image_installs_only_hashed_packages() -> None:
    steps = [
        s
        for s in re.sub(r"\\\n", " ", (ROOT / "Dockerfile").read_text()).splitlines()
        if s.startswith("RUN ") and "pip install" in s
    ]
    hashed, local = steps
    assert "--require-hashes" in hashed and "--no-deps" in hashed
    assert "-r requirements.lock" in hashed and "-r requirements-build.lock" in hashed
    # tether itself, from the build context: no dependency and no build tool fetched
    assert re.search(r"pip install .*--no-deps --no-build-isolation \.(\s|$)", local), local
    assert "pip uninstall -q -y pip setuptools" in local
