"""The SKR objects of one runtime: Tether's SKR bundle (``kubectl kustomize manifests/skr``,
kept as ``enroller/skr-bundle.yaml``, or an operator's own rendering given as a file) with
what belongs to that runtime filled in:

* the ``tether-runtime-client`` Secret: runtime ID, listener URL and CA, client certificate,
  and the runtime's digest key (``digest-key``, 32 random bytes; ``kept_digest_key``: once
  there it stays, across re-applies and renewals), with which the webhook and the poller
  key a ``digest`` Watch's values (``tether.wire.digests.of``); the KCP never holds it;
* the ``tether-webhook-serving`` Secret: the webhook's serving certificate;
* the webhook configuration's ``caBundle`` (the watcher CA, old and new during a rollover);
* the image of every Tether container (``TETHER_ENROLLER_IMAGE``), for rollouts, and its tag
  as the Deployments' ``app.kubernetes.io/version`` (a digest alone keeps the bundle's);
* with ``TETHER_ENROLLER_IMAGE_PULL_SECRET_FILE``: the ``tether-image-pull`` Secret (type
  ``kubernetes.io/dockerconfigjson``, the file's content) and ``imagePullSecrets`` naming it
  in every Deployment's pod spec, so a private registry's image can be pulled;
* with the Watches in force in the runtime (``Inputs.watches``; None: before Watches, the
  bundle's registration as it is): one webhook per Watch in the webhook configuration
  (``watchwire.webhook_entries`` from the bundle's webhook, its client config, caBundle and
  failure policy kept; none when no Watch is in force) and the ``tether-watches`` ConfigMap
  (``watchwire.to_wire``) the runtime's webhook and poller read, applied before the
  Deployments;
* ``app.kubernetes.io/managed-by: tether-enroller`` on every object, and on the webhook
  configuration and the client Secret the bundle's digest and the certificates' serials,
  which let one read tell the enroller that nothing changed; on the webhook configuration
  the Watches' digest, which tells it that only the Watches changed.

Beside lifecycle-manager (``module=True``, ``TETHER_ENROLLER_MODE=module``) only the
per-runtime part of that: the Secrets, the Watch list, and the webhook configuration's
``caBundle`` and notes as a partial object (``module_objects``).

No I/O: ``render`` takes plain data and returns plain dicts in apply order.
"""

from __future__ import annotations

import base64
import copy
import dataclasses
import hashlib
import json
import pathlib
import re
import secrets
from collections.abc import Iterable, Mapping
from typing import Any

import yaml

from tether.kube import apitypes, gateway
from tether.wire import digests, watchwire
from tether.wire import watches as watch_api

BUNDLE_FILE = pathlib.Path(__file__).with_name("skr-bundle.yaml")
NAMESPACE = "tether-system"
CLIENT_SECRET = "tether-runtime-client"
SERVING_SECRET = "tether-webhook-serving"
PULL_SECRET = "tether-image-pull"
VERSION_LABEL = "app.kubernetes.io/version"
WEBHOOK_CONFIG = "tether-configmaps"
WEBHOOK_SERVICE_NAMES = ("tether-webhook.tether-system.svc", "tether-webhook.tether-system")
MANAGER = "tether-enroller"
MANAGED_BY = {apitypes.MANAGED_BY_LABEL: MANAGER}
DIGEST = "tether.kyma-project.io/bundle-digest"
WATCHES_DIGEST = "tether.kyma-project.io/watches-digest"  # on the webhook configuration
LISTENER_ANNOTATION = (
    "tether.kyma-project.io/listener-url"  # on the pod templates: the URL they send to
)
CLIENT_SERIAL = "tether.kyma-project.io/client-serial"
SERVING_SERIAL = "tether.kyma-project.io/serving-serial"
SERVING_NOT_AFTER = "tether.kyma-project.io/serving-not-after"
SERVING_RENEW_AT = "tether.kyma-project.io/serving-renew-at"

