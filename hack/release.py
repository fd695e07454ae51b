"""``make release``: the artefacts of one Tether release in ``dist/release/<version>/``.

* ``tether-<version>.oci.tar``: the image (``hack/build-image.sh``, buildah's layer cache makes
  it seconds when ``make image`` or tests/foundation ran) as an OCI archive
  (``buildah push oci-archive``), its manifest digest in ``image-digest`` and the reference
  every manifest uses in ``image-ref`` (``REGISTRY@sha256:...``);
* ``manifests/``: a copy of the repository's ``manifests/`` with both kustomizations'
  ``images:`` pinned to that reference, the enroller told to give it to the runtimes
  (``TETHER_ENROLLER_IMAGE``) and the alerts' runbook links pinned to the release's docs (the
  tag ``<version>``; a snapshot's commit): the base a landscape's overlays build on;
* the rendered forms (``kubectl kustomize`` of that copy): ``tether-kcp.yaml``,
  ``tether-kcp-watches.yaml``, ``tether-kcp-injector.yaml``, ``tether-kcp-cert-manager.yaml``,
  ``tether-skr.yaml``, ``tether-monitoring.yaml``; the Kyma module (hack/kyma_module.py, from
  manifests/module/module-config.yaml): ``tether-module.yaml`` (manifests/module, the
  runtime manifest), its OCM component ``module/`` (an OCI layout; ``make push-module``
  pushes it) with ``component-descriptor.yaml``, ``moduletemplate.yaml`` and
  ``modulereleasemeta.yaml``;
* ``sbom.cdx.json``: CycloneDX 1.5, every Python distribution installed in the image (read
  from the archive's own layers: the ``.dist-info/METADATA`` files under /opt/tether) and
  every Debian package (the layers' ``var/lib/dpkg/status``);
* ``release.json`` (version, commit, registry, digest, base image), ``cosign.pub`` and
  ``SHA256SUMS`` of every file; signed (cosign, hack/build-cosign.sh): ``SHA256SUMS.sig``
  and ``provenance.intoto.json`` (SLSA v1 provenance of the archive); hack/verify_release.py
  (``make verify-release``) checks them offline;
* ``kubectl-tether`` (the kubectl plugin, one file for CPython 3.11 to 3.14),
  ``kubectl-tether-<version>.tar.gz`` and its krew manifest ``plugins/tether.yaml``
  (hack/build_plugin.py);
* a release that is no snapshot adds its entry to ``releases.json`` (testing/releaserecord.py).

Settings (environment): ``TETHER_RELEASE_REGISTRY`` (the image's name without tag, default
``ghcr.io/kyma-project/tether``), ``TETHER_RELEASE_URL`` (where the files are published, for
the ModuleTemplate's link), ``SOURCE_DATE_EPOCH`` (default: the commit's time),
``TETHER_RELEASE_SNAPSHOT=1`` (a snapshot, from any checkout, also the clean tag
``<version>``; releases.json is not written), ``TETHER_RELEASE_KEY`` (the cosign private
key file that signs; its password in ``COSIGN_PASSWORD``; a snapshot without it signs with
a throwaway key).
docs/releasing.md has the policy and what is reproducible.
"""

from __future__ import annotations

import argparse
import email.parser
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any
from urllib.parse import quote

import yaml

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_REGISTRY = "ghcr.io/kyma-project/tether"
SITE = re.compile(r"opt/tether/lib/python3\.\d+/site-packages/([^/]+)\.dist-info/METADATA")
# rendered file -> the folder of the pinned manifests/ copy it is kubectl kustomize of
RENDERED = {
    "tether-kcp.yaml": "kcp",
    "tether-kcp-watches.yaml": "kcp/watches",
    "tether-kcp-injector.yaml": "kcp/injector",
    "tether-kcp-cert-manager.yaml": "overlays/cert-manager",
    "tether-skr.yaml": "skr",
    "tether-monitoring.yaml": "monitoring",
    "tether-module.yaml": "module",
}
# a Tether container image that is not pinned by digest
TAG_ONLY = re.compile(r"image: *[\"']?(?:\S*/)?tether(?::[^@\s\"']*)?[\"']?\s*$", re.M)
# the alerts' runbook_url base (manifests/monitoring/runbooks), pinned to the release's docs
RUNBOOK_BASE = Path("monitoring") / "runbooks" / "runbook-base.yaml"
# the files SHA256SUMS does not list: itself and the signatures (each signed on its own;
# ECDSA signatures differ on every run, the listed files are reproducible)
UNLISTED = ("SHA256SUMS", "SHA256SUMS.sig", "provenance.intoto.json")
IMAGES_BLOCK = re.compile(r"^images:\n  - name: tether\n    newTag: \S+\n", re.M)


