"""What the enroller writes beside lifecycle-manager (``TETHER_ENROLLER_MODE=module``,
``render.module_objects``), with plain data: only the per-runtime part, the webhook
configuration as a partial object naming only each webhook's caBundle. On real planes:
tests/enroller/test_module_mode.py."""

from __future__ import annotations

import base64
import dataclasses

from enroller import render
from testing import renderinputs
from tether.wire import watchwire

BUNDLE, INPUTS = renderinputs.BUNDLE, renderinputs.INPUTS


def test_only_the_secrets_and_the_ca_bundle_are_written() -> None:
    objs = render.render(BUNDLE, INPUTS, module=True)
    assert sorted((o["kind"], o["metadata"]["name"]) for o in objs) == [
        ("Secret", render.CLIENT_SECRET),
        ("Secret", render.SERVING_SECRET),
        ("ValidatingWebhookConfiguration", render.WEBHOOK_CONFIG),
    ]
    hook = objs[-1]
    bundle_hook = next(o for o in BUNDLE if o["kind"] == "ValidatingWebhookConfiguration")
    assert hook["webhooks"] == [
        {"name": w["name"], "clientConfig": {"caBundle": base64.b64encode(b"CA").decode()}}
        for w in bundle_hook["webhooks"]
    ]
    assert set(hook["metadata"]) == {"name", "annotations"}  # no labels: the module's
    assert hook["metadata"]["annotations"][render.DIGEST]


def test_the_watch_list_only_when_watches_are_in_force() -> None:
    objs = render.render(BUNDLE, dataclasses.replace(INPUTS, watches=()), module=True)
    names = [o["metadata"]["name"] for o in objs if o["kind"] == "ConfigMap"]
    assert names == [watchwire.WIRE_CONFIGMAP]
    hook = next(o for o in objs if o["kind"] == "ValidatingWebhookConfiguration")
    assert render.WATCHES_DIGEST in hook["metadata"]["annotations"]
    assert len(hook["webhooks"]) == 1  # the module's registration, not one per Watch


def test_the_digest_follows_the_certificates_and_the_ca() -> None:
    def digest(i: render.Inputs) -> str:
        objs = render.render(BUNDLE, i, module=True)
        return str(objs[-1]["metadata"]["annotations"][render.DIGEST])

    base = digest(INPUTS)
    assert digest(dataclasses.replace(INPUTS, image="other/tether:1")) == base  # not ours
    assert digest(dataclasses.replace(INPUTS, client_serial="c3")) != base
    assert digest(dataclasses.replace(INPUTS, ca_bundle=b"CA2")) != base