RESOURCES: dict[tuple[str, str], gateway.Resource] = {
    (r.api_version, kind): r
    for kind, r in (
        ("Namespace", apitypes.NAMESPACES),
        ("ServiceAccount", apitypes.SERVICE_ACCOUNTS),
        ("ConfigMap", apitypes.CONFIGMAPS),
        ("Secret", apitypes.SECRETS),
        ("Service", apitypes.SERVICES),
        ("Deployment", apitypes.DEPLOYMENTS),
        ("Role", apitypes.ROLES),
        ("RoleBinding", apitypes.ROLE_BINDINGS),
        ("ClusterRole", apitypes.CLUSTER_ROLES),
        ("ClusterRoleBinding", apitypes.CLUSTER_ROLE_BINDINGS),
        ("PodDisruptionBudget", apitypes.POD_DISRUPTION_BUDGETS),
        ("NetworkPolicy", apitypes.NETWORK_POLICIES),
        ("PriorityClass", apitypes.PRIORITY_CLASSES),
        ("ValidatingWebhookConfiguration", apitypes.VALIDATING_WEBHOOK_CONFIGURATIONS),
    )
}
# apply order: what others refer to first, the webhook registration last
ORDER = [
    "Namespace",
    "PriorityClass",
    "ServiceAccount",
    "ClusterRole",
    "ClusterRoleBinding",
    "Role",
    "RoleBinding",
    "ConfigMap",
    "Secret",
    "Service",
    "Deployment",
    "PodDisruptionBudget",
    "NetworkPolicy",
    "ValidatingWebhookConfiguration",
]


class BundleError(ValueError):
    """The SKR bundle cannot be used (not YAML, an unknown kind, no webhook configuration)."""


@dataclasses.dataclass(frozen=True)
class Inputs:
    runtime_id: str
    listener_url: str
    listener_ca: bytes
    client_cert: bytes
    client_key: bytes
    client_serial: str
    serving_cert: bytes
    serving_key: bytes
    serving_serial: str
    serving_not_after: str
    ca_bundle: bytes
    serving_renew_at: str = ""
    image: str | None = None
    image_pull_secret: bytes | None = None  # a .dockerconfigjson; None: no imagePullSecrets
    watches: tuple[watch_api.Watch, ...] | None = (
        None  # in force in the runtime; None: before Watches
    )
    digest_key: bytes = dataclasses.field(
        default=b"", repr=False
    )  # b"": none written (placeholders)


def resource(obj: Mapping[str, Any]) -> gateway.Resource:
    try:
        return RESOURCES[(obj["apiVersion"], obj["kind"])]
    except KeyError:
        raise BundleError(
            f"{obj.get('apiVersion')} {obj.get('kind')} is not a kind the enroller installs"
        ) from None


def load_bundle(text: str) -> list[dict[str, Any]]:
    """The bundle's objects; every kind known, exactly one webhook configuration."""
    try:
        docs = [d for d in yaml.safe_load_all(text) if d]
    except yaml.YAMLError as e:
        raise BundleError(f"not YAML: {str(e).splitlines()[0]}") from None
    for d in docs:
        if not isinstance(d, dict) or "metadata" not in d:
            raise BundleError("every document must be a Kubernetes object")
        resource(d)
        if d["kind"] == "Secret":
            raise BundleError(
                f"the bundle must not hold Secrets ({d['metadata'].get('name')}): the "
                "enroller writes the runtime's own"
            )
    hooks = [d for d in docs if d["kind"] == "ValidatingWebhookConfiguration"]
    if [h["metadata"]["name"] for h in hooks] != [WEBHOOK_CONFIG]:
        raise BundleError(
            f"the bundle must hold the ValidatingWebhookConfiguration {WEBHOOK_CONFIG}"
        )
    return docs


