"""Tether's Kyma module, packaged the way lifecycle-manager installs modules, from one
configuration (``manifests/module/module-config.yaml``).

``build`` is pure: the rendered runtime manifest, the version and the image in, every file out.

* the OCM component (descriptor v2, ``meta.schemaVersion: v2``) ``<name>:<version>``: the
  image as an ``ociImage`` resource (external, ``ociArtifact`` access, its digest), and the
  runtime manifest as the resource ``raw-manifest`` (type ``yaml``, relation ``local``,
  ``localBlob`` access whose ``localReference`` is the blob's ``sha256:`` digest, media type
  ``application/octet-stream``, digest ``genericBlobDigest/v1``), as modulectl writes it and
  lifecycle-manager's docs/contributor/resources/02-manifest.md shows;
* the component as OCM lays it out in an OCI registry (ocm-spec, "OCI Registries as Backend";
  lifecycle-manager internal/service/componentdescriptor/service.go reads it back): one
  image manifest whose config (``application/vnd.ocm.software.component.config.v1+json``)
  names ``componentDescriptorLayer``, layer 0 a tar holding ``component-descriptor.yaml``,
  then one layer per local blob (the raw manifest, plain YAML: lifecycle-manager
  internal/manifest/img pulls it by digest and copies ``Uncompressed()`` to
  ``raw-manifest.yaml``). Written as an OCI image layout (``module/``: ``oci-layout``,
  ``index.json`` with the version as ``org.opencontainers.image.ref.name``,
  ``blobs/sha256/``); hack/push_module.py pushes it to
  ``<registry>/component-descriptors/<name>`` tagged ``<version>``
  (internal/repository/oci/ocirepo.go ``toImageRef``);
* the ModuleTemplate ``<module>-<version>`` (api/v1beta2/moduletemplate_types.go: moduleName,
  version, info, manager, associatedResources, resources, descriptor), the name
  lifecycle-manager looks up (pkg/templatelookup/moduletemplateinfolookup/common.go
  ``getTemplateByVersion``), in the namespace of the Kyma CRs;
* the ModuleReleaseMeta ``<module>`` (api/v1beta2/modulereleasemeta_types.go: moduleName,
  ocmComponentName, channels with their version), through which lifecycle-manager finds the
  template and the component (by_module_release_meta.go).

Deterministic: the same inputs give the same bytes (the tar has fixed owners, modes and times).
"""

from __future__ import annotations

import dataclasses
import hashlib
import io
import json
import tarfile
from pathlib import Path
from typing import Any

import yaml

CONFIG_FILE = Path(__file__).resolve().parents[1] / "manifests" / "module" / "module-config.yaml"
RAW_MANIFEST = "raw-manifest"
MANIFEST_TYPE = "application/vnd.oci.image.manifest.v1+json"
CONFIG_TYPE = "application/vnd.ocm.software.component.config.v1+json"
DESCRIPTOR_TYPE = "application/vnd.ocm.software.component-descriptor.v2+yaml+tar"
DESCRIPTOR_FILE = "component-descriptor.yaml"
BLOB_TYPE = "application/octet-stream"
ARTIFACT_ANNOTATION = "software.ocm.artifact"
REF_NAME = "org.opencontainers.image.ref.name"


@dataclasses.dataclass(frozen=True)
class Module:
    """Every file of the packaged module: the OCI layout's blobs by digest, the manifest's
    digest, and the two objects for the KCP."""

    component: str
    version: str
    descriptor: dict[str, Any]
    blobs: dict[str, bytes]  # "sha256:<hex>" -> content (config, layers, manifest)
    manifest_digest: str
    template: dict[str, Any]
    release_meta: dict[str, Any]

    @property
    def module_name(self) -> str:
        return self.component.rsplit("/", 1)[-1]


def load_config(path: Path = CONFIG_FILE) -> dict[str, Any]:
    config = yaml.safe_load(path.read_text())
    if not isinstance(config, dict) or "/" not in str(config.get("name", "")):
        raise SystemExit(f"{path}: `name` must be the OCM component name (e.g. example.com/x/y)")
    return config


