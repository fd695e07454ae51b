"""``make verify-release``: what a landscape checks, offline, before it applies a release.

    python hack/verify_release.py DIR [--key cosign.pub]

DIR is a release folder as ``make release`` writes it (hack/release.py). In order, each
failure ends the run with ``FAIL: ...`` and exit status 1:

1. ``SHA256SUMS.sig`` is cosign's signature of ``SHA256SUMS`` under the key
   (``cosign verify-blob``; the key: ``--key``, by default the folder's ``cosign.pub``,
   which a landscape compares with the key it pinned);
2. every file ``SHA256SUMS`` lists has that sha256, and the folder holds no file it does not
   list (but ``SHA256SUMS``, its signature and the provenance): the archive, the manifests,
   the renders, the SBOM are the signed ones;
3. ``provenance.intoto.json`` is a signed in-toto statement (``cosign
   verify-blob-attestation``, type SLSA provenance v1) whose subject is the archive's sha256;
4. the image in it is the one everything names: the provenance's image digest, the archive's
   own index, ``image-digest``, ``image-ref`` and ``release.json`` agree, and the manifest blob
   in the archive has that digest.

No network: cosign is told not to look for a transparency log entry (the release is signed
without one, docs/releasing.md). The files are read only as far as each step needs; names in
``SHA256SUMS`` are taken only after its signature verified, and only inside DIR.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
import os
import re
import subprocess
import sys
import tarfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
UNLISTED = ("SHA256SUMS", "SHA256SUMS.sig", "provenance.intoto.json")
SLSA = "https://slsa.dev/provenance/v1"
# cosign 2 writes in-toto Statement v0.1 (the same fields as v1)
STATEMENTS = ("https://in-toto.io/Statement/v0.1", "https://in-toto.io/Statement/v1")


class Failed(Exception):
    pass


def ok(msg: str) -> None:
    print(f"ok: {msg}", flush=True)


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def cosign() -> str:
    done = subprocess.run(
        ["bash", "hack/build-cosign.sh"], cwd=ROOT, capture_output=True, text=True
    )
    if done.returncode != 0:
        raise Failed(f"cannot build cosign (hack/build-cosign.sh): {done.stderr[-2000:]}")
    return done.stdout.strip().splitlines()[-1]


def run_cosign(*argv: str) -> None:
    done = subprocess.run([cosign(), *argv], capture_output=True, text=True)
    if done.returncode != 0:
        raise Failed(f"cosign {argv[0]}: {(done.stderr or done.stdout).strip()[-1500:]}")


def listed(folder: Path) -> dict[str, str]:
    """Name -> sha256 of SHA256SUMS; names that leave the folder are refused."""
    out: dict[str, str] = {}
    for line in (folder / "SHA256SUMS").read_text().splitlines():
        found = re.fullmatch(r"([0-9a-f]{64})  (\S.*)", line)
        if not found:
            raise Failed(f"SHA256SUMS: a line that is no 'sha256  name': {line[:100]!r}")
        name = found.group(2)
        parts = Path(name).parts
        if name.startswith("/") or ".." in parts or not parts:
            raise Failed(f"SHA256SUMS: {name!r} is not a file inside the release")
        out[name] = found.group(1)
    return out


def check_files(folder: Path) -> dict[str, str]:
    sums = listed(folder)
    for name, digest in sorted(sums.items()):
        path = folder / name
        if not path.is_file() or path.is_symlink():
            raise Failed(f"{name}: listed in SHA256SUMS, missing")
        if sha256(path) != digest:
            raise Failed(f"{name}: sha256 differs from SHA256SUMS")
    present = {
        p.relative_to(folder).as_posix()
        for p in folder.rglob("*")
        if (p.is_file() or p.is_symlink()) and p.relative_to(folder).as_posix() not in UNLISTED
    }
    if present - sums.keys():
        raise Failed(f"files not in SHA256SUMS: {sorted(present - sums.keys())[:10]}")
    return sums


def statement(folder: Path) -> dict[str, Any]:
    envelope = json.loads((folder / "provenance.intoto.json").read_text())
    if envelope.get("payloadType") != "application/vnd.in-toto+json":
        raise Failed(f"provenance.intoto.json: payloadType {envelope.get('payloadType')!r}")
    doc: dict[str, Any] = json.loads(base64.b64decode(envelope["payload"]))
    if doc.get("_type") not in STATEMENTS or doc.get("predicateType") != SLSA:
        raise Failed(
            f"provenance: {doc.get('_type')!r} / {doc.get('predicateType')!r}, "
            f"not an in-toto statement of {SLSA}"
        )
    return doc


def archive_digest(archive: Path) -> str:
    """The manifest digest of the archive's one image, checked against its blob."""
    with tarfile.open(archive) as tar:

        def read(name: str) -> bytes:
            f = tar.extractfile(name)
            if f is None:
                raise Failed(f"{archive.name}: no {name}")
            return f.read()

        (entry,) = json.loads(read("index.json"))["manifests"]
        digest = str(entry["digest"])
        if not re.fullmatch(r"sha256:[0-9a-f]{64}", digest):
            raise Failed(f"{archive.name}: index.json names {digest[:80]!r}")
        blob = read("blobs/sha256/" + digest.removeprefix("sha256:"))
        if "sha256:" + hashlib.sha256(blob).hexdigest() != digest:
            raise Failed(f"{archive.name}: the manifest blob is not {digest}")
        return digest


