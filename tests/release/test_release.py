"""The release's own test: ``hack/release.py`` (what ``make release`` runs) on this checkout,
then its artefacts checked as a landscape would use them. The checksums verify; every
Tether image in every rendered manifest (and the ModuleTemplate, and the image the enroller
gives the runtimes) is ``REGISTRY@sha256:<the archive's digest>``; the SBOM lists every
package of requirements.lock at its version; the ModuleTemplate is accepted by
lifecycle-manager's real CRD on a real apiserver (and a wrong one refused); the release's
manifests install on fresh local planes (``testing.deployed``, pointed at the release's
``manifests/`` copy instead of the checkout's) and the parts run: every Deployment ready, the
runtime enrolled and Ready, a customer's ConfigMap arriving in the KCP.

The image build is ``hack/build-image.sh``, as in tests/foundation/test_image.py: in one
session the second build is buildah's layer cache (seconds), not a second build. This
checkout is usually not the tag ``<version>``: the run is a snapshot
(``TETHER_RELEASE_SNAPSHOT=1``, also on the tag), which the artefacts say (release.json).
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
import subprocess
import sys
import tarfile
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote, unquote

import pytest
import yaml
from packaging.utils import canonicalize_name

from testing import controlplane, deployed, modulelookup, ocidist, overlays, registry, watchenv
from tether.kube import apitypes

ROOT = controlplane.REPO_ROOT
pytestmark = [pytest.mark.processes, pytest.mark.timeout(1500)]

REGISTRY = "registry.example.com:5000/team/tether"  # a registry with a port and a path
MODULE_CRD = (
    ROOT / "hack" / "crds" / "lifecycle-manager" / "operator.kyma-project.io_moduletemplates.yaml"
)
RENDERED = (
    "tether-kcp.yaml",
    "tether-kcp-watches.yaml",
    "tether-kcp-injector.yaml",
    "tether-kcp-cert-manager.yaml",
    "tether-skr.yaml",
    "tether-monitoring.yaml",
    "tether-module.yaml",
)
CUSTOMER_NS = "shop"
# not in SHA256SUMS: itself and the two signatures (each verified on its own)
SIGNED_APART = ("SHA256SUMS", "SHA256SUMS.sig", "provenance.intoto.json")


@dataclass(frozen=True)
class Release:
    out: Path
    facts: dict[str, Any]
    seconds: str
    key: Path  # the throwaway private key it was signed with (outside out)
    log: str  # what hack/release.py printed

    @property
    def ref(self) -> str:
        return str(self.facts["image"])

    @property
    def version(self) -> str:
        return str(self.facts["version"])


@pytest.fixture(scope="module")
def release(tmp_path_factory: pytest.TempPathFactory) -> Release:
    out = tmp_path_factory.mktemp("release") / "out"
    keys = tmp_path_factory.mktemp("keys")
    cosign = cosign_binary()
    subprocess.run(
        [cosign, "generate-key-pair", "--output-key-prefix", str(keys / "release")],
        env=dict(os.environ, COSIGN_PASSWORD=KEY_PASSWORD),
        capture_output=True,
        check=True,
    )
    env = dict(
        os.environ,
        TETHER_RELEASE_SNAPSHOT="1",
        TETHER_RELEASE_REGISTRY=REGISTRY,
        TETHER_RELEASE_KEY=str(keys / "release.key"),
        COSIGN_PASSWORD=KEY_PASSWORD,
    )
    record = (ROOT / "releases.json").read_bytes()
    done = subprocess.run(
        [sys.executable, "hack/release.py", "--out", str(out)],
        cwd=ROOT,
        env=env,
        text=True,
        capture_output=True,
        timeout=1400,
    )
    assert done.returncode == 0, (
        f"hack/release.py failed:\n{done.stdout[-3000:]}\n{done.stderr[-6000:]}"
    )
    # a snapshot, also on the release's own clean tag: its throwaway key is never recorded
    assert (ROOT / "releases.json").read_bytes() == record
    return Release(
        out,
        json.loads((out / "release.json").read_text()),
        done.stderr[-300:],
        keys / "release.key",
        done.stdout + done.stderr,
    )


KEY_PASSWORD = "throwaway-test-password"


def cosign_binary() -> str:
    done = subprocess.run(
        ["bash", "hack/build-cosign.sh"], cwd=ROOT, capture_output=True, text=True, timeout=1200
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout.strip().splitlines()[-1]


def setup_cfg_version() -> str:
    found = re.search(r"^version\s*=\s*(\S+)", (ROOT / "setup.cfg").read_text(), re.M)
    assert found
    return found.group(1)


def test_release_facts(release: Release) -> None:
    assert release.version == setup_cfg_version()
    assert release.facts["snapshot"] is True  # TETHER_RELEASE_SNAPSHOT=1, whatever the checkout
    assert re.fullmatch(r"sha256:[0-9a-f]{64}", release.facts["digest"])
    assert release.ref == f"{REGISTRY}@{release.facts['digest']}"
    assert (release.out / "image-ref").read_text().strip() == release.ref
    # this checkout's commit (HEAD, or an ancestor of it when a commit landed meanwhile)
    assert re.fullmatch(r"[0-9a-f]{40}", release.facts["commit"])
    assert (
        subprocess.run(
            ["git", "merge-base", "--is-ancestor", release.facts["commit"], "HEAD"], cwd=ROOT
        ).returncode
        == 0
    )


def test_checksums_cover_and_verify_every_file(release: Release) -> None:
    listed = {}
    for line in (release.out / "SHA256SUMS").read_text().splitlines():
        digest, name = line.split("  ", 1)
        listed[name] = digest
    files = {
        p.relative_to(release.out).as_posix()
        for p in release.out.rglob("*")
        if p.is_file() and p.name not in SIGNED_APART
    }
    assert set(listed) == files
    assert {
        *RENDERED,
        "moduletemplate.yaml",
        "modulereleasemeta.yaml",
        "component-descriptor.yaml",
        "module/index.json",
        "sbom.cdx.json",
        "cosign.pub",
        f"tether-{release.version}.oci.tar",
    } <= files
    done = subprocess.run(
        ["sha256sum", "--strict", "-c", "SHA256SUMS"],
        cwd=release.out,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr
    # and the check can fail: one changed byte is found
    for name in ("release.json", "moduletemplate.yaml"):
        data = (release.out / name).read_bytes()
        assert hashlib.sha256(data + b" ").hexdigest() != listed[name]
        assert hashlib.sha256(data).hexdigest() == listed[name]


def verify_release(release: Release, key: Path | None = None) -> subprocess.CompletedProcess[str]:
    """``make verify-release`` of the release folder (as a landscape runs it)."""
    return subprocess.run(
        [
            "make",
            "-s",
            "verify-release",
            f"RELEASE_DIR={release.out}",
            *([f"KEY={key}"] if key else []),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_verify_release_passes_on_the_fresh_release(release: Release) -> None:
    done = verify_release(release)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    assert "ok: SHA256SUMS is signed by the key" in done.stdout
    assert f"its subject is tether-{release.version}.oci.tar" in done.stdout
    assert f"ok: the image {release.facts['digest']}" in done.stdout
    # the key it names is the one that signed: the public half of the throwaway key
    pub = release.key.with_suffix(".pub").read_text()
    assert (release.out / "cosign.pub").read_text() == pub
    assert release.facts["signing_key"] == "TETHER_RELEASE_KEY"


def test_the_private_key_is_nowhere_in_the_release_or_its_log(release: Release) -> None:
    private = release.key.read_bytes()
    body = b"".join(line for line in private.splitlines() if line and not line.startswith(b"-----"))
    assert len(body) > 40
    for path in release.out.rglob("*"):
        if path.is_file() and path.stat().st_size < 50_000_000:
            data = path.read_bytes()
            assert body[:40] not in data and KEY_PASSWORD.encode() not in data, path
    assert body[:40].decode() not in release.log and KEY_PASSWORD not in release.log


@pytest.mark.parametrize(
    "name",
    [
        "tether-{version}.oci.tar",  # the image archive
        "tether-kcp.yaml",  # a render
        "manifests/kcp/kustomization.yaml",  # the pinned manifests a landscape builds on
        "provenance.intoto.json",  # the signed provenance itself
        "SHA256SUMS",  # the signed list
    ],
)
def test_one_changed_byte_fails_verification(release: Release, name: str) -> None:
    path = release.out / name.format(version=release.version)
    original = path.read_bytes()
    at = len(original) // 2
    changed = bytearray(original)
    changed[at] = (changed[at] + 1) % 256
    stat = path.stat()
    try:
        path.write_bytes(bytes(changed))
        done = verify_release(release)
    finally:
        path.write_bytes(original)
        os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert done.returncode != 0 and "FAIL:" in done.stderr, done.stdout + done.stderr
    assert hashlib.sha256(path.read_bytes()).digest() == hashlib.sha256(original).digest()


def test_another_key_or_an_added_file_fails_verification(release: Release, tmp_path: Path) -> None:
    subprocess.run(
        [cosign_binary(), "generate-key-pair", "--output-key-prefix", str(tmp_path / "other")],
        env=dict(os.environ, COSIGN_PASSWORD=""),
        capture_output=True,
        check=True,
    )
    done = verify_release(release, tmp_path / "other.pub")
    assert done.returncode != 0 and "FAIL: cosign verify-blob" in done.stderr, done.stderr
    extra = release.out / "manifests" / "kcp" / "extra.yaml"
    try:
        extra.write_text("kind: Namespace\n")
        done = verify_release(release)
    finally:
        extra.unlink()
    assert done.returncode != 0 and "not in SHA256SUMS" in done.stderr, done.stderr


def provenance(release: Release) -> dict[str, Any]:
    envelope = json.loads((release.out / "provenance.intoto.json").read_text())
    doc: dict[str, Any] = json.loads(base64.b64decode(envelope["payload"]))
    return doc


def test_the_provenance_names_the_archive_commit_locks_and_base(release: Release) -> None:
    doc = provenance(release)
    # cosign 2 writes in-toto Statement v0.1 (the fields of v1)
    assert doc["_type"] in ("https://in-toto.io/Statement/v0.1", "https://in-toto.io/Statement/v1")
    assert doc["predicateType"] == "https://slsa.dev/provenance/v1"
    archive = release.out / f"tether-{release.version}.oci.tar"
    assert [s["digest"]["sha256"] for s in doc["subject"]] == [
        hashlib.sha256(archive.read_bytes()).hexdigest()
    ]
    build = doc["predicate"]["buildDefinition"]
    assert build["externalParameters"]["command"].startswith("make release")
    deps = {d["uri"]: d for d in build["resolvedDependencies"]}
    commit = release.facts["commit"]
    assert deps[f"git+https://github.com/kyma-project/tether@{commit}"]["digest"] == {
        "gitCommit": commit
    }
    for name in ("Dockerfile", "requirements.lock", "requirements-build.lock"):
        # the files the image was built from (the checkout's: a snapshot may have changes)
        assert (
            deps[name]["digest"]["sha256"] == hashlib.sha256((ROOT / name).read_bytes()).hexdigest()
        )
    # the base image by digest: the one the image's labels name (hack/build-image.sh)
    (base,) = [d for d in deps.values() if d.get("annotations", {}).get("role") == "base image"]
    assert release.facts["base_image"].endswith("@sha256:" + base["digest"]["sha256"])
    (image,) = doc["predicate"]["runDetails"]["byproducts"]
    assert "sha256:" + image["digest"]["sha256"] == release.facts["digest"]


def test_the_archive_holds_the_image_of_that_digest(release: Release) -> None:
    with tarfile.open(release.out / f"tether-{release.version}.oci.tar") as tar:

        def read(name: str) -> bytes:
            f = tar.extractfile(name)
            assert f is not None, name
            return f.read()

        index = json.loads(read("index.json"))
        (entry,) = index["manifests"]
        assert entry["digest"] == release.facts["digest"]
        manifest = read("blobs/sha256/" + entry["digest"].removeprefix("sha256:"))
        assert "sha256:" + hashlib.sha256(manifest).hexdigest() == entry["digest"]
        config = json.loads(
            read("blobs/sha256/" + json.loads(manifest)["config"]["digest"].removeprefix("sha256:"))
        )
        assert config["config"]["User"] == "65532:65532"
        assert config["config"]["Cmd"] == ["tether", "--help"]


PODMAN_RUN = [  # as tests/foundation/test_image.py runs the image on these machines
    "podman",
    "run",
    "--rm",
    "--pull=never",
    "--runtime",
    "runc",
    "--network",
    "none",
    "--ulimit",
    "nofile=1024:1024",
    "--ulimit",
    "nproc=1024:1024",
    "--read-only",
]


def run_archive(release: Release, *command: str) -> subprocess.CompletedProcess[str]:
    """podman runs the archive itself (not the image in buildah's storage); the image podman
    imported from it is removed after, unless it is the build's own."""
    archive = release.out / f"tether-{release.version}.oci.tar"
    with tarfile.open(archive) as tar:
        f = tar.extractfile("blobs/sha256/" + release.facts["digest"].removeprefix("sha256:"))
        assert f is not None
        image_id = json.loads(f.read())["config"]["digest"].removeprefix("sha256:")
    done = subprocess.run(
        [*PODMAN_RUN, f"oci-archive:{archive}", *command],
        capture_output=True,
        text=True,
        timeout=300,
    )
    built = subprocess.run(
        [
            "buildah",
            "inspect",
            "--type",
            "image",
            "--format",
            "{{.FromImageID}}",
            f"tether:{release.version}",
        ],
        capture_output=True,
        text=True,
    ).stdout.strip()
    if built != image_id:  # the archive's image, imported by podman, is no other name's: removed
        subprocess.run(["podman", "rmi", image_id], capture_output=True)
    return done


def test_the_archived_image_runs(release: Release) -> None:
    """The archive itself (not the image in buildah's storage) runs: podman reads the
    oci-archive, the image's own command lists every part."""
    done = run_archive(release)
    assert done.returncode == 0, done.stderr[-2000:]
    for part in (
        "webhook",
        "listener",
        "poller",
        "compass",
        "janitor",
        "enroller",
        "admin",
        "injector",
    ):
        assert f"tether {part}" in done.stdout


def image_fields(node: Any) -> Iterator[str]:
    """Every ``image`` of a container (containers, initContainers) in a document."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key in ("containers", "initContainers") and isinstance(value, list):
                yield from (str(c.get("image")) for c in value)
            yield from image_fields(value)
    elif isinstance(node, list):
        for item in node:
            yield from image_fields(item)


def test_every_image_is_pinned_by_digest(release: Release) -> None:
    images = []
    for name in RENDERED:
        text = (release.out / name).read_text()
        for doc in yaml.safe_load_all(text):
            images += list(image_fields(doc))
        # no tag-only reference in any form, not even in a comment or a value
        assert not re.search(r"(?<![\w.-])tether:\d", text), name
    assert len(images) >= 9 and set(images) == {release.ref}, sorted(set(images))
    kcp = list(yaml.safe_load_all((release.out / "tether-kcp.yaml").read_text()))
    enroller = next(
        d
        for d in kcp
        if d and d["kind"] == "Deployment" and d["metadata"]["name"] == "tether-enroller"
    )
    env = {
        e["name"]: e.get("value")
        for e in enroller["spec"]["template"]["spec"]["containers"][0]["env"]
    }
    assert env["TETHER_ENROLLER_IMAGE"] == release.ref  # the runtimes' image
    template = yaml.safe_load((release.out / "moduletemplate.yaml").read_text())
    image, raw = template["spec"]["descriptor"]["component"]["resources"]
    assert image["type"] == "ociImage" and image["access"]["imageReference"] == release.ref
    assert raw["name"] == "raw-manifest" and raw["access"]["type"] == "localBlob"


def test_the_renders_are_the_pinned_manifests(release: Release) -> None:
    """tether-kcp.yaml is kubectl kustomize of the release's own manifests/kcp (the base
    the install test applies), not of the checkout's."""
    kubectl = str(controlplane.binaries() / "kubectl")
    done = subprocess.run(
        [kubectl, "kustomize", str(release.out / "manifests" / "kcp")],
        capture_output=True,
        text=True,
        check=True,
    )
    rendered = (release.out / "tether-kcp.yaml").read_text()
    assert rendered.split("\n", 1)[1] == done.stdout