def say(msg: str) -> None:
    print(f"[release] {msg}", file=sys.stderr, flush=True)


def run(*argv: str, env: dict[str, str] | None = None) -> str:
    done = subprocess.run(argv, cwd=ROOT, env=env, text=True, capture_output=True)
    if done.returncode != 0:
        raise SystemExit(
            f"release: {' '.join(argv[:3])} failed:\n{done.stdout[-3000:]}{done.stderr[-3000:]}"
        )
    return done.stdout


def version() -> str:
    found = re.search(r"^version\s*=\s*(\S+)", (ROOT / "setup.cfg").read_text(), re.M)
    if not found:
        raise SystemExit("release: no version in setup.cfg")
    return found.group(1)


def tag_of(ver: str) -> str:
    """The git tag of a release: the version itself, ``X.Y.Z``, as Kyma's projects tag
    (docs/releasing.md); the admin pages link the docs under it (admin/runbooks.py
    ``ref_of``)."""
    return ver


def plugin(out: Path, url: str) -> None:
    """``kubectl-tether``, its tarball and ``plugins/tether.yaml`` (hack/build_plugin.py)."""
    sys.path.insert(0, str(ROOT / "hack"))
    import build_plugin

    build_plugin.build(out, url)


def releaserecord() -> Any:
    sys.path.insert(0, str(ROOT))
    from testing import releaserecord as record

    return record


def check_tag(ver: str, snapshot: bool) -> tuple[str, bool]:
    """The commit; refuses a checkout that is not the clean tag <version> (a release is cut
    from its tag, docs/releasing.md), or a version releases.json does not allow from it,
    unless ``snapshot``; a snapshot is a snapshot whatever the checkout."""
    head = run("git", "rev-parse", "HEAD").strip()
    tagged = subprocess.run(
        ["git", "rev-parse", "-q", "--verify", f"{tag_of(ver)}^{{commit}}"],
        cwd=ROOT,
        text=True,
        capture_output=True,
    ).stdout.strip()
    dirty = bool(run("git", "status", "--porcelain", "--untracked-files=no").strip())
    record = releaserecord()
    refused = record.check(ver, head, record.load())
    if tagged == head and not dirty and not refused and not snapshot:
        return head, False
    if not snapshot:
        raise SystemExit(
            f"release: {refused}; or TETHER_RELEASE_SNAPSHOT=1 for a snapshot"
            if tagged == head and not dirty
            else f"release: HEAD {head[:12]} is not the tag {tag_of(ver)} "
            f"({tagged[:12] or 'none'}){' and has local changes' if dirty else ''}: bump "
            "setup.cfg and tag (docs/releasing.md), or TETHER_RELEASE_SNAPSHOT=1 for a snapshot"
        )
    say(
        f"SNAPSHOT of HEAD {head[:12]} (TETHER_RELEASE_SNAPSHOT=1)"
        f"{f' ({refused})' if refused else ''}: the artefacts are not the release {ver}"
    )
    return head, True


def build_and_archive(ver: str, registry: str, out: Path, build: bool = True) -> str:
    """Builds (or reuses) tether:<version>, writes the OCI archive; returns its digest."""
    if build:
        say("building the image (hack/build-image.sh)")
        run("bash", "hack/build-image.sh")
    archive = out / f"tether-{ver}.oci.tar"
    layout = out / ".oci"
    digest_file = out / ".digest"
    say(f"writing {archive.name}")
    run(
        "buildah",
        "push",
        "-q",
        "--format",
        "oci",
        "--digestfile",
        str(digest_file),
        f"tether:{ver}",
        f"oci:{layout}:{registry}:{ver}",
    )
    digest = digest_file.read_text().strip()
    digest_file.unlink()
    if not re.fullmatch(r"sha256:[0-9a-f]{64}", digest):
        raise SystemExit(f"release: buildah wrote no digest ({digest!r})")
    tar_layout(layout, archive)
    shutil.rmtree(layout)
    return digest