def verify(folder: Path, key: Path) -> None:
    for name in ("SHA256SUMS", "SHA256SUMS.sig", "provenance.intoto.json", "release.json"):
        if not (folder / name).is_file():
            raise Failed(f"{name}: missing from {folder}")
    if not key.is_file():
        raise Failed(f"the public key {key}: no such file")
    # 1. the list of every file is signed by the key
    run_cosign(
        "verify-blob", "--key", str(key), "--signature", str(folder / "SHA256SUMS.sig"),
        "--insecure-ignore-tlog=true", str(folder / "SHA256SUMS"),
    )  # fmt: skip
    ok("SHA256SUMS is signed by the key")
    # 2. every file is the listed one
    sums = check_files(folder)
    ok(f"{len(sums)} files match SHA256SUMS; no other file")
    facts = json.loads((folder / "release.json").read_text())
    archive = folder / f"tether-{facts['version']}.oci.tar"
    if archive.name not in sums:
        raise Failed(f"{archive.name}: not in SHA256SUMS")
    # 3. the provenance is signed and its subject is the archive
    run_cosign(
        "verify-blob-attestation", "--key", str(key),
        "--signature", str(folder / "provenance.intoto.json"),
        "--type", "slsaprovenance1", "--insecure-ignore-tlog=true", str(archive),
    )  # fmt: skip
    doc = statement(folder)
    subjects = {s["digest"].get("sha256") for s in doc.get("subject", [])}
    if subjects != {sums[archive.name]}:
        raise Failed(f"provenance: subject {sorted(map(str, subjects))} is not {archive.name}")
    ok(f"provenance.intoto.json is signed; its subject is {archive.name}")
    # 4. one image digest everywhere
    image = [
        b["digest"]["sha256"]
        for b in doc["predicate"]["runDetails"].get("byproducts", [])
        if b.get("name") == "image"
    ]
    digest = archive_digest(archive)
    named = {
        "provenance": "sha256:" + image[0] if image else "",
        "image-digest": (folder / "image-digest").read_text().strip(),
        "release.json": facts["digest"],
        "image-ref": (folder / "image-ref").read_text().strip().rsplit("@", 1)[-1],
    }
    wrong = {k: v for k, v in named.items() if v != digest}
    if wrong:
        raise Failed(f"the archive's image is {digest}; named otherwise by {wrong}")
    ok(f"the image {digest}: the archive's, the provenance's, image-ref's")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    p.add_argument("folder", type=Path)
    p.add_argument("--key", type=Path, help="the public key (default: FOLDER/cosign.pub)")
    a = p.parse_args(argv)
    folder = a.folder.resolve()
    try:
        verify(folder, (a.key or folder / "cosign.pub").resolve())
    except (Failed, OSError, ValueError, KeyError, TypeError, tarfile.TarError) as e:
        print(f"FAIL: {e}", file=sys.stderr, flush=True)
        return 1
    print(f"verified: {folder}", flush=True)
    return 0


if __name__ == "__main__":
    os.environ.setdefault("COSIGN_EXPERIMENTAL", "0")
    sys.exit(main())
