"""The product image: built from the Dockerfile with buildah, checked from its config and its
layers, and run with podman the way the manifests' Pods run it.

The build (``hack/build-image.sh``) runs once per test session; buildah's layer cache makes
a rebuild with unchanged requirements take seconds. The layers are read from an OCI layout
that buildah writes (``buildah push oci:DIR``): "our" layers are those the base image does
not have, i.e. what the Dockerfile's final stage adds.

What cannot be done on these machines is said loudly, not skipped:
docs/development.md "The image" (no container registry: the base is a stand-in built from
Debian's packages; the test asserts that the pull failed for exactly that reason).
"""

from __future__ import annotations

import email.message
import email.parser
import hashlib
import json
import os
import re
import shutil
import subprocess
import tarfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[2]
pytestmark = [pytest.mark.processes, pytest.mark.timeout(1500)]

PRODUCT = {
    "command",
    "tether",
    "webhook",
    "listener",
    "poller",
    "compass",
    "enroller",
    "admin",
    "injector",
    "canary",
}
PARTS = (
    "webhook",
    "listener",
    "poller",
    "compass",
    "janitor",
    "enroller",
    "admin",
    "injector",
    "canary",
)
# top-level folders of the checkout that must never be in the image
NOT_IN_IMAGE = ("testing", "tests", "bench", "hack", "standins")
VENV = "opt/tether"
SITE = f"{VENV}/lib/python3.11/site-packages"
UID = 65532
# test tools that are not in requirements-dev.txt but must never be in the image either
OTHER_DEV_TOOLS = ("selenium", "locust", "pytest-xdist", "coverage")
# the reason the base image cannot be pulled here (docs/development.md "The image"): the
# registry's name does not resolve
PULL_REFUSED = re.compile(r"pinging container registry (\S+): .*lookup \1 .*: no such host")
# podman on these machines: runc (crun refuses the hybrid cgroup v1/v2 layout) and small
# explicit limits (podman's default RLIMIT_NOFILE for root is above the hard limit here and
# raising it needs CAP_SYS_RESOURCE, not granted); docs/development.md "The image"
PODMAN_RUN = [
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
]


def loud(capsys: pytest.CaptureFixture[str], *lines: str) -> None:
    with capsys.disabled():
        print("\n" + "\n".join(f"*** {line}" for line in lines))


@dataclass(frozen=True)
class Build:
    tag: str
    base: str
    default_base: str
    pull_error: str
    seconds: float


@dataclass(frozen=True)
class Layers:
    config: dict[str, Any]  # the OCI image config (config, rootfs, history)
    ours: dict[str, tarfile.TarInfo]  # path -> entry, in the layers the base does not have
    digests: dict[str, str]  # path -> sha256 of each of our regular files
    contents: dict[str, bytes]  # path -> bytes, of the venv's scripts and .dist-info files


@pytest.fixture(scope="session")
def build(tmp_path_factory: pytest.TempPathFactory) -> Build:
    report = tmp_path_factory.mktemp("image") / "report"
    env = dict(os.environ, TETHER_IMAGE_REPORT=str(report))
    started = time.monotonic()
    done = subprocess.run(
        ["bash", "hack/build-image.sh"],
        cwd=ROOT,
        env=env,
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        timeout=1400,
    )
    seconds = time.monotonic() - started
    assert done.returncode == 0, f"hack/build-image.sh failed:\n{done.stdout[-6000:]}"
    facts = dict(line.split("=", 1) for line in report.read_text().splitlines())
    return Build(
        facts["image"], facts["base"], facts["default_base"], facts["base_pull_error"], seconds
    )


def inspect(name: str) -> dict[str, Any]:
    out = subprocess.run(
        ["buildah", "inspect", "--type", "image", name], check=True, capture_output=True, text=True
    ).stdout
    oci: dict[str, Any] = json.loads(out)["OCIv1"]
    return oci