def tar_layout(layout: Path, archive: Path) -> None:
    """The OCI layout as an oci-archive (a tar of the layout, what ``buildah push
    oci-archive:`` writes) with fixed order, owners and times: the same image gives the
    same archive, byte for byte (buildah's own archive differs on every push)."""

    def fixed(info: tarfile.TarInfo) -> tarfile.TarInfo:
        info.uid = info.gid = 0
        info.uname = info.gname = ""
        info.mtime = 0
        info.mode = 0o755 if info.isdir() else 0o644
        return info

    with tarfile.open(archive, "w", format=tarfile.PAX_FORMAT) as tar:
        for path in sorted(layout.rglob("*")):
            tar.add(
                path, arcname=path.relative_to(layout).as_posix(), recursive=False, filter=fixed
            )


def pin_manifests(out: Path, ref: str) -> Path:
    """A copy of manifests/ with the image pinned in both kustomizations and the enroller's
    TETHER_ENROLLER_IMAGE set to it (the runtimes' image, docs/operations.md)."""
    tree = out / "manifests"
    shutil.copytree(ROOT / "manifests", tree, ignore=shutil.ignore_patterns("tests", "__pycache__"))
    name, digest = ref.split("@", 1)
    pinned = f"images:\n  - name: tether\n    newName: {name}\n    digest: {digest}\n"
    for path in sorted(tree.rglob("kustomization.yaml")):
        text, n = IMAGES_BLOCK.subn(pinned, path.read_text())
        if n == 0 and re.search(r"^images:", text, re.M):
            raise SystemExit(
                f"release: {path.relative_to(out)}: an `images:` entry that is not tether's"
            )
        # a kustomization without one (kcp/injector) gets it; where nothing is named tether
        # (or an included base pinned it already) kustomize changes nothing
        path.write_text(
            text if n else f"{text.rstrip()}\n# make release (hack/release.py)\n{pinned}"
        )
    enroller = [
        {
            "op": "add",
            "path": "/spec/template/spec/containers/0/env/-",
            "value": {"name": "TETHER_ENROLLER_IMAGE", "value": ref},
        }
    ]
    with (tree / "kcp" / "kustomization.yaml").open("a") as f:
        f.write("# make release: the runtimes get the release's image (hack/release.py)\n")
        f.write(
            yaml.safe_dump(
                {
                    "patches": [
                        {
                            "target": {"kind": "Deployment", "name": "tether-enroller"},
                            "patch": yaml.safe_dump(enroller),
                        }
                    ]
                },
                sort_keys=False,
            )
        )
    return tree


def pin_runbooks(tree: Path, git_ref: str) -> bool:
    """The alerts' runbook base in the manifests copy ``tree`` pinned to ``git_ref`` (the
    release's tag, a snapshot's commit) when it points at the project's docs on GitHub (a
    base changed to a mirror is left alone); whether it was pinned."""
    f = tree / RUNBOOK_BASE
    text, n = re.subn(
        r"^(  base: https://github\.com/kyma-project/tether/blob/)\S+$",
        lambda m: m.group(1) + git_ref,
        f.read_text(),
        flags=re.M,
    )
    if n:
        f.write_text(text)
    return bool(n)


def kubectl() -> str:
    sys.path.insert(0, str(ROOT))
    from testing import controlplane

    return str(controlplane.binaries() / "kubectl")


def render(out: Path, tree: Path, ver: str) -> None:
    binary = kubectl()
    for name, folder in RENDERED.items():
        rendered = run(binary, "kustomize", str(tree / folder))
        if TAG_ONLY.search(rendered):
            raise SystemExit(
                f"release: manifests/{folder} still names an image by tag: "
                f"{TAG_ONLY.search(rendered)}"
            )
        (out / name).write_text(
            f"# Tether {ver}: kubectl kustomize manifests/{folder} (hack/release.py)\n" + rendered
        )