def image(bundle: Iterable[Mapping[str, Any]], override: str | None = None) -> str:
    """The image the runtimes are given: ``override`` (``TETHER_ENROLLER_IMAGE``), else the
    bundle's Tether image."""
    if override:
        return override
    for o in bundle:
        if o["kind"] == "Deployment":
            for c in o["spec"]["template"]["spec"].get("containers") or []:
                if _is_tether(c.get("image", "")):
                    return str(c["image"])
    return "unknown"


def _tag(ref: str) -> str | None:
    """The tag of an image reference when it is a valid label value (``r/tether:0.2.0`` ->
    ``0.2.0``); None for a digest-only or untagged reference."""
    name = ref.split("@", 1)[0]
    tag = name.rpartition(":")[2] if ":" in name.rsplit("/", 1)[-1] else ""
    return tag if re.fullmatch(r"[A-Za-z0-9]([A-Za-z0-9_.-]{0,61}[A-Za-z0-9])?", tag) else None


def _is_tether(ref: str) -> bool:
    return ref.rsplit(":", 1)[0].rsplit("/", 1)[-1] == "tether"


def kept_digest_key(data: Mapping[str, Any]) -> bytes | None:
    """The digest key of a client Secret's ``data`` (base64, as served) when it is one
    (at least ``digests.MIN_KEY_BYTES``); None: a new one is to be written."""
    raw = data.get(digests.KEY)
    if not isinstance(raw, str):
        return None
    try:
        key = base64.b64decode(raw, validate=True)
    except ValueError:
        return None
    return key if digests.MIN_KEY_BYTES <= len(key) <= 1024 else None


def new_digest_key() -> bytes:
    return secrets.token_bytes(digests.MIN_KEY_BYTES)


def digest(
    objects: Iterable[Mapping[str, Any]],
    client_serial: str,
    serving_serial: str,
    pull_secret: bytes | None = None,
    *,
    watches: bool = False,
) -> str:
    """What identifies an installed state: the non-secret objects, the certificates' serials
    (never key material) and the image pull credentials (hashed into the digest only, so a
    changed credential is applied); whether Watches are rendered (which ones: ``WATCHES_DIGEST``,
    so a changed Watch applies only what it changes). The digest key is not in it: a client
    Secret without its key is applied whatever the digest (``enroller.install``)."""
    h = hashlib.sha256()
    for o in objects:
        if o["kind"] != "Secret":
            h.update(json.dumps(o, sort_keys=True).encode())
    h.update(f"{client_serial}/{serving_serial}".encode())
    if pull_secret is not None:
        h.update(hashlib.sha256(pull_secret).digest())
    if watches:
        h.update(b"/watches")
    return h.hexdigest()[:32]


def render(
    bundle: list[dict[str, Any]], i: Inputs, *, module: bool = False
) -> list[dict[str, Any]]:
    """The runtime's objects in apply order. ``module`` (``TETHER_ENROLLER_MODE=module``):
    only what is per runtime, beside the Kyma module that lifecycle-manager installs
    (``module_objects``)."""
    if module:
        return module_objects(bundle, i)
    objs = copy.deepcopy(bundle)
    for o in objs:
        _customize(o, i)
    d = digest(
        objs, i.client_serial, i.serving_serial, i.image_pull_secret, watches=i.watches is not None
    )
    notes = {
        DIGEST: d,
        CLIENT_SERIAL: i.client_serial,
        SERVING_SERIAL: i.serving_serial,
        SERVING_NOT_AFTER: i.serving_not_after,
        SERVING_RENEW_AT: i.serving_renew_at,
    }
    hook_notes = dict(notes)
    if i.watches is not None:
        _watches(objs, i.watches)
        hook_notes[WATCHES_DIGEST] = watches_digest(i.watches)
    for o in objs:
        if o["kind"] == "ValidatingWebhookConfiguration":
            o["metadata"]["annotations"] = {
                **(o["metadata"].get("annotations") or {}),
                **hook_notes,
            }
    objs.extend(_secrets(i, notes))
    return sorted(objs, key=lambda o: ORDER.index(o["kind"]))