@pytest.fixture(scope="session")
def layers(build: Build, tmp_path_factory: pytest.TempPathFactory) -> Layers:
    layout = tmp_path_factory.mktemp("oci") / "layout"
    subprocess.run(
        ["buildah", "push", "-q", build.tag, f"oci:{layout}:tether"],
        check=True,
        capture_output=True,
    )
    blobs = layout / "blobs" / "sha256"

    def blob(digest: str) -> Path:
        return blobs / digest.removeprefix("sha256:")

    index = json.loads((layout / "index.json").read_text())
    manifest = json.loads(blob(index["manifests"][0]["digest"]).read_text())
    config = json.loads(blob(manifest["config"]["digest"]).read_text())
    base_ids = set(inspect(build.base)["rootfs"]["diff_ids"])
    ours: dict[str, tarfile.TarInfo] = {}
    digests: dict[str, str] = {}
    contents: dict[str, bytes] = {}
    for layer, diff_id in zip(manifest["layers"], config["rootfs"]["diff_ids"], strict=True):
        if diff_id in base_ids:
            continue
        with tarfile.open(blob(layer["digest"]), "r:*") as tar:
            for entry in tar:
                path = entry.name.removeprefix("./").rstrip("/")
                ours[path] = entry
                if entry.isfile():
                    f = tar.extractfile(entry)
                    assert f is not None
                    data = f.read()
                    digests[path] = hashlib.sha256(data).hexdigest()
                    if path.startswith(f"{VENV}/bin/") or ".dist-info/" in path:
                        contents[path] = data
    shutil.rmtree(layout)
    assert ours, "the image has no layer of its own"
    return Layers(config, ours, digests, contents)


def test_base_image(build: Build, capsys: pytest.CaptureFixture[str]) -> None:
    """The Dockerfile's base where it can be had; else the stand-in, for the documented
    reason only, said loudly."""
    loud(capsys, f"image {build.tag} built in {build.seconds:.0f} s (hack/build-image.sh)")
    if build.base == build.default_base:
        return
    if os.environ.get("TETHER_BASE_IMAGE"):
        loud(capsys, f"built on {build.base} (TETHER_BASE_IMAGE), not on {build.default_base}")
        return
    assert PULL_REFUSED.search(build.pull_error), (
        f"{build.default_base} could not be pulled, for a reason docs/development.md does "
        f"not record: {build.pull_error!r}"
    )
    loud(
        capsys,
        f"NOT CHECKED ON THIS MACHINE: the image on its real base {build.default_base}.",
        f"It cannot be pulled here: {build.pull_error.strip()}",
        f"Built and checked on the stand-in base {build.base} (Debian bookworm + python3.11)",
        "instead; see docs/development.md 'The image'.",
    )


def test_config_user_entrypoint_cmd(layers: Layers) -> None:
    config = layers.config["config"]
    # numeric and non-root: kubelet verifies runAsNonRoot against it (compass sets no runAsUser)
    assert config.get("User") == f"{UID}:{UID}"
    # empty: a Pod's `command: ["tether", PART]` or `args: ["tether", PART]` is the whole argv
    assert not config.get("Entrypoint")
    assert config.get("Cmd") == ["tether", "--help"]
    env = dict(item.split("=", 1) for item in config.get("Env", []))
    assert env["PATH"].startswith(f"/{VENV}/bin:")
    assert env["PYTHONDONTWRITEBYTECODE"] == "1"


def test_no_build_settings_in_image(layers: Layers) -> None:
    """How pip reached PyPI (index, CA file) stayed in the build stage."""
    text = json.dumps(layers.config)
    assert "PIP_" not in text and "tether-build" not in text
    assert not [p for p in layers.ours if "tether-build" in p or p.endswith("pip.conf")]


def test_only_the_virtualenv_is_added(layers: Layers) -> None:
    """The final stage adds /opt/tether and nothing else (no /src, no checkout folders)."""
    strays = sorted(p for p in layers.ours if p != "opt" and not p.startswith(VENV))
    assert strays == []