def kyma_module(out: Path, ver: str, ref: str, url: str) -> None:
    """The Kyma module from manifests/module/module-config.yaml (hack/kyma_module.py): the
    OCM component as an OCI layout (``module/``, its raw-manifest the bytes of
    ``tether-module.yaml``), ``component-descriptor.yaml``, ``moduletemplate.yaml`` and
    ``modulereleasemeta.yaml``."""
    sys.path.insert(0, str(ROOT / "hack"))
    import kyma_module as km

    raw = (out / "tether-module.yaml").read_bytes()
    module = km.build(km.load_config(), ver, ref, raw, f"{url}/tether-module.yaml")
    km.write(out, module, f"# Tether {ver}: the Kyma module (hack/kyma_module.py)")


def image_distributions(archive: Path) -> dict[str, dict[str, str]]:
    """Name -> METADATA fields of every distribution in the image's virtualenv, applying
    the layers in order (a whiteout removes what an earlier layer had)."""
    return image_contents(archive)[0]


def debian_packages(status: str) -> list[dict[str, str]]:
    """The installed packages of a dpkg status file (``var/lib/dpkg/status``): name,
    version, architecture and source package, for every stanza whose Status is
    ``install ok installed`` (removed packages keep a stanza with another Status)."""
    out = []
    for stanza in re.split(r"\n\s*\n", status.strip()):
        fields: dict[str, str] = {}
        key = ""
        for line in stanza.splitlines():
            if line[:1] in (" ", "\t"):
                continue  # a continuation line (Description, Conffiles): not needed
            key, _, value = line.partition(":")
            fields[key.strip()] = value.strip()
        if fields.get("Status") != "install ok installed" or not fields.get("Package"):
            continue
        out.append(
            {
                "name": fields["Package"],
                "version": fields.get("Version", ""),
                "arch": fields.get("Architecture", ""),
                # "Source: name (version)" when the source's version differs
                "source": fields.get("Source", "").split(" ")[0],
            }
        )
    return sorted(out, key=lambda d: d["name"])


def os_release(text: str) -> dict[str, str]:
    return {
        k: v.strip().strip('"')
        for k, _, v in (line.partition("=") for line in text.splitlines())
        if k and not k.startswith("#")
    }


def image_contents(archive: Path) -> tuple[dict[str, dict[str, str]], str, str]:
    """(the Python distributions as ``image_distributions``, the dpkg status file, the
    os-release file) of the image, applying the layers in order."""
    found: dict[str, dict[str, str]] = {}
    texts = {"var/lib/dpkg/status": "", "etc/os-release": "", "usr/lib/os-release": ""}
    with tarfile.open(archive) as outer:

        def blob(digest: str) -> Any:
            f = outer.extractfile("blobs/sha256/" + digest.removeprefix("sha256:"))
            assert f is not None
            return f

        index = json.load(blob_index(outer))
        manifest = json.load(blob(index["manifests"][0]["digest"]))
        for layer in manifest["layers"]:
            with tarfile.open(fileobj=blob(layer["digest"]), mode="r|*") as tar:
                for entry in tar:
                    path = entry.name.removeprefix("./")
                    if "/.wh." in f"/{path}":
                        gone = path.replace(".wh.", "", 1)
                        found = {k: v for k, v in found.items() if not v["path"].startswith(gone)}
                        texts = {k: "" if k.startswith(gone) else v for k, v in texts.items()}
                        continue
                    if path in texts and entry.isfile():
                        f = tar.extractfile(entry)
                        assert f is not None
                        texts[path] = f.read().decode("utf-8", "replace")
                        continue
                    match = SITE.fullmatch(path)
                    if match and entry.isfile():
                        f = tar.extractfile(entry)
                        assert f is not None
                        meta = email.parser.BytesParser().parsebytes(f.read(), headersonly=True)
                        found[meta["Name"]] = {
                            "name": meta["Name"],
                            "version": meta["Version"],
                            "license": meta.get("License-Expression") or "",
                            "path": path.rsplit("/", 1)[0],
                        }
    return (
        found,
        texts["var/lib/dpkg/status"],
        texts["etc/os-release"] or texts["usr/lib/os-release"],
    )


def blob_index(outer: tarfile.TarFile) -> Any:
    f = outer.extractfile("index.json")
    assert f is not None
    return f


def normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def sbom(archive: Path, ver: str, registry: str, digest: str, epoch: int) -> dict[str, Any]:
    """CycloneDX 1.5 (JSON) of the image: the image as the described component, every
    Python distribution of its virtualenv as a library with its PyPI purl, every Debian
    package of its dpkg database (the base's) with its deb purl."""
    components = []
    dists, status, release_file = image_contents(archive)
    for dist in sorted(dists.values(), key=lambda d: normalize(d["name"])):
        c: dict[str, Any] = {
            "type": "library",
            "bom-ref": f"pkg:pypi/{normalize(dist['name'])}@{dist['version']}",
            "name": dist["name"],
            "version": dist["version"],
            "purl": f"pkg:pypi/{normalize(dist['name'])}@{dist['version']}",
        }
        if dist["license"]:
            c["licenses"] = [{"expression": dist["license"]}]
        components.append(c)
    distro = os_release(release_file)
    qualifier = f"distro={distro.get('ID', 'debian')}-{distro.get('VERSION_ID', '')}"
    for deb in debian_packages(status):
        purl = (
            f"pkg:deb/{distro.get('ID', 'debian')}/{quote(deb['name'])}@"
            f"{quote(deb['version'], safe='.-_~')}?arch={deb['arch']}&{qualifier}"
        )
        c = {"type": "library", "bom-ref": purl, "name": deb["name"], "version": deb["version"]}
        c["purl"] = purl
        if deb["source"] and deb["source"] != deb["name"]:
            c["properties"] = [{"name": "debian:source", "value": deb["source"]}]
        components.append(c)
    image_purl = f"pkg:oci/tether@{digest.replace(':', '%3A')}?repository_url={registry}&tag={ver}"
    return {
        "bomFormat": "CycloneDX",
        "specVersion": "1.5",
        "serialNumber": f"urn:uuid:{uuid.uuid5(uuid.NAMESPACE_URL, f'{registry}@{digest}')}",
        "version": 1,
        "metadata": {
            "timestamp": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(epoch)),
            "tools": {
                "components": [
                    {"type": "application", "name": "tether hack/release.py", "version": ver}
                ]
            },
            "component": {
                "type": "container",
                "bom-ref": image_purl,
                "name": registry,
                "version": ver,
                "purl": image_purl,
                "hashes": [{"alg": "SHA-256", "content": digest.removeprefix("sha256:")}],
            },
        },
        "components": components,
    }


def file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def image_labels(archive: Path, digest: str) -> dict[str, str]:
    """The image config's labels, read from the archive (the manifest of ``digest``)."""
    with tarfile.open(archive) as outer:

        def read(d: str) -> Any:
            f = outer.extractfile("blobs/sha256/" + d.removeprefix("sha256:"))
            assert f is not None
            return json.load(f)

        config = read(read(digest)["config"]["digest"])
    return dict(config.get("config", {}).get("Labels") or {})


def provenance_predicate(
    ver: str,
    registry: str,
    digest: str,
    commit: str,
    snapshot: bool,
    epoch: int,
    base: tuple[str, str],
) -> dict[str, Any]:
    """SLSA v1 provenance (https://slsa.dev/provenance/v1) of the image archive: the
    command, the commit, the lock files and the Dockerfile it was built from, the base
    image by digest; cosign attest-blob wraps it in an in-toto statement whose subject is
    the archive's sha256 (docs/releasing.md)."""
    deps: list[dict[str, Any]] = [
        {
            "uri": f"git+https://github.com/kyma-project/tether@{commit}",
            "digest": {"gitCommit": commit},
        }
    ]
    for name in ("Dockerfile", "requirements.lock", "requirements-build.lock"):
        deps.append({"uri": name, "digest": {"sha256": file_sha256(ROOT / name)}})
    base_name, base_digest = base
    if base_digest:
        deps.append(
            {
                "uri": f"oci://{base_name.split('@')[0]}",
                "digest": {"sha256": base_digest.removeprefix("sha256:")},
                "annotations": {"role": "base image"},
            }
        )
    return {
        "buildDefinition": {
            "buildType": "https://github.com/kyma-project/tether/blob/main/docs/releasing.md",
            "externalParameters": {
                "command": "make release (hack/release.py)",
                "version": ver,
                "registry": registry,
                "snapshot": snapshot,
                "source": f"git+https://github.com/kyma-project/tether@{commit}",
            },
            "internalParameters": {"SOURCE_DATE_EPOCH": epoch},
            "resolvedDependencies": deps,
        },
        "runDetails": {
            "builder": {"id": "https://github.com/kyma-project/tether/blob/main/hack/release.py"},
            # no times: the same image gives the same statement (docs/releasing.md)
            "metadata": {"invocationId": f"{commit}:{ver}"},
            "byproducts": [
                {
                    "name": "image",
                    "uri": f"{registry}@{digest}",
                    "digest": {"sha256": digest.removeprefix("sha256:")},
                    "mediaType": "application/vnd.oci.image.manifest.v1+json",
                }
            ],
        },
    }