def module_objects(bundle: list[dict[str, Any]], i: Inputs) -> list[dict[str, Any]]:
    """What the enroller writes beside the Kyma module (the module's manifest is the bundle
    without its per-runtime parts; lifecycle-manager applies it as its field manager): the
    runtime's Secrets, the Watch list when Watches are in force, and of the module's webhook
    configuration only each webhook's ``caBundle`` and the enroller's notes, as a partial
    object (server-side apply merges it by webhook name, so neither field manager holds a
    field of the other). No Namespace, Deployment, RBAC or image: those are the module's."""
    hook = next(o for o in bundle if o["kind"] == "ValidatingWebhookConfiguration")
    ca = base64.b64encode(i.ca_bundle).decode()
    partial: dict[str, Any] = {
        "apiVersion": hook["apiVersion"],
        "kind": hook["kind"],
        "metadata": {"name": hook["metadata"]["name"]},
        "webhooks": [
            {"name": w["name"], "clientConfig": {"caBundle": ca}}
            for w in hook.get("webhooks") or []
        ],
    }
    objs: list[dict[str, Any]] = [partial]
    notes = {
        DIGEST: digest(
            objs,
            i.client_serial,
            i.serving_serial,
            i.image_pull_secret,
            watches=i.watches is not None,
        ),
        CLIENT_SERIAL: i.client_serial,
        SERVING_SERIAL: i.serving_serial,
        SERVING_NOT_AFTER: i.serving_not_after,
        SERVING_RENEW_AT: i.serving_renew_at,
    }
    hook_notes = dict(notes)
    if i.watches is not None:
        hook_notes[WATCHES_DIGEST] = watches_digest(i.watches)
        objs.append(watch_list(i.watches))
    partial["metadata"]["annotations"] = hook_notes
    objs.extend(_secrets(i, notes))
    return sorted(objs, key=lambda o: ORDER.index(o["kind"]))


def _customize(o: dict[str, Any], i: Inputs) -> None:
    """One object of the bundle made this runtime's: labels, image, pull secret, caBundle."""
    meta = o.setdefault("metadata", {})
    meta["labels"] = {**(meta.get("labels") or {}), **MANAGED_BY}
    if o["kind"] == "Deployment":
        # the runtime's series carry its ID (the PodMonitors copy this pod label)
        template = o["spec"]["template"].setdefault("metadata", {})
        template["labels"] = {
            **(template.get("labels") or {}),
            apitypes.RUNTIME_ID_LABEL: i.runtime_id,
        }
        # the pods read the listener URL from the Secret into their environment: a runtime
        # moved to another KCP (docs/enroller.md, "Sharding") has them restarted by this
        template["annotations"] = {
            **(template.get("annotations") or {}),
            LISTENER_ANNOTATION: i.listener_url,
        }
    if o["kind"] == "Deployment" and i.image:
        for c in o["spec"]["template"]["spec"].get("containers") or []:
            if _is_tether(c.get("image", "")):
                c["image"] = i.image
        version = _tag(i.image)  # a digest alone: the bundle's release label stays
        if version:
            for labels in (meta["labels"], o["spec"]["template"]["metadata"]["labels"]):
                labels[VERSION_LABEL] = version
    if o["kind"] == "Deployment" and i.image_pull_secret is not None:
        pod = o["spec"]["template"]["spec"]
        refs = [r for r in pod.get("imagePullSecrets") or [] if r.get("name") != PULL_SECRET]
        pod["imagePullSecrets"] = [*refs, {"name": PULL_SECRET}]
    if o["kind"] == "ValidatingWebhookConfiguration":
        for hook in o.get("webhooks") or []:
            hook.setdefault("clientConfig", {})["caBundle"] = base64.b64encode(i.ca_bundle).decode()