def lock_pins() -> dict[str, str]:
    pins: dict[str, str] = {}
    for line in (ROOT / "requirements.lock").read_text().splitlines():
        found = re.match(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==(\S+)", line)
        if found:
            pins[canonicalize_name(found.group(1))] = found.group(2)
    assert len(pins) > 20
    return pins


def test_the_sbom_lists_every_locked_package(release: Release) -> None:
    bom = json.loads((release.out / "sbom.cdx.json").read_text())
    assert (bom["bomFormat"], bom["specVersion"]) == ("CycloneDX", "1.5")
    assert bom["metadata"]["component"]["hashes"] == [
        {"alg": "SHA-256", "content": release.facts["digest"].removeprefix("sha256:")}
    ]
    python = [c for c in bom["components"] if c["purl"].startswith("pkg:pypi/")]
    found: dict[str, str] = {canonicalize_name(c["name"]): c["version"] for c in python}
    for c in python:
        assert c["purl"] == f"pkg:pypi/{canonicalize_name(c['name'])}@{c['version']}"
    pins = lock_pins()
    wrong = {
        name: (version, found.get(name))
        for name, version in pins.items()
        if found.get(name) != version
    }
    assert wrong == {}
    # nothing else but tether itself (the build tools are removed from the image)
    assert found.keys() - pins.keys() == {"tether"} and found["tether"] == release.version


def test_the_sbom_lists_the_images_debian_packages(release: Release) -> None:
    """Every Debian package dpkg says is installed in the archived image, at its version,
    with a deb purl; nothing else."""
    bom = json.loads((release.out / "sbom.cdx.json").read_text())
    debs = {c["name"]: c for c in bom["components"] if c["purl"].startswith("pkg:deb/debian/")}
    done = run_archive(
        release, "dpkg-query", "-W", "-f", "${Package} ${Version} ${db:Status-Abbrev}\\n"
    )
    assert done.returncode == 0, done.stderr[-2000:]
    installed = {
        line.split()[0]: line.split()[1]
        for line in done.stdout.splitlines()
        if line.split()[2:] == ["ii"]
    }
    assert len(installed) > 50 and {"libc6", "dpkg", "base-files"} <= installed.keys()
    assert {n: c["version"] for n, c in debs.items()} == installed
    libc = debs["libc6"]
    name_version, qualifiers = libc["purl"].split("?", 1)
    assert name_version == f"pkg:deb/debian/libc6@{quote(libc['version'], safe='.-_~')}"
    assert unquote(name_version.split("@", 1)[1]) == libc["version"]  # '+' is %2B
    assert qualifiers.startswith("arch=")
    assert "&distro=debian-12" in qualifiers


@pytest.fixture(scope="module")
def fleet(release: Release, tmp_path_factory: pytest.TempPathFactory) -> Iterator[deployed.Fleet]:
    """The release's manifests installed the way tests/deployed installs the checkout's:
    testing.deployed with its local overlays on top of the release's manifests/ copy."""
    tree = release.out / "manifests"
    with (
        controlplane.planes("release-skr", "release-kcp") as planes,
        pytest.MonkeyPatch.context() as mp,
    ):
        mp.setattr(overlays, "MANIFESTS", tree)
        mp.setattr(deployed, "WATCHES_DIR", tree / "kcp" / "watches")
        f = deployed.install(
            planes["release-skr"],
            planes["release-kcp"],
            tmp_path_factory.mktemp("fleet"),
            timeout=240,
            backoff_seconds=1.0,
            enroller_env={"TETHER_ENROLLER_INTERVAL_SECONDS": "5"},
        )
        mp.undo()
        try:
            yield f
        finally:
            f.stop()


def deployment_images(plane: controlplane.ControlPlane) -> dict[str, set[str]]:
    out = deployed.kubectl(
        plane, "get", "deployments", "-n", overlays.NAMESPACE, "-o", "json"
    ).stdout
    return {d["metadata"]["name"]: set(image_fields(d["spec"])) for d in json.loads(out)["items"]}


def test_the_release_installs_and_runs_on_fresh_planes(
    release: Release, fleet: deployed.Fleet
) -> None:
    kcp, skr = deployment_images(fleet.kcp), deployment_images(fleet.skr)
    assert {"tether-listener", "tether-enroller", "tether-compass", "tether-admin"} <= kcp.keys()
    assert {"tether-webhook", "tether-poller"} <= skr.keys()  # installed by the enroller
    assert all(images == {release.ref} for images in (*kcp.values(), *skr.values())), (kcp, skr)
    for name in kcp:
        assert fleet.kcp_pods.status(name).get("availableReplicas", 0) >= 1, fleet.kcp_pods.table()
    for name in skr:
        assert fleet.skr_pods.status(name).get("availableReplicas", 0) >= 1, fleet.skr_pods.table()
    assert deployed.condition(deployed.enrollment(fleet.kcp), "Ready") == "True"
    # a customer's ConfigMap, marked as configuration, reaches the KCP through the parts
    deployed.kubectl(fleet.skr, "create", "namespace", CUSTOMER_NS)
    manifest = fleet.work / "configmap.json"
    manifest.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {
                    "name": "checkout",
                    "namespace": CUSTOMER_NS,
                    "labels": {watchenv.OPT_IN_LABEL: "true"},
                },
                "data": {"currency": "EUR"},
            }
        )
    )
    deployed.kubectl(fleet.skr, "create", "-f", str(manifest))

    def arrived() -> bool:
        done = deployed.kubectl(
            fleet.kcp, "get", apitypes.RUNTIME_CONFIGMAPS.plural, "-A", "-o", "json"
        )
        return any(
            r["spec"].get("data") == {"currency": "EUR"} for r in json.loads(done.stdout)["items"]
        )

    fleet.wait_for(
        "the customer's ConfigMap in the KCP", arrived, timeout=120, logs_of="tether-listener"
    )