def cosign() -> str:
    """The pinned cosign (hack/build-cosign.sh: built from its Go module, cached)."""
    return run("bash", "hack/build-cosign.sh").strip().splitlines()[-1]


def signing_key(snapshot: bool, scratch: Path) -> tuple[Path, str]:
    """The private key file and where it came from: ``TETHER_RELEASE_KEY`` (a cosign key;
    its password in ``COSIGN_PASSWORD``), or for a snapshot without one a throwaway key
    made in ``scratch`` (never in the release folder)."""
    named = os.environ.get("TETHER_RELEASE_KEY")
    if named:
        key = Path(named)
        if not key.is_file():
            raise SystemExit(f"release: TETHER_RELEASE_KEY {named}: no such file")
        return key, "TETHER_RELEASE_KEY"
    if not snapshot:
        raise SystemExit(
            "release: no signing key: set TETHER_RELEASE_KEY to the release key's file "
            "(cosign, its password in COSIGN_PASSWORD; docs/releasing.md)"
        )
    say("SNAPSHOT: no TETHER_RELEASE_KEY, signing with a throwaway key")
    run(
        cosign(),
        "generate-key-pair",
        "--output-key-prefix",
        str(scratch / "throwaway"),
        env=dict(os.environ, COSIGN_PASSWORD=""),
    )
    os.environ["COSIGN_PASSWORD"] = ""
    return scratch / "throwaway.key", "throwaway"


def sign(out: Path, key: Path, archive: Path, predicate: dict[str, Any]) -> None:
    """``cosign.pub``; ``provenance.intoto.json`` (cosign attest-blob: a DSSE envelope of
    the in-toto statement, subject the archive); ``SHA256SUMS`` then ``SHA256SUMS.sig``
    (cosign sign-blob: SHA256SUMS lists every other file, the manifests and the archive
    with them). Offline: no transparency log (--tlog-upload=false), the key is the trust."""
    binary = cosign()
    env = dict(os.environ)
    env.setdefault("COSIGN_PASSWORD", "")
    (out / "cosign.pub").write_text(run(binary, "public-key", "--key", str(key), env=env))
    with tempfile.TemporaryDirectory() as scratch:
        pred = Path(scratch) / "predicate.json"
        pred.write_text(json.dumps(predicate, indent=2))
        run(
            binary,
            "attest-blob",
            "--yes",
            "--key",
            str(key),
            "--tlog-upload=false",
            "--type",
            "slsaprovenance1",
            "--predicate",
            str(pred),
            "--output-signature",
            str(out / "provenance.intoto.json"),
            str(archive),
            env=env,
        )
    checksums(out)
    run(
        binary,
        "sign-blob",
        "--yes",
        "--key",
        str(key),
        "--tlog-upload=false",
        "--output-signature",
        str(out / "SHA256SUMS.sig"),
        str(out / "SHA256SUMS"),
        env=env,
    )


def record_release(out: Path, ver: str, commit: str, ref: str, epoch: int) -> None:
    """The release's entry in releases.json (commit it: docs/releasing.md)."""
    releaserecord().record(
        {
            "version": ver,
            "tag": tag_of(ver),
            "commit": commit,
            "date": time.strftime("%Y-%m-%d", time.gmtime(epoch)),
            "image": ref,
            "manifests": {
                name: file_sha256(out / name) for name in [*RENDERED, "moduletemplate.yaml"]
            },
            "sha256sums": file_sha256(out / "SHA256SUMS"),
            "key": file_sha256(out / "cosign.pub"),
        }
    )
    say(f"recorded {ver} in releases.json: commit it (docs/releasing.md)")


