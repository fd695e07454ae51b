"""What the enroller installs in one runtime (``enroller.render``), with plain data."""

from __future__ import annotations

import base64
import dataclasses
import pathlib

import pytest

from enroller import render
from enroller import settings as settings_mod
from testing import renderinputs
from tether.base import config

BUNDLE, INPUTS = renderinputs.BUNDLE, renderinputs.INPUTS


def test_the_runtime_gets_its_secrets_ca_bundle_and_image() -> None:
    objs = render.render(BUNDLE, INPUTS)
    kinds = [o["kind"] for o in objs]
    assert (
        kinds[0] == "Namespace" and kinds[-1] == "ValidatingWebhookConfiguration"
    )  # registered last
    secrets = {o["metadata"]["name"]: o for o in objs if o["kind"] == "Secret"}
    client = {k: base64.b64decode(v) for k, v in secrets[render.CLIENT_SECRET]["data"].items()}
    assert client == {
        "runtime-id": b"rt-1",
        "listener-url": b"https://l.example.com",
        "ca.crt": b"LCA",
        "tls.crt": b"CERT",
        "tls.key": b"KEY-SECRET",
    }
    assert secrets[render.SERVING_SECRET]["type"] == "kubernetes.io/tls"
    hook = objs[-1]
    assert base64.b64decode(hook["webhooks"][0]["clientConfig"]["caBundle"]) == b"CA"
    images = {
        c["image"]
        for o in objs
        if o["kind"] == "Deployment"
        for c in o["spec"]["template"]["spec"]["containers"]
    }
    assert images == {"reg.example.com/tether:9.9"}
    assert all(
        o["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "tether-enroller" for o in objs
    )
    versions = {
        lb["app.kubernetes.io/version"]
        for o in objs
        if o["kind"] == "Deployment"
        for lb in (o["metadata"]["labels"], o["spec"]["template"]["metadata"]["labels"])
    }
    assert versions == {"9.9"}  # the image's tag
    assert (
        BUNDLE[0]["metadata"].get("labels", {}).get("app.kubernetes.io/managed-by") is None
    )  # not mutated


def test_every_pod_template_names_the_listener_so_a_moved_runtime_restarts_its_pods() -> None:
    """The pods read the listener URL from the Secret into their environment at start: a
    runtime moved to another KCP (sharding) must have them restarted, and a changed pod
    template is what restarts them."""
    here = render.render(BUNDLE, INPUTS)
    moved = render.render(
        BUNDLE, dataclasses.replace(INPUTS, listener_url="https://l.kcp-b.example.com")
    )
    for objs, url in ((here, "https://l.example.com"), (moved, "https://l.kcp-b.example.com")):
        deployments = [o for o in objs if o["kind"] == "Deployment"]
        assert deployments and {
            o["spec"]["template"]["metadata"]["annotations"][render.LISTENER_ANNOTATION]
            for o in deployments
        } == {url}
    notes = [
        next(o for o in objs if o["kind"] == "ValidatingWebhookConfiguration")["metadata"][
            "annotations"
        ]
        for objs in (here, moved)
    ]
    assert notes[0][render.DIGEST] != notes[1][render.DIGEST]


# the release the bundle's manifests name (setup.cfg's version, make bundle)
BUNDLE_VERSION = next(
    o["metadata"]["labels"]["app.kubernetes.io/version"]
    for o in BUNDLE
    if o["kind"] == "Deployment"
)


@pytest.mark.parametrize(
    "ref, version",
    [
        ("reg.example.com:5000/tether:0.2.0", "0.2.0"),
        ("reg.example.com/tether:0.2.0@sha256:" + "a" * 64, "0.2.0"),
        ("reg.example.com/tether@sha256:" + "a" * 64, BUNDLE_VERSION),  # a digest alone
        ("reg.example.com:5000/tether", BUNDLE_VERSION),
    ],
)
def test_the_version_label_follows_the_image_tag(ref: str, version: str) -> None:
    objs = render.render(BUNDLE, dataclasses.replace(INPUTS, image=ref))
    assert {
        o["spec"]["template"]["metadata"]["labels"]["app.kubernetes.io/version"]
        for o in objs
        if o["kind"] == "Deployment"
    } == {version}


def test_the_digest_follows_objects_and_serials_never_keys() -> None:
    d = render.render(BUNDLE, INPUTS)[-1]["metadata"]["annotations"][render.DIGEST]
    other_keys = dataclasses.replace(INPUTS, client_key=b"OTHER", serving_key=b"OTHER")
    assert render.render(BUNDLE, other_keys)[-1]["metadata"]["annotations"][render.DIGEST] == d
    renewed = dataclasses.replace(INPUTS, client_serial="ff")
    assert render.render(BUNDLE, renewed)[-1]["metadata"]["annotations"][render.DIGEST] != d
    rollout = dataclasses.replace(INPUTS, image="reg.example.com/tether:10.0")
    assert render.render(BUNDLE, rollout)[-1]["metadata"]["annotations"][render.DIGEST] != d
    notes = render.render(BUNDLE, INPUTS)[-1]["metadata"]["annotations"]
    assert "SECRET" not in str(notes)


def test_an_image_pull_secret_is_copied_and_every_pod_spec_names_it() -> None:
    config = b'{"auths": {"reg.example.com": {"auth": "dTpw"}}}'
    plain = render.render(BUNDLE, INPUTS)
    assert not any(
        o["kind"] == "Deployment" and "imagePullSecrets" in o["spec"]["template"]["spec"]
        for o in plain
    )
    objs = render.render(BUNDLE, dataclasses.replace(INPUTS, image_pull_secret=config))
    pull = next(o for o in objs if o["metadata"]["name"] == render.PULL_SECRET)
    assert pull["kind"] == "Secret" and pull["type"] == "kubernetes.io/dockerconfigjson"
    assert pull["metadata"]["namespace"] == render.NAMESPACE
    assert base64.b64decode(pull["data"][".dockerconfigjson"]) == config
    deployments = [o for o in objs if o["kind"] == "Deployment"]
    assert len(deployments) == 2
    assert all(
        d["spec"]["template"]["spec"]["imagePullSecrets"] == [{"name": render.PULL_SECRET}]
        for d in deployments
    )
    assert objs.index(pull) < objs.index(deployments[0])  # the Secret before the pods naming it
    # a new credential is a new digest (applied again); the digest never shows the credential
    d = objs[-1]["metadata"]["annotations"][render.DIGEST]
    other = render.render(BUNDLE, dataclasses.replace(INPUTS, image_pull_secret=config + b" "))
    assert other[-1]["metadata"]["annotations"][render.DIGEST] != d
    assert "dTpw" not in str(objs[-1]["metadata"]["annotations"])


@pytest.mark.parametrize(
    "content, message",
    [
        (b"not json dTpw", "is not JSON"),
        (b'{"dTpw": 1}', 'no "auths"'),
        (b"[]", 'no "auths"'),
    ],
)
def test_an_unusable_image_pull_secret_file_is_refused_without_its_content(
    tmp_path: pathlib.Path, content: bytes, message: str
) -> None:
    f = tmp_path / "config.json"
    f.write_bytes(content)
    with pytest.raises(config.SettingError, match=message) as e:
        settings_mod._pull_secret(str(f))
    assert "dTpw" not in str(e.value) and "IMAGE_PULL_SECRET_FILE" in str(e.value)
    f.write_bytes(b'{"auths": {}}')
    assert settings_mod._pull_secret(str(f)) == b'{"auths": {}}'
    assert settings_mod._pull_secret(None) is None


@pytest.mark.parametrize(
    "text, message",
    [
        ("a: [", "not YAML"),
        ("apiVersion: v1\nkind: Secret\nmetadata: {name: x}\n", "must not hold Secrets"),
        ("apiVersion: v1\nkind: Pod\nmetadata: {name: x}\n", "not a kind the enroller installs"),
        (
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n",
            "must hold the ValidatingWebhookConfiguration",
        ),
    ],
)
def test_an_unusable_bundle_is_refused_with_why(text: str, message: str) -> None:
    with pytest.raises(render.BundleError, match=message):
        render.load_bundle(text)


def test_the_client_secret_carries_the_digest_key_and_a_held_key_is_kept() -> None:
    key = b"k" * 32
    objs = render.render(BUNDLE, dataclasses.replace(INPUTS, digest_key=key))
    secret = next(o for o in objs if o["metadata"]["name"] == render.CLIENT_SECRET)
    assert base64.b64decode(secret["data"]["digest-key"]) == key
    assert (
        "digest-key"
        not in next(
            o
            for o in render.render(BUNDLE, INPUTS)
            if o["metadata"]["name"] == render.CLIENT_SECRET
        )["data"]
    )
    assert render.kept_digest_key(secret["data"]) == key  # read back: the same key applied again
    assert base64.b64encode(key).decode() not in str(objs[-1]["metadata"]["annotations"])
    assert str(key) not in repr(dataclasses.replace(INPUTS, digest_key=key))
    for held in (
        {},
        {"digest-key": "not base64!"},
        {"digest-key": base64.b64encode(b"short").decode()},
        {"digest-key": 7},
    ):
        assert render.kept_digest_key(held) is None  # a new one is written
    assert render.new_digest_key() != render.new_digest_key() and len(render.new_digest_key()) == 32