def test_the_moduletemplate_is_accepted_by_lifecycle_managers_crd(
    release: Release, fleet: deployed.Fleet
) -> None:
    api = fleet.kcp.api_client()
    try:
        assert controlplane.install_crds(api, MODULE_CRD) == [
            "moduletemplates.operator.kyma-project.io"
        ]
    finally:
        api.close()
    path = release.out / "moduletemplate.yaml"
    deployed.kubectl(fleet.kcp, "apply", "--server-side", "-f", str(path))
    got = json.loads(
        deployed.kubectl(
            fleet.kcp,
            "get",
            "moduletemplates.operator.kyma-project.io",
            f"tether-{release.version}",
            "-n",
            deployed.KCP_NS,
            "-o",
            "json",
        ).stdout
    )
    assert got["spec"]["version"] == release.version and got["spec"]["moduleName"] == "tether"
    assert (
        got["spec"]["descriptor"]["component"]["resources"][0]["access"]["imageReference"]
        == release.ref
    )
    # the server validates: a template with a version that is no semantic version is refused
    wrong = yaml.safe_load(path.read_text())
    wrong["metadata"]["name"] = "tether-wrong"
    wrong["spec"]["version"] = "v" + release.version
    bad = fleet.work / "wrong-moduletemplate.json"
    bad.write_text(json.dumps(wrong))
    done = deployed.kubectl(fleet.kcp, "apply", "--server-side", "-f", str(bad), check=False)
    assert done.returncode != 0 and "spec.version" in done.stderr, done.stderr