def checksums(out: Path) -> None:
    lines = []
    for path in sorted(p for p in out.rglob("*") if p.is_file() and p.name not in UNLISTED):
        lines.append(f"{file_sha256(path)}  {path.relative_to(out).as_posix()}\n")
    (out / "SHA256SUMS").write_text("".join(lines))


def settle(out: Path, epoch: int) -> None:
    """Every file's mtime at SOURCE_DATE_EPOCH (an archive of the folder is then the same)."""
    for path in [*out.rglob("*"), out]:
        os.utime(path, (epoch, epoch), follow_symlinks=False)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    p.add_argument(
        "--registry", default=os.environ.get("TETHER_RELEASE_REGISTRY") or DEFAULT_REGISTRY
    )
    p.add_argument("--out", type=Path, help="default: dist/release/<version>")
    p.add_argument(
        "--url",
        default=os.environ.get("TETHER_RELEASE_URL"),
        help="where the files are published (the ModuleTemplate's link)",
    )
    p.add_argument(
        "--no-build",
        action="store_true",
        help="archive the image tether:<version> as it is (no hack/build-image.sh)",
    )
    a = p.parse_args(argv)
    if not re.fullmatch(r"[a-z0-9][a-z0-9.:-]*(/[a-z0-9._-]+)*/tether", a.registry):
        raise SystemExit(
            f"release: --registry {a.registry!r}: a repository name ending in /tether, "
            "without tag or digest (e.g. ghcr.io/kyma-project/tether)"
        )
    ver = version()
    commit, snapshot = check_tag(ver, os.environ.get("TETHER_RELEASE_SNAPSHOT") == "1")
    scratch = Path(tempfile.mkdtemp(prefix="tether-release-"))  # a throwaway key, never in out
    try:
        return release(a, ver, commit, snapshot, scratch)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def release(a: argparse.Namespace, ver: str, commit: str, snapshot: bool, scratch: Path) -> int:
    key, key_source = signing_key(snapshot, scratch)
    epoch = int(
        os.environ.get("SOURCE_DATE_EPOCH") or run("git", "log", "-1", "--format=%ct").strip()
    )
    url = a.url or f"https://github.com/kyma-project/tether/releases/download/{tag_of(ver)}"
    out: Path = (a.out or ROOT / "dist" / "release" / ver).resolve()
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    digest = build_and_archive(ver, a.registry, out, build=not a.no_build)
    ref = f"{a.registry}@{digest}"
    (out / "image-digest").write_text(digest + "\n")
    (out / "image-ref").write_text(ref + "\n")
    tree = pin_manifests(out, ref)
    if not pin_runbooks(tree, commit if snapshot else tag_of(ver)):
        say(f"manifests/{RUNBOOK_BASE}: base not on github.com/kyma-project/tether, kept")
    render(out, tree, ver)
    kyma_module(out, ver, ref, url.rstrip("/"))
    say("writing kubectl-tether (the plugin, hack/build_plugin.py) and its krew manifest")
    plugin(out, url)
    archive = out / f"tether-{ver}.oci.tar"
    say("writing sbom.cdx.json (the image's /opt/tether distributions, its Debian packages)")
    (out / "sbom.cdx.json").write_text(
        json.dumps(sbom(archive, ver, a.registry, digest, epoch), indent=2) + "\n"
    )
    labels = image_labels(archive, digest)
    base = (
        labels.get("org.opencontainers.image.base.name", ""),
        labels.get("org.opencontainers.image.base.digest", ""),
    )
    (out / "release.json").write_text(
        json.dumps(
            {
                "version": ver,
                "commit": commit,
                "snapshot": snapshot,
                "registry": a.registry,
                "image": ref,
                "digest": digest,
                "source_date_epoch": epoch,
                "url": url,
                "base_image": f"{base[0].split('@')[0]}@{base[1]}" if base[1] else base[0],
                "signing_key": key_source,
            },
            indent=2,
        )
        + "\n"
    )
    say("signing: provenance.intoto.json (the archive), SHA256SUMS.sig (every file)")
    sign(
        out,
        key,
        archive,
        provenance_predicate(ver, a.registry, digest, commit, snapshot, epoch, base),
    )
    settle(out, epoch)
    if not snapshot:
        record_release(out, ver, commit, ref, epoch)
    say(f"done: {out} ({ref})")
    print(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
