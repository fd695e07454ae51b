"""Istio's CRDs for validating the Istio overlay (``manifests/overlays/istio``) on a plane:
the API server then checks its Gateway, VirtualService, EnvoyFilter, PeerAuthentication and
AuthorizationPolicy by Istio's published schemas. No Istio control plane runs here.

The CRDs are the file ``kubernetes/customresourcedefinitions.gen.yaml`` of the Go module
``istio.io/api`` at the version pinned in ``hack/istio-versions.env``, fetched with
``go mod download -json`` (the module proxy serves it) and copied to a version-keyed cache
folder outside the checkout, like the control plane and cert-manager.

Environment:
    TETHER_ISTIO_CRDS   a file holding the CRDs (skips the download)
    TETHER_ISTIO_CACHE  cache root (default ~/.cache/tether/istio-api)
"""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import subprocess
import threading
from typing import Any

import yaml

from testing import controlplane

VERSIONS_FILE = controlplane.REPO_ROOT / "hack" / "istio-versions.env"
OVERLAY = controlplane.REPO_ROOT / "manifests" / "overlays" / "istio"
PASSTHROUGH = OVERLAY / "passthrough"
CRD_PATH = "kubernetes/customresourcedefinitions.gen.yaml"
GROUPS = ("networking.istio.io", "security.istio.io")  # what the overlays use


class IstioError(RuntimeError):
    """Istio's CRDs could not be fetched."""


def pinned_version() -> str:
    for line in VERSIONS_FILE.read_text().splitlines():
        if line.startswith("ISTIO_API_VERSION="):
            return line.split("=", 1)[1].strip()
    raise IstioError(f"{VERSIONS_FILE} names no ISTIO_API_VERSION")


_lock = threading.Lock()
_file: pathlib.Path | None = None


def crd_file() -> pathlib.Path:
    """The cached CRD file; downloads the module the first time."""
    global _file
    with _lock:
        if _file is not None:
            return _file
        explicit = os.environ.get("TETHER_ISTIO_CRDS")
        if explicit:
            _file = pathlib.Path(explicit)
            return _file
        version = pinned_version()
        root = os.environ.get("TETHER_ISTIO_CACHE") or str(
            pathlib.Path.home() / ".cache" / "tether" / "istio-api"
        )
        cached = pathlib.Path(root) / version / "customresourcedefinitions.gen.yaml"
        if not cached.is_file():
            done = subprocess.run(
                ["go", "mod", "download", "-json", f"istio.io/api@{version}"],
                capture_output=True,
                text=True,
                check=False,
                timeout=600,
            )
            if done.returncode != 0:
                raise IstioError(f"go mod download istio.io/api@{version}: {done.stderr[-500:]}")
            source = pathlib.Path(json.loads(done.stdout)["Dir"]) / CRD_PATH
            cached.parent.mkdir(parents=True, exist_ok=True)
            tmp = cached.with_suffix(".tmp")
            shutil.copyfile(source, tmp)
            tmp.replace(cached)
        _file = cached
        return cached


def crds(groups: tuple[str, ...] = GROUPS) -> list[dict[str, Any]]:
    """The CRDs of ``groups`` from the pinned file."""
    docs = yaml.safe_load_all(crd_file().read_text())
    return [d for d in docs if d and d.get("spec", {}).get("group") in groups]


def is_istio(obj: dict[str, Any]) -> bool:
    return str(obj.get("apiVersion", "")).split("/")[0].endswith(".istio.io")
