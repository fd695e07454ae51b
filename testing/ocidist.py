"""A small client of the OCI distribution API (the registry HTTP API v2): what
hack/push_module.py pushes a Kyma module's OCM component with, and what the tests read it
back with the way lifecycle-manager does (``read_component``, ``raw_manifest``).

Pushing is the spec's monolithic upload: ``POST /v2/<repo>/blobs/uploads/`` then ``PUT`` the
blob at the returned location with its digest; a blob the registry has (``HEAD`` 200) is not
sent again; then ``PUT /v2/<repo>/manifests/<tag>``. Reading follows lifecycle-manager:
internal/repository/oci/ocirepo.go (``<host>/component-descriptors/<name>:<version>``, the
config file, a layer pulled by digest) and internal/service/componentdescriptor/service.go
(the config's ``componentDescriptorLayer``, ``component-descriptor.yaml`` out of its tar).

Every response is read up to a cap (``MAX_BYTES``) and every call has a deadline; a digest
read back is checked against the content. No credentials: the registries here are anonymous.
"""

from __future__ import annotations

import hashlib
import io
import json
import ssl
import tarfile
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

import yaml

MAX_BYTES = 16 * 1024 * 1024  # a component's blobs here are kilobytes; the manifest < 100 KiB
TIMEOUT = 30.0
MANIFEST_TYPES = (
    "application/vnd.oci.image.manifest.v1+json",
    "application/vnd.docker.distribution.manifest.v2+json",
)
DESCRIPTOR_PREFIX = "component-descriptors"


class RegistryError(RuntimeError):
    """The registry refused or answered something unusable."""


class Client:
    """One registry, ``https://host:port`` (TLS verified against ``ca_file`` when given)."""

    def __init__(self, base_url: str, ca_file: str | None = None) -> None:
        parsed = urllib.parse.urlsplit(base_url if "://" in base_url else f"https://{base_url}")
        if parsed.scheme != "https" or not parsed.netloc or parsed.path not in ("", "/"):
            raise RegistryError(f"registry {base_url!r}: expected https://host[:port]")
        self.base = f"https://{parsed.netloc}"
        self.host = parsed.netloc
        self._ssl = ssl.create_default_context(cafile=ca_file)

    def _call(
        self,
        method: str,
        url: str,
        body: bytes | None = None,
        headers: dict[str, str] | None = None,
    ) -> tuple[int, dict[str, str], bytes]:
        req = urllib.request.Request(
            url if url.startswith("https://") else self.base + url,
            data=body,
            method=method,
            headers=headers or {},
        )
        try:
            with urllib.request.urlopen(req, context=self._ssl, timeout=TIMEOUT) as resp:
                return resp.status, dict(resp.headers), resp.read(MAX_BYTES + 1)
        except urllib.error.HTTPError as e:
            return e.code, dict(e.headers), e.read(4096)
        except (urllib.error.URLError, OSError) as e:
            raise RegistryError(f"{method} {self.base}{url.split('?')[0]}: {e}") from e

    # -- pushing -------------------------------------------------------------------------

    def has_blob(self, repo: str, digest: str) -> bool:
        status, _, _ = self._call("HEAD", f"/v2/{repo}/blobs/{digest}")
        return status == 200

    def push_blob(self, repo: str, digest: str, data: bytes) -> None:
        if self.has_blob(repo, digest):
            return
        status, headers, body = self._call("POST", f"/v2/{repo}/blobs/uploads/", b"")
        location = headers.get("Location") or headers.get("location")
        if status != 202 or not location:
            raise RegistryError(
                f"upload of {digest} to {repo} not started: {status} {body[:300]!r}"
            )
        if not location.startswith("https://"):
            location = self.base + location
        sep = "&" if "?" in location else "?"
        status, _, body = self._call(
            "PUT",
            f"{location}{sep}digest={urllib.parse.quote(digest)}",
            data,
            {"Content-Type": "application/octet-stream"},
        )
        if status != 201:
            raise RegistryError(f"upload of {digest} to {repo}: {status} {body[:300]!r}")

    def push_manifest(self, repo: str, tag: str, manifest: bytes, media_type: str) -> str:
        status, headers, body = self._call(
            "PUT", f"/v2/{repo}/manifests/{tag}", manifest, {"Content-Type": media_type}
        )
        if status != 201:
            raise RegistryError(f"manifest {repo}:{tag}: {status} {body[:300]!r}")
        return headers.get("Docker-Content-Digest", "")

    # -- reading -------------------------------------------------------------------------

    def manifest(self, repo: str, ref: str) -> dict[str, Any]:
        status, _, body = self._call(
            "GET", f"/v2/{repo}/manifests/{ref}", headers={"Accept": ", ".join(MANIFEST_TYPES)}
        )
        if status != 200:
            raise RegistryError(f"manifest {repo}:{ref}: {status} {body[:300]!r}")
        parsed: dict[str, Any] = json.loads(_capped(body))
        return parsed

    def blob(self, repo: str, digest: str) -> bytes:
        status, _, body = self._call("GET", f"/v2/{repo}/blobs/{digest}")
        if status != 200:
            raise RegistryError(f"blob {repo}@{digest}: {status} {body[:300]!r}")
        data = _capped(body)
        if "sha256:" + hashlib.sha256(data).hexdigest() != digest:
            raise RegistryError(f"blob {repo}@{digest}: content does not match the digest")
        return data


def _capped(body: bytes) -> bytes:
    if len(body) > MAX_BYTES:
        raise RegistryError(f"response over {MAX_BYTES} bytes")
    return body


def component_repo(component: str) -> str:
    """The OCI repository OCM maps a component to (``component-descriptors/<name>``)."""
    return f"{DESCRIPTOR_PREFIX}/{component}"


def read_component(client: Client, component: str, version: str) -> dict[str, Any]:
    """The component descriptor as lifecycle-manager fetches it: the config file of
    ``component-descriptors/<name>:<version>``, its ``componentDescriptorLayer`` pulled by
    digest, ``component-descriptor.yaml`` out of that tar."""
    repo = component_repo(component)
    manifest = client.manifest(repo, version)
    config = json.loads(client.blob(repo, manifest["config"]["digest"]))
    layer = (config.get("componentDescriptorLayer") or {}).get("digest")
    if not layer:
        raise RegistryError(f"{repo}:{version}: config names no componentDescriptorLayer")
    with tarfile.open(fileobj=io.BytesIO(client.blob(repo, layer))) as tar:
        for member in tar.getmembers():
            if member.name == "component-descriptor.yaml" and member.isfile():
                f = tar.extractfile(member)
                if f is not None:
                    descriptor: dict[str, Any] = yaml.safe_load(f.read())
                    return descriptor
    raise RegistryError(f"{repo}:{version}: component-descriptor.yaml not in its layer")


def raw_manifest(client: Client, descriptor: dict[str, Any]) -> bytes:
    """The ``raw-manifest`` resource's local blob, pulled by its ``localReference`` from the
    component's repository (what lifecycle-manager puts in a Manifest CR's
    ``spec.install.source``: repo ``<host>/component-descriptors``, name, ref)."""
    component = descriptor["component"]
    for resource in component.get("resources", []):
        if resource.get("name") == "raw-manifest":
            access = resource.get("access", {})
            if access.get("type") != "localBlob":
                raise RegistryError(f"raw-manifest access {access.get('type')!r}: not localBlob")
            return client.blob(component_repo(component["name"]), access["localReference"])
    raise RegistryError(f"{component.get('name')}: no raw-manifest resource")