def top_level(path: str) -> str:
    name = path.removeprefix(SITE + "/").split("/")[0]
    return name.removesuffix(".py").split("-")[0]


def test_no_harness_package(layers: Layers) -> None:
    """No testing/, tests/, bench/, hack/ or standins/ package: not at the top of
    site-packages, not under the virtualenv, and tether's own record holds only the
    product packages."""
    places = [p for p in layers.ours if p.startswith(SITE + "/")]
    assert places, f"nothing in {SITE}"
    found = sorted({top_level(p) for p in places} & set(NOT_IN_IMAGE))
    assert found == [], f"in site-packages: {found}"
    under_venv = {
        p.removeprefix(VENV + "/").split("/")[0] for p in layers.ours if p.startswith(VENV + "/")
    }
    assert not under_venv & set(NOT_IN_IMAGE)
    record = dist_file(layers, "RECORD")
    packages = {
        line.split("/")[0]
        for line in layers.contents[record].decode().splitlines()
        if "/" in line and not line.startswith(("tether-", "../"))
    }
    assert packages == PRODUCT


def dist_file(layers: Layers, name: str) -> str:
    """The path of one file in tether's own .dist-info folder."""
    (path,) = [
        p
        for p in layers.contents
        if re.fullmatch(rf"{SITE}/tether-[^/]+\.dist-info/{re.escape(name)}", p)
    ]
    return path


def checkout_harness_files() -> Iterator[Path]:
    for folder in NOT_IN_IMAGE:
        for path in (ROOT / folder).rglob("*"):
            if path.is_file() and "__pycache__" not in path.parts and path.stat().st_size >= 64:
                yield path


def test_no_checkout_harness_file_in_image(layers: Layers) -> None:
    """Whatever its path: no file of the image has the content of a (non-trivial) file in
    the checkout's testing/, tests/, bench/, hack/ or standins/."""
    ours = {digest: path for path, digest in layers.digests.items()}
    harness = {hashlib.sha256(p.read_bytes()).hexdigest(): p for p in checkout_harness_files()}
    assert len(harness) > 50, "expected the checkout's harness folders to be there"
    copied = sorted(
        f"{harness[h].relative_to(ROOT)} as /{ours[h]}" for h in harness.keys() & ours.keys()
    )
    assert copied == []


def distributions(layers: Layers) -> dict[str, email.message.Message]:
    dists: dict[str, email.message.Message] = {}
    for path, data in layers.contents.items():
        if re.fullmatch(rf"{SITE}/[^/]+\.dist-info/METADATA", path):
            meta = email.parser.BytesParser().parsebytes(data, headersonly=True)
            dists[canonicalize_name(meta["Name"])] = meta
    return dists


def dev_dependencies() -> set[str]:
    runtime = requirement_names(ROOT / "requirements.txt")
    return (requirement_names(ROOT / "requirements-dev.txt") - runtime) | set(OTHER_DEV_TOOLS)


def requirement_names(path: Path) -> set[str]:
    names: set[str] = set()
    for line in path.read_text().splitlines():
        line = line.split("#")[0].strip()
        if line and not line.startswith("-"):
            names.add(canonicalize_name(Requirement(line).name))
    return names


def test_no_dev_dependencies(layers: Layers) -> None:
    """None of requirements-dev.txt's tools, and every distribution in the image is one
    tether needs (its Requires-Dist closure; the Dockerfile removes the virtualenv's pip
    and setuptools)."""
    dists = distributions(layers)
    dev = dev_dependencies()
    assert {"pytest", "mypy", "ruff", "hypothesis", "schemathesis", "import-linter"} <= dev
    assert sorted(dev & dists.keys()) == []
    needed: set[str] = set()
    todo = [("tether", frozenset[str]())]
    while todo:
        name, extras = todo.pop()
        needed.add(name)
        assert name in dists, f"{name} is required but not installed in the image"
        for line in dists[name].get_all("Requires-Dist") or []:
            req = Requirement(line)
            if req.marker is None or any(
                req.marker.evaluate({"extra": extra}) for extra in extras or {""}
            ):
                dep = canonicalize_name(req.name)
                if dep not in needed:
                    todo.append((dep, frozenset(req.extras)))
    assert sorted(dists.keys() - needed) == []


