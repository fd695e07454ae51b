"""Tether's Kyma module end to end on real parts, read back the way lifecycle-manager reads a
module: packaged from the checkout (hack/kyma_module.py, the code ``make release`` runs) with
the runtime manifest rendered from manifests/module, pushed by ``hack/push_module.py`` (what
``make push-module`` runs) to a real OCI registry on loopback over TLS (testing/registry.py);
lifecycle-manager's ModuleTemplate and ModuleReleaseMeta CRDs (hack/crds/lifecycle-manager)
validate both objects server-side on a KCP plane, and lifecycle-manager's published Go types
(its ``api`` module: hack/lcm-api-check, testing/lcmapi.py) decode them strictly, a mutated
object refused; then, for a Kyma CR, the template is found through the ModuleReleaseMeta's
channel (testing/modulelookup.py), the component descriptor fetched from the registry by the
ModuleReleaseMeta's ``ocmComponentName`` and the template's version, its ``raw-manifest``
local blob pulled by digest and applied to a fresh runtime plane with lifecycle-manager's
field manager (``declarative.kyma-project.io/applier``, forced).

Not shown: a running lifecycle-manager (the module proxy refuses its main module and its OCM
dependency: docs/releasing.md); its reading code is followed, not run."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from testing import controlplane, lcmapi, modulelookup, ocidist, registry

pytestmark = [pytest.mark.processes, pytest.mark.timeout(600)]

ROOT = controlplane.REPO_ROOT
CRDS = ROOT / "hack" / "crds" / "lifecycle-manager"
VERSION = "0.1.0"
IMAGE = "registry.example.com/kyma/tether@sha256:" + "cd" * 32
APPLIER = "declarative.kyma-project.io/applier"  # lifecycle-manager's field owner
COMPONENT = "kyma-project.io/module/tether"


@dataclass(frozen=True)
class Env:
    out: Path
    reg: registry.Registry
    client: ocidist.Client
    kcp: controlplane.ControlPlane
    skr: controlplane.ControlPlane
    pushed: str


def kubectl(plane: controlplane.ControlPlane, *args: str, check: bool = True) -> str:
    done = plane.kubectl(*args)
    if check:
        assert done.returncode == 0, f"kubectl {' '.join(args)}: {done.stderr[-2000:]}"
    return done.stdout + done.stderr


def package(out: Path, kcp: controlplane.ControlPlane) -> None:
    """tether-module.yaml and the module files, as hack/release.py writes them."""
    out.mkdir(parents=True)
    rendered = kubectl(kcp, "kustomize", str(ROOT / "manifests" / "module"))
    (out / "tether-module.yaml").write_text(rendered)
    code = (
        "import sys; sys.path.insert(0, 'hack'); import kyma_module as km;"
        "from pathlib import Path;"
        f"out = Path({str(out)!r}); raw = (out / 'tether-module.yaml').read_bytes();"
        f"km.write(out, km.build(km.load_config(), {VERSION!r}, {IMAGE!r}, raw), '# test')"
    )
    subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True, timeout=60)


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:
    work = tmp_path_factory.mktemp("module")
    with (
        registry.Registry(work / "registry").running() as reg,
        controlplane.planes("module-kcp", "module-skr") as planes,
    ):
        out = work / "release"
        package(out, planes["module-kcp"])
        done = subprocess.run(
            [sys.executable, "hack/push_module.py", str(out), "--registry", reg.url]
            + ["--ca-file", str(reg.ca_file)],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, f"{done.stderr[-2000:]}\nregistry: {reg.log_tail()}"
        yield Env(
            out,
            reg,
            ocidist.Client(reg.url, str(reg.ca_file)),
            planes["module-kcp"],
            planes["module-skr"],
            done.stdout.strip(),
        )


def test_the_component_is_in_the_registry_as_ocm_lays_it_out(env: Env) -> None:
    repo = f"component-descriptors/{COMPONENT}"
    assert env.pushed.startswith(f"127.0.0.1:{env.reg.port}/{repo}:{VERSION}@sha256:")
    manifest = env.client.manifest(repo, VERSION)
    assert (
        manifest["config"]["mediaType"] == "application/vnd.ocm.software.component.config.v1+json"
    )
    layer0, raw = manifest["layers"]
    assert layer0["mediaType"] == "application/vnd.ocm.software.component-descriptor.v2+yaml+tar"
    local = (env.out / "tether-module.yaml").read_bytes()
    assert raw["digest"] == "sha256:" + hashlib.sha256(local).hexdigest()
    # pushing the same release again is a no-op, not an error (every blob is there)
    done = subprocess.run(
        [sys.executable, "hack/push_module.py", str(env.out), "--registry", env.reg.url]
        + ["--ca-file", str(env.reg.ca_file)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0 and done.stdout.strip() == env.pushed, done.stderr


def test_a_registry_with_another_ca_is_refused(env: Env, tmp_path: Path) -> None:
    other = tmp_path / "other-ca.crt"
    other.write_bytes(env.kcp.ca_file.read_bytes())  # a CA that did not sign the registry
    done = subprocess.run(
        [sys.executable, "hack/push_module.py", str(env.out), "--registry", env.reg.url]
        + ["--ca-file", str(other)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode != 0 and "CERTIFICATE_VERIFY_FAILED" in done.stderr, done.stderr


def install_kcp_objects(env: Env) -> None:
    api = env.kcp.api_client()
    try:
        controlplane.install_crds(
            api,
            CRDS / "operator.kyma-project.io_moduletemplates.yaml",
            CRDS / "operator.kyma-project.io_modulereleasemetas.yaml",
            controlplane.KYMA_CRD,
        )
    finally:
        api.close()
    kubectl(env.kcp, "create", "namespace", "kcp-system", check=False)
    for name in ("moduletemplate.yaml", "modulereleasemeta.yaml"):
        kubectl(env.kcp, "apply", "--server-side", "-f", str(env.out / name))


def test_lifecycle_managers_crds_accept_the_template_and_the_release_meta(env: Env) -> None:
    install_kcp_objects(env)
    got = json.loads(
        kubectl(env.kcp, "get", "modulereleasemetas", "tether", "-n", "kcp-system", "-o", "json")
    )
    assert got["spec"]["ocmComponentName"] == COMPONENT
    # the server validates: both `mandatory` and `channels` is refused (the CRD's CEL rule)
    wrong = yaml.safe_load((env.out / "modulereleasemeta.yaml").read_text())
    wrong["metadata"]["name"] = "tether-wrong"
    wrong["spec"]["mandatory"] = {"version": VERSION}
    bad = env.out.parent / "wrong-mrm.json"
    bad.write_text(json.dumps(wrong))
    out = kubectl(env.kcp, "apply", "--server-side", "-f", str(bad), check=False)
    assert "exactly one of 'mandatory' or 'channels'" in out, out


def test_lifecycle_managers_go_types_take_the_template_and_the_release_meta(env: Env) -> None:
    done = lcmapi.check(env.out / "modulereleasemeta.yaml", env.out / "moduletemplate.yaml")
    assert done.returncode == 0, done.stderr
    assert "ModuleReleaseMeta kcp-system/tether and 1 ModuleTemplate(s)" in done.stdout


def _mutated(env: Env, tmp_path: Path, name: str, change: Any) -> Path:
    doc = yaml.safe_load((env.out / name).read_text())
    change(doc)
    path = tmp_path / name
    path.write_text(yaml.safe_dump(doc))
    return path


@pytest.mark.parametrize(
    ("name", "change", "expected"),
    [
        pytest.param(
            "moduletemplate.yaml",
            lambda d: d["spec"].update(moduleNmae="tether"),
            'unknown field "moduleNmae"',
            id="unknown-field",
        ),
        pytest.param(
            "moduletemplate.yaml",
            lambda d: d["metadata"].update(labelz={}),
            'unknown field "labelz"',
            id="unknown-metadata-field",
        ),
        pytest.param(
            "moduletemplate.yaml",
            lambda d: d["spec"].update(mandatory="no"),
            "cannot unmarshal string into Go struct field ModuleTemplateSpec.spec.mandatory",
            id="wrong-type",
        ),
        pytest.param(
            "moduletemplate.yaml",
            lambda d: d["spec"].pop("manager"),
            "spec.manager needs kind, version and name",
            id="missing-manager",
        ),
        pytest.param(
            "modulereleasemeta.yaml",
            lambda d: d["spec"].pop("ocmComponentName"),
            "spec.ocmComponentName is empty",
            id="missing-component-name",
        ),
        pytest.param(
            "modulereleasemeta.yaml",
            lambda d: d["spec"].update(ocmComponentName="Tether"),
            'spec.ocmComponentName "Tether" is not an OCM component name',
            id="bad-component-name",
        ),
        pytest.param(
            "modulereleasemeta.yaml",
            lambda d: d["spec"]["channels"][0].update(version="0.2.0"),
            'channel "regular": no ModuleTemplate kcp-system/tether-0.2.0',
            id="channel-without-template",
        ),
        pytest.param(
            "modulereleasemeta.yaml",
            lambda d: d["spec"].update(mandatory={"version": VERSION}),
            "exactly one of spec.mandatory or spec.channels",
            id="mandatory-and-channels",
        ),
    ],
)
def test_lifecycle_managers_go_types_refuse_a_mutated_object(
    env: Env, tmp_path: Path, name: str, change: Any, expected: str
) -> None:
    files = {n: env.out / n for n in ("modulereleasemeta.yaml", "moduletemplate.yaml")}
    files[name] = _mutated(env, tmp_path, name, change)
    done = lcmapi.check(files["modulereleasemeta.yaml"], files["moduletemplate.yaml"])
    assert done.returncode == 1, (done.stdout, done.stderr)
    assert f"lcm-api-check: {files[name]}: " in done.stderr, done.stderr
    assert expected in done.stderr, done.stderr


def test_lifecycle_managers_go_types_refuse_a_duplicate_key(env: Env, tmp_path: Path) -> None:
    text = (env.out / "moduletemplate.yaml").read_text()
    assert "\nspec:\n" in text
    path = tmp_path / "moduletemplate.yaml"
    path.write_text(text.replace("\nspec:\n", "\nspec:\n  version: 9.9.9\n", 1))
    done = lcmapi.check(env.out / "modulereleasemeta.yaml", path)
    assert done.returncode == 1, (done.stdout, done.stderr)
    assert 'key "version" already set in map' in done.stderr, done.stderr


def test_the_module_read_back_through_the_release_meta_installs_on_a_fresh_runtime(
    env: Env,
) -> None:
    install_kcp_objects(env)
    kyma: dict[str, Any] = {
        "apiVersion": "operator.kyma-project.io/v1beta2",
        "kind": "Kyma",
        "metadata": {"name": "runtime-a", "namespace": "kcp-system"},
        "spec": {"channel": "fast", "modules": [{"name": "tether"}]},
    }
    path = env.out.parent / "kyma.json"
    path.write_text(json.dumps(kyma))
    kubectl(env.kcp, "apply", "--server-side", "-f", str(path))
    # lifecycle-manager's lookup, on what the KCP serves
    kyma = json.loads(
        kubectl(env.kcp, "get", "kymas", "runtime-a", "-n", "kcp-system", "-o", "json")
    )
    ns = kyma["metadata"]["namespace"]
    mrm = json.loads(
        kubectl(env.kcp, "get", "modulereleasemetas", "tether", "-n", ns, "-o", "json")
    )
    version = modulelookup.channel_version(mrm, modulelookup.desired_channel(kyma, "tether"))
    template = json.loads(
        kubectl(
            env.kcp,
            "get",
            "moduletemplates",
            modulelookup.template_name("tether", version),
            "-n",
            ns,
            "-o",
            "json",
        )
    )
    descriptor = ocidist.read_component(
        env.client, mrm["spec"]["ocmComponentName"], template["spec"]["version"]
    )
    assert descriptor["component"]["version"] == VERSION
    raw = ocidist.raw_manifest(env.client, descriptor)
    assert raw == (env.out / "tether-module.yaml").read_bytes()
    objects = [o for o in yaml.safe_load_all(raw) if o]
    # the per-runtime parts are the enroller's: no Secret, no caBundle in the module
    assert not [o for o in objects if o["kind"] == "Secret"]
    hooks = [o for o in objects if o["kind"] == "ValidatingWebhookConfiguration"]
    assert hooks and all("caBundle" not in w["clientConfig"] for w in hooks[0]["webhooks"])
    # applied as lifecycle-manager applies it: server-side, its field owner, forced
    manifest = env.out.parent / "raw-manifest.yaml"
    manifest.write_bytes(raw)
    kubectl(
        env.skr,
        "apply",
        "--server-side",
        "--force-conflicts",
        f"--field-manager={APPLIER}",
        "-f",
        str(manifest),
    )
    for o in objects:
        meta = o["metadata"]
        where = ["-n", meta["namespace"]] if meta.get("namespace") else []
        got = json.loads(
            kubectl(
                env.skr,
                "get",
                o["kind"],
                meta["name"],
                *where,
                "-o",
                "json",
                "--show-managed-fields",
            )
        )
        managers = {m["manager"] for m in got["metadata"].get("managedFields", [])}
        assert APPLIER in managers, (o["kind"], meta["name"], managers)
