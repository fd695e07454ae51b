"""Watches in tests: the Watch CRD and the shipped and example Watches (manifests), applied
to a real KCP the way an operator would (``kubectl apply`` semantics: create or replace)."""

from __future__ import annotations

import copy
import pathlib
from typing import Any, cast

import yaml
from kubernetes import client

from testing import controlplane
from tether.kube import apitypes

REPO = controlplane.REPO_ROOT
CRD_FILE = REPO / "manifests" / "kcp" / "crds" / "tether.kyma-project.io_watches.yaml"
DEFAULT_WATCH = REPO / "manifests" / "kcp" / "watches" / "configuration.yaml"
EXAMPLES = REPO / "manifests" / "examples" / "watches"
ALL_CONFIGMAPS = EXAMPLES / "all-configmaps.yaml"
OPT_IN_LABEL = "tether.kyma-project.io/configuration"


def install_crd(api: client.ApiClient) -> None:
    controlplane.install_crds(api, CRD_FILE)


def load(path: pathlib.Path, namespace: str) -> dict[str, Any]:
    body: dict[str, Any] = yaml.safe_load(path.read_text())
    body["metadata"]["namespace"] = namespace
    return body


def watch(name: str, resource: dict[str, str], namespace: str, **spec: Any) -> dict[str, Any]:
    """A Watch body: ``resource`` (group, version, resource, kind) and any spec field."""
    return {
        "apiVersion": f"{apitypes.WATCHES.group}/{apitypes.WATCHES.version}",
        "kind": "Watch",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"resource": dict(resource), **copy.deepcopy(spec)},
    }


def apply(api: client.ApiClient, body: dict[str, Any]) -> dict[str, Any]:
    """Create the Watch, or replace its spec when it exists; returns it as stored."""
    co = client.CustomObjectsApi(api)
    g, v, p = apitypes.WATCHES.group, apitypes.WATCHES.version, apitypes.WATCHES.plural
    ns, name = body["metadata"]["namespace"], body["metadata"]["name"]
    try:
        return cast(dict[str, Any], co.create_namespaced_custom_object(g, v, ns, p, body))
    except client.ApiException as e:
        if e.status != 409:
            raise
    current = cast(dict[str, Any], co.get_namespaced_custom_object(g, v, ns, p, name))
    current["spec"] = body["spec"]
    return cast(dict[str, Any], co.replace_namespaced_custom_object(g, v, ns, p, name, current))


def delete(api: client.ApiClient, namespace: str, name: str) -> None:
    co = client.CustomObjectsApi(api)
    try:
        co.delete_namespaced_custom_object(
            apitypes.WATCHES.group,
            apitypes.WATCHES.version,
            namespace,
            apitypes.WATCHES.plural,
            name,
        )
    except client.ApiException as e:
        if e.status != 404:
            raise


def all_configmaps(api: client.ApiClient, namespace: str) -> dict[str, Any]:
    """Install the CRD and the example Watch of every ConfigMap (the scope before Watches),
    for tests whose subject is not what is watched."""
    install_crd(api)
    return apply(api, load(ALL_CONFIGMAPS, namespace))


def widgets(group: str) -> dict[str, str]:
    """The Watch resource of ``widget_crd(group)``: a custom kind standing for a module's."""
    return {"group": group, "version": "v1", "resource": "widgets", "kind": "Widget"}


def widget_crd(group: str) -> dict[str, Any]:
    """A namespaced CRD of any shape, with a status subresource, for tests and benchmarks
    that watch a custom resource in a runtime (its own group per test: the shared planes)."""
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"widgets.{group}"},
        "spec": {
            "group": group,
            "scope": "Namespaced",
            "names": {
                "plural": "widgets",
                "singular": "widget",
                "kind": "Widget",
                "listKind": "WidgetList",
            },
            "versions": [
                {
                    "name": "v1",
                    "served": True,
                    "storage": True,
                    "subresources": {"status": {}},
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "x-kubernetes-preserve-unknown-fields": True,
                        }
                    },
                }
            ],
        },
    }