def test_console_script(layers: Layers) -> None:
    script = layers.ours.get(f"{VENV}/bin/tether")
    assert script is not None and script.isfile() and script.mode & 0o111
    assert layers.contents[f"{VENV}/bin/tether"].startswith(f"#!/{VENV}/bin/python".encode())
    entry_points = layers.contents[dist_file(layers, "entry_points.txt")].decode()
    assert "tether = command.cli:main" in entry_points


@dataclass(frozen=True)
class PodContainer:
    where: str  # manifest file and container name
    command: list[str] | None
    args: list[str] | None
    run_as_user: int | None
    read_only: bool


def tether_containers() -> list[PodContainer]:
    found = []
    for path in sorted((ROOT / "manifests").rglob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            pod = (doc or {}).get("spec", {}).get("template", {}).get("spec")
            if not isinstance(pod, dict):
                continue
            pod_sc = pod.get("securityContext") or {}
            for c in pod.get("initContainers", []) + pod.get("containers", []):
                if not str(c.get("image", "")).startswith("tether:"):
                    continue
                sc = c.get("securityContext") or {}
                found.append(
                    PodContainer(
                        f"{path.relative_to(ROOT)}:{c['name']}",
                        c.get("command"),
                        c.get("args"),
                        sc.get("runAsUser", pod_sc.get("runAsUser")),
                        bool(sc.get("readOnlyRootFilesystem")),
                    )
                )
    return found


def pod_argv(c: PodContainer, entrypoint: list[str] | None, cmd: list[str] | None) -> list[str]:
    """Kubernetes' rule: command replaces the ENTRYPOINT (and drops CMD), args replace CMD."""
    if c.command is not None:
        return c.command + (c.args or [])
    return (entrypoint or []) + (c.args if c.args is not None else cmd or [])


def test_manifests_match_the_image(layers: Layers) -> None:
    config = layers.config["config"]
    containers = tether_containers()
    argvs = {c.where: pod_argv(c, config.get("Entrypoint"), config.get("Cmd")) for c in containers}
    for c in containers:
        assert argvs[c.where][:1] == ["tether"], (c.where, argvs[c.where])
        assert c.run_as_user in (None, UID), c.where
    assert {argv[1] for argv in argvs.values()} == set(PARTS)


def podman(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*PODMAN_RUN, *args], capture_output=True, text=True, timeout=120)


def test_runs_tether_help(build: Build) -> None:
    """The image's own command, read-only root as in the manifests."""
    done = podman("--read-only", build.tag)
    assert done.returncode == 0, done.stderr
    for part in PARTS:
        assert f"tether {part}" in done.stdout


def test_runs_each_manifest_container(build: Build) -> None:
    """Each Pod's command/args as Kubernetes applies them to this image, with --help."""
    for c in tether_containers():
        flags = ["--read-only"] if c.read_only else []
        if c.command is not None:
            flags += ["--entrypoint", json.dumps(c.command)]
            positional = (c.args or []) + ["--help"]
        else:
            assert c.args is not None, c.where
            positional = c.args + ["--help"]
        done = podman(*flags, build.tag, *positional)
        part = pod_argv(c, [], None)[1]  # the image's ENTRYPOINT is empty (checked above)
        assert done.returncode == 0, (c.where, done.stderr)
        assert f"usage: tether {part}" in done.stdout, (c.where, done.stdout)


def test_in_the_container(build: Build) -> None:
    """Runs as 65532 and cannot import the harness packages."""
    probe = (
        "import importlib.util, os; print(os.getuid(), os.getgid(), "
        f"[m for m in {NOT_IN_IMAGE!r} if importlib.util.find_spec(m)])"
    )
    done = podman("--read-only", build.tag, "python3", "-c", probe)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"{UID} {UID} []"
