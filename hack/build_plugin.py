"""The kubectl plugin as a release artefact: ``kubectl-tether``, one file (a zipapp), and its
krew manifest.

    python hack/build_plugin.py OUT [--url URL]

writes ``OUT/kubectl-tether`` (an executable zip run by ``#!/usr/bin/env python3``),
``OUT/kubectl-tether-<version>.tar.gz`` (that file alone, what krew downloads) and
``OUT/plugins/tether.yaml`` (the krew manifest with the tarball's sha256; ``URL`` is where it
is published, default the release's).

What the file holds: the packages the plugin's commands import (command, tether, admin,
enroller: not the parts that run in pods) and, from this virtualenv (installed with hashes
from requirements.lock), every distribution they need, found by the metadata's requirements
from ``kubernetes``, ``cryptography``, ``PyYAML`` and ``requests`` (but aiohttp and its
family, which only kubernetes' asyncio client imports). Pure Python is taken as installed.
Three of them hold compiled code: cryptography's is abi3 (one build for every CPython from
3.11 on); pydantic-core and cffi are built per CPython version, so their wheels
for CPython 3.11, 3.12, 3.13 and 3.14 (manylinux x86_64) are downloaded by pip with the
hashes of requirements.lock (``--require-hashes``) and each goes into ``abi/cp3XX``. PyYAML's
and charset-normalizer's optional accelerators are left out (both fall back to their pure
Python code). Compiled code cannot be imported from a zip: on its first run the file
extracts itself into ``$XDG_CACHE_HOME/kubectl-tether/<its sha256>`` (default
``~/.cache``) and runs from there (docs/admin.md, "kubectl tether").
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import importlib.metadata
import io
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from pathlib import Path

import yaml
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("command", "tether", "admin", "enroller")
ROOTS = ("kubernetes", "cryptography", "PyYAML", "requests")
PER_VERSION = ("pydantic-core", "cffi")  # compiled per CPython version
# kubernetes' asyncio client (kubernetes_asyncio style): the plugin uses the synchronous one
ASYNC = frozenset(
    {"aiohttp", "aiohttp-retry", "aiohappyeyeballs", "aiosignal", "attrs", "frozenlist"}
    | {"multidict", "propcache", "yarl"}
)
PYTHONS = ("3.11", "3.12", "3.13", "3.14")
ZIP_EPOCH = (1980, 1, 1, 0, 0, 0)

BOOT = '''\
"""kubectl-tether: extracts itself once per version of this file, then runs the plugin."""
import hashlib, os, pathlib, sys, tempfile, zipfile

def main():
    here = pathlib.Path(__file__).resolve().parent  # the zip file itself
    tag = "cp%d%d" % sys.version_info[:2]
    with zipfile.ZipFile(here) as z:
        names = set(z.namelist())
        if sys.implementation.name != "cpython" or f"abi/{tag}/" not in names:
            sys.exit("kubectl-tether: needs CPython " + ", ".join(SUPPORTED)
                     + " on linux x86_64; this is " + sys.version.split()[0])
        digest = hashlib.sha256(here.read_bytes()).hexdigest()[:16]
        cache = pathlib.Path(os.environ.get("XDG_CACHE_HOME") or pathlib.Path.home() / ".cache")
        dest = cache / "kubectl-tether" / digest
        if not (dest / ".complete").exists():
            dest.parent.mkdir(parents=True, exist_ok=True)
            work = pathlib.Path(tempfile.mkdtemp(dir=dest.parent, prefix=".extract-"))
            z.extractall(work)
            (work / ".complete").touch()
            try:
                work.rename(dest)
            except OSError:  # another run extracted it meanwhile
                import shutil
                shutil.rmtree(work, ignore_errors=True)
    sys.path[:0] = [str(dest / "abi" / tag), str(dest / "site")]
    sys.path.remove(str(here)) if str(here) in sys.path else None
    from command import kubectl
    sys.exit(kubectl.main())

SUPPORTED = __SUPPORTED__
main()
'''


def say(msg: str) -> None:
    print(f"[build-plugin] {msg}", file=sys.stderr, flush=True)


def version() -> str:
    found = re.search(r"^version\s*=\s*(\S+)", (ROOT / "setup.cfg").read_text(), re.M)
    if not found:
        raise SystemExit("build-plugin: no version in setup.cfg")
    return found.group(1)


def closure(roots: tuple[str, ...]) -> list[importlib.metadata.Distribution]:
    """The installed distributions ``roots`` need (their requirements without extras whose
    markers hold here), each once."""
    seen: dict[str, importlib.metadata.Distribution] = {}
    todo = list(roots)
    while todo:
        name = canonicalize_name(todo.pop())
        if name in seen or name in ASYNC:
            continue
        dist = importlib.metadata.distribution(name)
        seen[name] = dist
        for spec in dist.requires or []:
            req = Requirement(spec)
            if req.marker is None or req.marker.evaluate({"extra": ""}):
                todo.append(req.name)
    return [seen[k] for k in sorted(seen)]


def lock_entry(name: str) -> str:
    """The lines of requirements.lock for ``name`` (its pin and every hash)."""
    text = (ROOT / "requirements.lock").read_text()
    found = re.search(
        rf"^{re.escape(name)}==\S+ \\\n(?:    --hash=sha256:[0-9a-f]{{64}}(?: \\)?\n)+", text, re.M
    )
    if not found:
        raise SystemExit(f"build-plugin: {name} is not in requirements.lock")
    return found.group(0)


def fetch_compiled(work: Path) -> dict[str, list[Path]]:
    """Python tag -> the wheels of PER_VERSION for it (pip download with hashes)."""
    wheels: dict[str, list[Path]] = {}
    reqs = work / "compiled.txt"
    reqs.write_text("".join(lock_entry(n) for n in PER_VERSION))
    for py in PYTHONS:
        dest = work / "wheels" / py
        done = subprocess.run(
            [
                sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--require-hashes",
                "--only-binary=:all:", "--implementation", "cp", "--python-version", py,
                "--platform", "manylinux_2_17_x86_64", "--platform", "manylinux2014_x86_64",
                "-d", str(dest), "-r", str(reqs),
            ],
            capture_output=True,
            text=True,
        )  # fmt: skip
        if done.returncode != 0:
            raise SystemExit(f"build-plugin: pip download for {py}: {done.stderr[-2000:]}")
        wheels["cp" + py.replace(".", "")] = sorted(dest.glob("*.whl"))
    return wheels


def copy_dist(dist: importlib.metadata.Distribution, site: Path) -> None:
    """A distribution's files (by its RECORD) into ``site``, without compiled modules but
    abi3 ones, scripts and caches."""
    base = Path(str(dist.locate_file("")))
    for f in dist.files or []:
        rel = Path(str(f))
        if rel.parts[0] in ("..", "bin") or "__pycache__" in rel.parts:
            continue
        if rel.suffix == ".so" and ".abi3." not in rel.name:
            continue
        src = base / rel
        if src.is_file():
            (site / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(src, site / rel)


def tree(work: Path, ver: str) -> Path:
    root = work / "root"
    site = root / "site"
    site.mkdir(parents=True)
    for package in PACKAGES:
        shutil.copytree(
            ROOT / package, site / package, ignore=shutil.ignore_patterns("__pycache__", "*.pyc")
        )
    info = site / f"tether-{ver}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: tether\nVersion: {ver}\n")
    dists = [d for d in closure(ROOTS) if canonicalize_name(d.metadata["Name"]) not in PER_VERSION]
    for dist in dists:
        copy_dist(dist, site)
    say(f"{len(dists)} distributions: " + ", ".join(sorted(d.metadata["Name"] for d in dists)))
    for tag, wheels in fetch_compiled(work).items():
        for wheel in wheels:
            with zipfile.ZipFile(wheel) as z:
                z.extractall(root / "abi" / tag)
    return root


def zipapp(root: Path, target: Path) -> None:
    """``root`` as an executable zip with fixed order and times (the same tree, the same
    file)."""
    supported = PYTHONS
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr(
            zipfile.ZipInfo("__main__.py", ZIP_EPOCH),
            BOOT.replace("__SUPPORTED__", repr(supported)),
        )
        for path in sorted(root.rglob("*")):
            name = path.relative_to(root).as_posix() + ("/" if path.is_dir() else "")
            info = zipfile.ZipInfo(name, ZIP_EPOCH)
            info.external_attr = (0o40755 if path.is_dir() else 0o100644) << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            z.writestr(info, b"" if path.is_dir() else path.read_bytes())
    target.write_bytes(b"#!/usr/bin/env python3\n" + buf.getvalue())
    target.chmod(0o755)


def tarball(binary: Path, target: Path) -> None:
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar:
        info = tar.gettarinfo(str(binary), arcname=binary.name)
        info.uid = info.gid = 0
        info.uname = info.gname = ""
        info.mtime = 0
        info.mode = 0o755
        with binary.open("rb") as f:
            tar.addfile(info, f)
    with target.open("wb") as out, gzip.GzipFile(fileobj=out, mode="wb", mtime=0) as gz:
        gz.write(raw.getvalue())


def krew(out: Path, ver: str, archive: Path, url: str) -> Path:
    manifest = {
        "apiVersion": "krew.googlecontainertools.github.com/v1alpha2",
        "kind": "Plugin",
        "metadata": {"name": "tether"},
        "spec": {
            "version": f"v{ver}",  # krew's own rule: a semantic version with a leading v
            "homepage": "https://github.com/kyma-project/tether",
            "shortDescription": "Tether's operator commands for a Kyma control plane",
            "description": (
                "kubectl tether status|records|explain|certs|mute|unmute|resync: the state of "
                "Tether's runtimes in a KCP. Needs CPython 3.11 to 3.14 (python3 on PATH)."
            ),
            "platforms": [
                {
                    "selector": {"matchLabels": {"os": "linux", "arch": "amd64"}},
                    "uri": f"{url}/{archive.name}",
                    "sha256": hashlib.sha256(archive.read_bytes()).hexdigest(),
                    "bin": "kubectl-tether",
                    "files": [{"from": "kubectl-tether", "to": "."}],
                }
            ],
        },
    }
    path = out / "plugins" / "tether.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(manifest, sort_keys=False))
    return path


def build(out: Path, url: str) -> Path:
    ver = version()
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="tether-plugin-") as scratch:
        root = tree(Path(scratch), ver)
        binary = out / "kubectl-tether"
        zipapp(root, binary)
    archive = out / f"kubectl-tether-{ver}.tar.gz"
    tarball(binary, archive)
    krew(out, ver, archive, url.rstrip("/"))
    say(f"{binary} ({binary.stat().st_size // 1024} KiB), {archive.name}, plugins/tether.yaml")
    return binary


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    p.add_argument("out", type=Path)
    p.add_argument(
        "--url",
        default=os.environ.get("TETHER_RELEASE_URL")
        or f"https://github.com/kyma-project/tether/releases/download/{version()}",
    )
    a = p.parse_args(argv)
    print(build(a.out.resolve(), a.url))
    return 0


if __name__ == "__main__":
    sys.exit(main())