def digest_of(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def descriptor_tar(text: bytes) -> bytes:
    """A tar whose first (only) entry is ``component-descriptor.yaml``; fixed metadata."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        info = tarfile.TarInfo(DESCRIPTOR_FILE)
        info.size, info.mode, info.mtime = len(text), 0o644, 0
        info.uid = info.gid = 0
        info.uname = info.gname = ""
        tar.addfile(info, io.BytesIO(text))
    return buf.getvalue()


def component_descriptor(
    config: dict[str, Any], version: str, image_ref: str, raw: bytes
) -> dict[str, Any]:
    """The OCM component descriptor v2 of the module."""
    image_digest = image_ref.split("@", 1)[1] if "@" in image_ref else ""
    image: dict[str, Any] = {
        "name": config["name"].rsplit("/", 1)[-1],
        "type": "ociImage",
        "version": version,
        "relation": "external",
        "access": {"type": "ociArtifact", "imageReference": image_ref},
    }
    if image_digest.startswith("sha256:"):
        image["digest"] = {
            "hashAlgorithm": "SHA-256",
            "normalisationAlgorithm": "ociArtifactDigest/v1",
            "value": image_digest.removeprefix("sha256:"),
        }
    return {
        "meta": {"schemaVersion": "v2"},
        "component": {
            "name": config["name"],
            "version": version,
            "provider": config.get("provider", "kyma-project.io"),
            "repositoryContexts": [],
            "sources": [],
            "componentReferences": [],
            "resources": [
                image,
                {
                    "name": RAW_MANIFEST,
                    "type": "yaml",
                    "version": version,
                    "relation": "local",
                    "access": {
                        "type": "localBlob",
                        "localReference": digest_of(raw),
                        "mediaType": BLOB_TYPE,
                        "referenceName": RAW_MANIFEST,
                    },
                    "digest": {
                        "hashAlgorithm": "SHA-256",
                        "normalisationAlgorithm": "genericBlobDigest/v1",
                        "value": hashlib.sha256(raw).hexdigest(),
                    },
                },
            ],
        },
    }


def _ref(media_type: str, data: bytes) -> dict[str, Any]:
    return {"mediaType": media_type, "digest": digest_of(data), "size": len(data)}


def build(
    config: dict[str, Any], version: str, image_ref: str, raw: bytes, manifest_url: str = ""
) -> Module:
    """The module of ``version``: ``raw`` is the runtime manifest (the raw-manifest blob),
    ``manifest_url`` where the same file is published (the template's ``rawManifest`` link,
    informational as in modulectl's templates)."""
    descriptor = component_descriptor(config, version, image_ref, raw)
    layer0 = descriptor_tar(yaml.safe_dump(descriptor, sort_keys=False).encode())
    cfg = json.dumps({"componentDescriptorLayer": _ref(DESCRIPTOR_TYPE, layer0)}).encode()
    raw_layer = _ref(BLOB_TYPE, raw)
    raw_layer["annotations"] = {
        ARTIFACT_ANNOTATION: json.dumps(
            [{"kind": "resource", "identity": {"name": RAW_MANIFEST, "version": version}}],
            separators=(",", ":"),
        )
    }
    manifest = json.dumps(
        {
            "schemaVersion": 2,
            "mediaType": MANIFEST_TYPE,
            "config": _ref(CONFIG_TYPE, cfg),
            "layers": [_ref(DESCRIPTOR_TYPE, layer0), raw_layer],
        },
        indent=2,
    ).encode()
    blobs = {digest_of(b): b for b in (cfg, layer0, raw, manifest)}
    module = config["name"].rsplit("/", 1)[-1]
    return Module(
        component=config["name"],
        version=version,
        descriptor=descriptor,
        blobs=blobs,
        manifest_digest=digest_of(manifest),
        template=module_template(config, module, version, descriptor, manifest_url),
        release_meta=module_release_meta(config, module, version),
    )


def module_template(
    config: dict[str, Any],
    module: str,
    version: str,
    descriptor: dict[str, Any],
    manifest_url: str = "",
) -> dict[str, Any]:
    info: dict[str, Any] = {
        "repository": config["repository"],
        "documentation": config["documentation"],
    }
    if config.get("icons"):
        info["icons"] = config["icons"]
    spec: dict[str, Any] = {
        "moduleName": module,
        "version": version,
        "mandatory": bool(config.get("mandatory", False)),
        "requiresDowntime": bool(config.get("requiresDowntime", False)),
        "info": info,
        "manager": config["manager"],
        "associatedResources": config.get("associatedResources", []),
        # informational: lifecycle-manager reads the descriptor from the registry
        # (ModuleReleaseMeta.spec.ocmComponentName, spec.version); the inline copy is
        # deprecated there and kept for readers of the template
        "descriptor": descriptor,
    }
    if manifest_url:
        spec["resources"] = [{"name": "rawManifest", "link": manifest_url}]
    return {
        "apiVersion": "operator.kyma-project.io/v1beta2",
        "kind": "ModuleTemplate",
        "metadata": {
            "name": f"{module}-{version}",
            "namespace": config["namespace"],
            "labels": {"operator.kyma-project.io/module-name": module},
            "annotations": {"operator.kyma-project.io/is-cluster-scoped": "false"},
        },
        "spec": spec,
    }


def module_release_meta(config: dict[str, Any], module: str, version: str) -> dict[str, Any]:
    return {
        "apiVersion": "operator.kyma-project.io/v1beta2",
        "kind": "ModuleReleaseMeta",
        "metadata": {"name": module, "namespace": config["namespace"]},
        "spec": {
            "moduleName": module,
            "ocmComponentName": config["name"],
            "channels": [{"channel": c, "version": version} for c in config["channels"]],
        },
    }


def write(out: Path, module: Module, header: str) -> None:
    """``module/`` (OCI image layout), ``component-descriptor.yaml``, ``moduletemplate.yaml``
    and ``modulereleasemeta.yaml`` under ``out``."""
    layout = out / "module"
    (layout / "blobs" / "sha256").mkdir(parents=True, exist_ok=True)
    for digest, data in module.blobs.items():
        (layout / "blobs" / "sha256" / digest.removeprefix("sha256:")).write_bytes(data)
    (layout / "oci-layout").write_text(json.dumps({"imageLayoutVersion": "1.0.0"}) + "\n")
    manifest = module.blobs[module.manifest_digest]
    index = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.index.v1+json",
        "manifests": [
            {
                **_ref(MANIFEST_TYPE, manifest),
                "annotations": {REF_NAME: module.version},
            }
        ],
    }
    (layout / "index.json").write_text(json.dumps(index, indent=2) + "\n")
    (out / DESCRIPTOR_FILE).write_text(yaml.safe_dump(module.descriptor, sort_keys=False))
    for name, doc in (
        ("moduletemplate.yaml", module.template),
        ("modulereleasemeta.yaml", module.release_meta),
    ):
        (out / name).write_text(f"{header}\n" + yaml.safe_dump(doc, sort_keys=False))


@dataclasses.dataclass(frozen=True)
class Layout:
    """An OCI image layout as ``write`` leaves it: the tag, the manifest and its blobs."""

    tag: str
    manifest: bytes
    blobs: dict[str, bytes]

    @property
    def parsed(self) -> dict[str, Any]:
        parsed: dict[str, Any] = json.loads(self.manifest)
        return parsed


def read_layout(folder: Path) -> Layout:
    """The one tagged manifest of ``folder`` and the blobs it names, each checked against its
    digest (a changed byte is refused here, before anything is pushed)."""
    index = json.loads((folder / "index.json").read_text())
    if len(index.get("manifests", [])) != 1:
        raise SystemExit(f"{folder}/index.json: expected one manifest")
    entry = index["manifests"][0]
    tag = entry.get("annotations", {}).get(REF_NAME, "")
    if not tag:
        raise SystemExit(f"{folder}/index.json: the manifest has no {REF_NAME}")

    def blob(digest: str) -> bytes:
        algorithm, _, hexa = digest.partition(":")
        if (
            algorithm != "sha256"
            or len(hexa) != 64
            or not all(c in "0123456789abcdef" for c in hexa)
        ):
            raise SystemExit(f"{folder}: not a sha256 digest: {digest!r}")
        data = (folder / "blobs" / "sha256" / hexa).read_bytes()
        if digest_of(data) != digest:
            raise SystemExit(f"{folder}: blob {digest} does not match its digest")
        return data

    manifest = blob(entry["digest"])
    parsed = json.loads(manifest)
    names = [parsed["config"]["digest"], *(layer["digest"] for layer in parsed["layers"])]
    return Layout(tag, manifest, {d: blob(d) for d in names})