def _b64(b: bytes) -> str:
    return base64.b64encode(b).decode()


def _secrets(i: Inputs, notes: Mapping[str, str]) -> list[dict[str, Any]]:
    """The runtime's Secrets: its client credentials (and digest key), the webhook's serving
    certificate, the image pull credentials."""
    b64 = _b64
    client_data = {
        "runtime-id": b64(i.runtime_id.encode()),
        "listener-url": b64(i.listener_url.encode()),
        "ca.crt": b64(i.listener_ca),
        "tls.crt": b64(i.client_cert),
        "tls.key": b64(i.client_key),
    }
    if i.digest_key:
        client_data[digests.KEY] = b64(i.digest_key)
    out: list[dict[str, Any]] = [
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "type": "Opaque",
            "metadata": {
                "name": CLIENT_SECRET,
                "namespace": NAMESPACE,
                "labels": {"app.kubernetes.io/part-of": "tether", **MANAGED_BY},
                "annotations": dict(notes),
            },
            "data": client_data,
        },
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "type": "kubernetes.io/tls",
            "metadata": {
                "name": SERVING_SECRET,
                "namespace": NAMESPACE,
                "labels": {"app.kubernetes.io/part-of": "tether", **MANAGED_BY},
            },
            # ca.crt: the watcher CA, so a scraper can verify the webhook's metrics port
            "data": {
                "tls.crt": b64(i.serving_cert),
                "tls.key": b64(i.serving_key),
                "ca.crt": b64(i.ca_bundle),
            },
        },
    ]
    if i.image_pull_secret is not None:
        out.append(
            {
                "apiVersion": "v1",
                "kind": "Secret",
                "type": "kubernetes.io/dockerconfigjson",
                "metadata": {
                    "name": PULL_SECRET,
                    "namespace": NAMESPACE,
                    "labels": {"app.kubernetes.io/part-of": "tether", **MANAGED_BY},
                },
                "data": {".dockerconfigjson": b64(i.image_pull_secret)},
            }
        )
    return out


def _watches(objs: list[dict[str, Any]], ws: tuple[watch_api.Watch, ...]) -> None:
    """The webhook configuration's whole list of webhooks, one per Watch from the bundle's
    webhook (a Watch gone loses its webhook: the list is replaced), and the Watch list."""
    for o in objs:
        if o["kind"] == "ValidatingWebhookConfiguration":
            o["webhooks"] = watchwire.webhook_entries(ws, (o.get("webhooks") or [{}])[0])
    objs.append(watch_list(ws))


def watches_digest(ws: tuple[watch_api.Watch, ...]) -> str:
    """What identifies the Watches rendered into a runtime (the webhooks are made from them
    and the bundle's webhook, which the bundle's digest covers)."""
    return hashlib.sha256(watchwire.to_wire(ws).encode()).hexdigest()[:32]


def watch_objects(objs: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """Of a rendering, what a change of the Watches alone applies: the Watch list, then the
    webhook configuration."""
    return [
        o
        for o in objs
        if o["kind"] == "ValidatingWebhookConfiguration"
        or (o["kind"] == "ConfigMap" and o["metadata"]["name"] == watchwire.WIRE_CONFIGMAP)
    ]


def watch_list(ws: tuple[watch_api.Watch, ...]) -> dict[str, Any]:
    """The runtime's ``tether-watches`` ConfigMap: the Watches in force there."""
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": watchwire.WIRE_CONFIGMAP,
            "namespace": NAMESPACE,
            "labels": {"app.kubernetes.io/part-of": "tether", **MANAGED_BY},
        },
        "data": {watchwire.WIRE_KEY: watchwire.to_wire(ws)},
    }


def cluster_scoped(objs: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """What removing Tether must delete besides its namespace."""
    return [o for o in objs if not resource(o).namespaced and o["kind"] != "Namespace"]