def test_make_push_module_pushes_the_release_and_it_reads_back(
    release: Release, tmp_path: Path
) -> None:
    """The release's Kyma module pushed by ``make push-module`` to a registry on loopback
    and read back as lifecycle-manager reads it (tests/release/test_module.py does the rest:
    the CRDs, a fresh runtime): the channel's version in the ModuleReleaseMeta, the template
    of that version, the component by ``ocmComponentName``, its raw-manifest blob."""
    with registry.Registry(tmp_path / "registry").running() as reg:
        done = subprocess.run(
            [
                "make",
                "-s",
                "push-module",
                f"RELEASE_DIR={release.out}",
                f"MODULE_REGISTRY={reg.url}",
                f"MODULE_REGISTRY_CA={reg.ca_file}",
            ],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert done.returncode == 0, f"{done.stdout[-2000:]}{done.stderr[-2000:]}"
        mrm = yaml.safe_load((release.out / "modulereleasemeta.yaml").read_text())
        template = yaml.safe_load((release.out / "moduletemplate.yaml").read_text())
        version = modulelookup.channel_version(mrm, modulelookup.DEFAULT_CHANNEL)
        assert template["metadata"]["name"] == modulelookup.template_name("tether", version)
        assert version == release.version == template["spec"]["version"]
        client = ocidist.Client(reg.url, str(reg.ca_file))
        descriptor = ocidist.read_component(client, mrm["spec"]["ocmComponentName"], version)
        assert descriptor == yaml.safe_load((release.out / "component-descriptor.yaml").read_text())
        assert descriptor["component"]["resources"][0]["access"]["imageReference"] == release.ref
        raw = ocidist.raw_manifest(client, descriptor)
        assert raw == (release.out / "tether-module.yaml").read_bytes()


def pythons() -> list[str]:
    """Every CPython 3.11+ interpreter on this machine (the one running the tests at least):
    the plugin's file must run on each."""
    found = {os.path.realpath(sys.executable): sys.executable}
    for name in ("python3.11", "python3.12", "python3.13", "python3.14"):
        for folder in [*os.environ.get("PATH", "").split(os.pathsep), *PYENV]:
            candidate = Path(folder) / name
            if candidate.is_file() and os.access(candidate, os.X_OK):
                probe = subprocess.run(
                    [str(candidate), "-I", "-c", "import sys; print(sys.version_info >= (3, 11))"],
                    capture_output=True,
                    text=True,
                )
                if probe.stdout.strip() == "True":
                    found.setdefault(os.path.realpath(candidate), str(candidate))
                    break
    return sorted(found.values())


PYENV = [str(p) for p in sorted(Path.home().glob(".pyenv/versions/3.*/bin"))]


def test_the_plugin_file_and_its_krew_manifest(release: Release) -> None:
    binary = release.out / "kubectl-tether"
    archive = release.out / f"kubectl-tether-{release.version}.tar.gz"
    manifest = yaml.safe_load((release.out / "plugins" / "tether.yaml").read_text())
    assert manifest["kind"] == "Plugin" and manifest["metadata"]["name"] == "tether"
    assert manifest["spec"]["version"] == f"v{release.version}"  # krew wants the v
    (platform,) = manifest["spec"]["platforms"]
    assert platform["sha256"] == hashlib.sha256(archive.read_bytes()).hexdigest()
    assert platform["uri"].endswith(f"/{archive.name}") and platform["bin"] == "kubectl-tether"
    with tarfile.open(archive) as tar:
        (member,) = tar.getmembers()
        f = tar.extractfile(member)
        assert f is not None and f.read() == binary.read_bytes()
    assert member.name == "kubectl-tether" and member.mode & 0o111
    # the operator's packages and the client's libraries, none of the parts run in pods
    with zipfile.ZipFile(binary) as z:
        tops = {n.split("/")[1] for n in z.namelist() if n.startswith("site/") and "/" in n[5:]}
        abis = {n.split("/")[1] for n in z.namelist() if n.startswith("abi/") and n != "abi/"}
    assert {"command", "tether", "admin", "enroller", "kubernetes", "pydantic"} <= tops
    assert not tops & {"listener", "webhook", "poller", "compass", "injector", "canary"}
    assert not tops & {"flask", "gunicorn", "werkzeug", "aiohttp", "opentelemetry"}
    assert abis == {"cp311", "cp312", "cp313", "cp314"}


def test_the_plugin_file_runs_kubectl_tether_status_from_a_clean_environment(
    release: Release, fleet: deployed.Fleet, tmp_path: Path
) -> None:
    """The release's kubectl-tether, unpacked from its tarball as krew would, in a folder on
    PATH beside a fresh virtualenv without packages (not the project's): the plane's kubectl
    finds it and ``kubectl tether status`` lists the release's enrolled runtime."""
    plugins = tmp_path / "bin"
    plugins.mkdir()
    with tarfile.open(release.out / f"kubectl-tether-{release.version}.tar.gz") as tar:
        tar.extractall(plugins, filter="data")
    clean = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(clean)], check=True)
    env = {
        "PATH": os.pathsep.join([str(plugins), str(clean / "bin"), "/usr/bin", "/bin"]),
        "HOME": str(tmp_path / "home"),
        "KUBECONFIG": str(fleet.kcp.kubeconfig),
        "LANG": "C.UTF-8",
    }
    done = subprocess.run(
        [str(controlplane.binaries() / "kubectl"), "tether", "status", "-o", "json"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    doc = json.loads(done.stdout)
    assert any(deployed.KYMA in json.dumps(r) for r in doc["runtimes"]), doc
    # the same file on every other CPython 3.11+ here, isolated (-I: no site, no PYTHON*)
    for python in pythons():
        done = subprocess.run(
            [python, "-I", str(plugins / "kubectl-tether"), "status", "-o", "json"],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, (python, done.stderr[-3000:])
        assert json.loads(done.stdout)["runtimes"], python


def test_a_wrong_registry_or_checkout_is_refused() -> None:
    """A registry with a tag (the manifests pin a digest to it) is refused before anything is
    built; so is a checkout that is not the clean tag <version> without the snapshot flag."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("TETHER_RELEASE_SNAPSHOT", "TETHER_RELEASE_REGISTRY")
    }
    done = subprocess.run(
        [sys.executable, "hack/release.py", "--registry", "ghcr.io/kyma-project/tether:1.0"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode != 0 and "without tag or digest" in done.stderr, done.stderr
    ver = setup_cfg_version()
    tagged = subprocess.run(
        ["git", "rev-parse", "-q", "--verify", f"{ver}^{{commit}}"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    ).stdout.strip()
    head = subprocess.run(
        ["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True
    ).stdout.strip()
    dirty = subprocess.run(
        ["git", "status", "--porcelain", "--untracked-files=no"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    ).stdout.strip()
    if tagged == head and not dirty:  # CI on the release's own tag: a release is allowed
        return
    done = subprocess.run(
        [sys.executable, "hack/release.py", "--out", "/nonexistent/never-written"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode != 0 and f"is not the tag {ver}" in done.stderr, done.stderr
