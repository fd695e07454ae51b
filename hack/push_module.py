"""``make push-module``: push a release's Kyma module (its OCM component, ``module/`` in
``dist/release/<version>/``, hack/kyma_module.py) to an OCI registry the way OCM lays
components out there: repository ``component-descriptors/<component name>``, tag the version.
lifecycle-manager then finds it by the ModuleReleaseMeta's ``ocmComponentName`` and the
ModuleTemplate's version on its ``--oci-registry-host``.

    python hack/push_module.py dist/release/X.Y.Z --registry https://REGISTRY [--ca-file CA]

Every blob is checked against its digest before anything is sent; the registry must accept
anonymous pushes (a registry with authentication: push with ``ocm transfer ctf`` or
``oras`` from the same folder, docs/releasing.md).
"""

from __future__ import annotations

import argparse
import io
import sys
import tarfile
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "hack"))

import kyma_module  # noqa: E402

from testing import ocidist  # noqa: E402


def component_name(layout: kyma_module.Layout) -> str:
    layer0 = layout.blobs[layout.parsed["layers"][0]["digest"]]
    with tarfile.open(fileobj=io.BytesIO(layer0)) as tar:
        member = tar.extractfile(kyma_module.DESCRIPTOR_FILE)
        if member is None:
            raise SystemExit("push-module: the descriptor layer holds no component-descriptor.yaml")
        return str(yaml.safe_load(member.read())["component"]["name"])


def push(release_dir: Path, registry: str, ca_file: str | None) -> str:
    layout = kyma_module.read_layout(release_dir / "module")
    name = component_name(layout)
    repo = ocidist.component_repo(name)
    client = ocidist.Client(registry, ca_file)
    for digest, data in layout.blobs.items():
        client.push_blob(repo, digest, data)
    digest = client.push_manifest(repo, layout.tag, layout.manifest, kyma_module.MANIFEST_TYPE)
    return f"{client.host}/{repo}:{layout.tag}@{digest}"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    p.add_argument("release_dir", type=Path)
    p.add_argument("--registry", required=True, help="https://host[:port] of the OCI registry")
    p.add_argument("--ca-file", help="the CA that signed the registry's certificate")
    a = p.parse_args(argv)
    try:
        print(push(a.release_dir, a.registry, a.ca_file))
    except ocidist.RegistryError as e:
        raise SystemExit(f"push-module: {e}") from e
    return 0


if __name__ == "__main__":
    sys.exit(main())
