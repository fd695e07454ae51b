"""The Kyma module's packaging (hack/kyma_module.py) on plain data: the OCM component
descriptor and its OCI layout carry what lifecycle-manager reads, the same inputs give the
same bytes, and a changed byte in the layout is refused before anything is pushed. Pushing
and reading back through a real registry: tests/release/test_module.py."""

from __future__ import annotations

import importlib.util
import io
import json
import sys
import tarfile
from pathlib import Path
from typing import Any

import pytest
import yaml

from testing import controlplane, modulelookup

ROOT = controlplane.REPO_ROOT
IMAGE = "registry.example.com/kyma/tether@sha256:" + "ab" * 32
RAW = b"apiVersion: v1\nkind: Namespace\nmetadata:\n  name: tether-system\n"


def _load() -> Any:
    spec = importlib.util.spec_from_file_location("kyma_module", ROOT / "hack" / "kyma_module.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("kyma_module", module)  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


km = _load()


def build(version: str = "0.3.0") -> Any:
    return km.build(km.load_config(), version, IMAGE, RAW, "https://example.com/r/x.yaml")


def test_the_descriptor_has_the_raw_manifest_as_a_local_blob_and_the_image() -> None:
    d = build().descriptor
    assert d["meta"] == {"schemaVersion": "v2"}
    c = d["component"]
    assert (c["name"], c["version"]) == ("kyma-project.io/module/tether", "0.3.0")
    image, raw = c["resources"]
    assert image["type"] == "ociImage" and image["access"]["imageReference"] == IMAGE
    assert image["digest"]["value"] == "ab" * 32
    assert raw["name"] == "raw-manifest" and raw["type"] == "yaml" and raw["relation"] == "local"
    assert raw["access"]["type"] == "localBlob"
    assert raw["access"]["localReference"] == km.digest_of(RAW)
    assert raw["digest"]["normalisationAlgorithm"] == "genericBlobDigest/v1"


def test_the_oci_manifest_is_ocms_layout() -> None:
    m = build()
    manifest = json.loads(m.blobs[m.manifest_digest])
    config = json.loads(m.blobs[manifest["config"]["digest"]])
    assert manifest["config"]["mediaType"] == km.CONFIG_TYPE
    layer0, layer1 = manifest["layers"]
    assert config["componentDescriptorLayer"]["digest"] == layer0["digest"]
    assert layer0["mediaType"] == km.DESCRIPTOR_TYPE
    with tarfile.open(fileobj=io.BytesIO(m.blobs[layer0["digest"]])) as tar:
        assert tar.getnames() == ["component-descriptor.yaml"]
        f = tar.extractfile("component-descriptor.yaml")
        assert f is not None and yaml.safe_load(f.read()) == m.descriptor
    assert layer1["digest"] == km.digest_of(RAW) and m.blobs[layer1["digest"]] == RAW


def test_the_template_and_the_release_meta_agree() -> None:
    m = build()
    t, r = m.template, m.release_meta
    assert t["metadata"]["name"] == modulelookup.template_name("tether", "0.3.0")
    assert t["spec"]["moduleName"] == r["spec"]["moduleName"] == "tether"
    assert t["spec"]["version"] == "0.3.0"
    assert r["spec"]["ocmComponentName"] == m.component
    assert t["metadata"]["namespace"] == r["metadata"]["namespace"]
    assert {c["channel"] for c in r["spec"]["channels"]} == {"regular", "fast"}
    assert modulelookup.channel_version(r, "fast") == "0.3.0"
    with pytest.raises(modulelookup.NoTemplateError):
        modulelookup.channel_version(r, "experimental")


def test_the_channel_lookup_follows_lifecycle_manager() -> None:
    kyma: dict[str, Any] = {"spec": {"channel": "fast", "modules": [{"name": "tether"}]}}
    assert modulelookup.desired_channel(kyma, "tether") == "fast"
    kyma["spec"]["modules"][0]["channel"] = "regular"
    assert modulelookup.desired_channel(kyma, "tether") == "regular"
    assert modulelookup.desired_channel({"spec": {}}, "tether") == "regular"


def test_same_inputs_same_bytes_and_a_changed_byte_is_refused(tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    for out in (a, b):
        out.mkdir()
        km.write(out, build(), "# test")
    files = sorted(p.relative_to(a) for p in a.rglob("*") if p.is_file())
    assert files and all((a / f).read_bytes() == (b / f).read_bytes() for f in files)
    layout = km.read_layout(a / "module")
    assert layout.tag == "0.3.0" and len(layout.blobs) == 3
    blob = a / "module" / "blobs" / "sha256" / km.digest_of(RAW).removeprefix("sha256:")
    blob.write_bytes(RAW + b"# changed\n")
    with pytest.raises(SystemExit, match="does not match its digest"):
        km.read_layout(a / "module")
