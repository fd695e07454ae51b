"""Whether a Watch says what it means: its kind against its resource, and an object's own
kind against its Watch's (pure).

A Watch names its resource twice: by the plural (what the webhook rule, the poller's list
and the read-back use) and by the kind (what the reduction rules and the listener's checks
use). Both must name the same thing, else a Watch of ``secrets`` declared as a
``ConfigMap`` would copy a Secret's values as if they were a ConfigMap's.

* The groups Kubernetes itself serves (``BUILTIN``: the core group, ``apps``, ``batch``,
  ...) are checked by a table of their namespaced resources: a resource not in it is
  refused, and so is a kind other than the table's (``builtin_problem``). The Watch CRD
  holds the same table as a CEL rule (``cel_rule``; tests/tether/test_watchkinds.py keeps
  them equal), so the API server refuses such a Watch before anyone reads it.
* Any other group (a custom resource) is checked against the runtime's discovery
  (``discovered_problem``, an ``APIResourceList`` as served) where the enroller renders the
  Watch into a runtime (``enroller.discovery``).
* In the runtime, every object read or listed is checked against its Watch before it is
  reduced (``object_problem``: its own ``apiVersion`` and ``kind``); an object of another
  kind is never sent.
* A Secret is recognised by its resource *or* its kind (``is_secret``): the rules for
  Secrets (metadata or digest only; the listener refuses any value that is not a digest)
  hold whatever the other one says.

What a value-hiding mode (every mode but ``full``) keeps of an object's annotations lives
here too: only ``KEPT_ANNOTATIONS`` (``kept_annotations`` in the runtime,
``annotation_left_out`` in the listener), never ``LAST_APPLIED``, which copies the values.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from tether.kube import apitypes

# The namespaced resources of the groups Kubernetes serves itself: group -> plural -> kind.
# Cluster-scoped resources (namespaces, nodes, ...) are not here: a Watch covers namespaced
# kinds only. (The plurals tether.kube.apitypes declares are written by their names.)
BUILTIN: Mapping[str, Mapping[str, str]] = {
    "": {
        "configmaps": "ConfigMap",
        "secrets": "Secret",
        "services": "Service",
        "serviceaccounts": "ServiceAccount",
        "pods": "Pod",
        "endpoints": "Endpoints",
        apitypes.EVENTS.plural: "Event",
        "limitranges": "LimitRange",
        "resourcequotas": "ResourceQuota",
        "persistentvolumeclaims": "PersistentVolumeClaim",
        "podtemplates": "PodTemplate",
        "replicationcontrollers": "ReplicationController",
    },
    "apps": {
        apitypes.DEPLOYMENTS.plural: "Deployment",
        "statefulsets": "StatefulSet",
        "daemonsets": "DaemonSet",
        "replicasets": "ReplicaSet",
        "controllerrevisions": "ControllerRevision",
    },
    "batch": {"jobs": "Job", "cronjobs": "CronJob"},
    "autoscaling": {"horizontalpodautoscalers": "HorizontalPodAutoscaler"},
    "policy": {"poddisruptionbudgets": "PodDisruptionBudget"},
    "networking.k8s.io": {"ingresses": "Ingress", "networkpolicies": "NetworkPolicy"},
    "rbac.authorization.k8s.io": {"roles": "Role", "rolebindings": "RoleBinding"},
    apitypes.LEASES.group: {apitypes.LEASES.plural: "Lease"},
    "discovery.k8s.io": {"endpointslices": "EndpointSlice"},
    "events.k8s.io": {apitypes.EVENTS.plural: "Event"},
}
SECRETS = ("", "secrets", "Secret")  # (group, plural, kind)
LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"  # a copy of the whole object
# the annotations a value-hiding mode (every mode but full) keeps: who manages the object and
# which certificate or account it belongs to, never a copy of its values
KEPT_ANNOTATIONS = frozenset(
    {
        "meta.helm.sh/release-name",
        "meta.helm.sh/release-namespace",
        "kubernetes.io/service-account.name",
        "kubernetes.io/service-account.uid",
        "cert-manager.io/certificate-name",
        "cert-manager.io/issuer-name",
        "cert-manager.io/issuer-kind",
        "cert-manager.io/issuer-group",
    }
)


class Target(Protocol):
    """``tether.wire.watches.Target``."""

    @property
    def group(self) -> str: ...

    @property
    def version(self) -> str: ...

    @property
    def resource(self) -> str: ...

    @property
    def kind(self) -> str: ...


def is_secret(target: Target) -> bool:
    """Whether the target is the core group's Secrets, by its resource or by its kind."""
    return target.group == SECRETS[0] and (
        target.resource == SECRETS[1] or target.kind == SECRETS[2]
    )


def is_secret_kind(group: str, kind: str) -> bool:
    """Whether a record's (group, kind) is a Secret's."""
    return (group, kind) == (SECRETS[0], SECRETS[2])


def builtin_problem(target: Target) -> str | None:
    """Why a Watch of a group Kubernetes serves names a resource and kind that do not go
    together (None: they do, or the group is not built in)."""
    table = BUILTIN.get(target.group)
    if table is None:
        return None
    where = f"the group {target.group!r}" if target.group else "the core group"
    kind = table.get(target.resource)
    if kind is None:
        return (
            f"spec.resource.resource: {target.resource!r} is not a namespaced resource of {where}"
        )
    if kind != target.kind:
        return (
            f"spec.resource.kind: the resource {target.resource} of {where} is of the kind "
            f"{kind}, not {target.kind}"
        )
    return None


def discovered_problem(target: Target, resources: Mapping[str, Any]) -> str | None:
    """Why the runtime's discovery of the target's group and version (an ``APIResourceList``
    as served) contradicts the Watch, or None: the resource is served with the Watch's kind
    and namespaced, or it is not served at all (then nothing is listed or read for it)."""
    for r in resources.get("resources") or ():
        if not isinstance(r, Mapping) or r.get("name") != target.resource:
            continue
        if r.get("kind") != target.kind:
            return (
                f"spec.resource.kind: this runtime serves {target.resource} of "
                f"{_api_version(target)} as the kind {str(r.get('kind'))[:63]}, "
                f"not {target.kind}"
            )
        if r.get("namespaced") is not True:
            return f"spec.resource: this runtime serves {target.resource} cluster-scoped"
        return None
    return None


def object_problem(target: Target, obj: Mapping[str, Any]) -> str | None:
    """Why an object read from the runtime is not of the Watch's kind (its own
    ``apiVersion`` and ``kind``; absent ones are not the Watch's), or None."""
    api_version, kind = obj.get("apiVersion"), obj.get("kind")
    if api_version == _api_version(target) and kind == target.kind:
        return None
    return (
        f"the object is a {str(kind)[:63]} {str(api_version)[:127]}, the watch covers "
        f"{target.kind} {_api_version(target)}"
    )


def stamp_items(doc: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The items of a list answer, each with its ``apiVersion`` and ``kind``: a built-in
    type's list leaves them out of its items, and says them once (``ConfigMapList`` of
    ``v1``); an item that names its own keeps it."""
    api_version, list_kind = doc.get("apiVersion"), doc.get("kind")
    kind = list_kind[:-4] if isinstance(list_kind, str) and list_kind.endswith("List") else None
    items = [i for i in doc.get("items") or () if isinstance(i, dict)]
    if isinstance(api_version, str) and kind:
        for item in items:
            if "kind" not in item and "apiVersion" not in item:
                item["apiVersion"], item["kind"] = api_version, kind
    return items


def kept_annotations(mode: str, annotations: object) -> dict[str, Any]:
    """The annotations a Watch in ``mode`` sends: all in ``full``, else ``KEPT_ANNOTATIONS``."""
    if not isinstance(annotations, Mapping):
        return {}
    return {
        str(k): v
        for k, v in annotations.items()
        if mode == "full" or (k in KEPT_ANNOTATIONS and k != LAST_APPLIED)
    }


def annotation_left_out(mode: str, annotations: object) -> str | None:
    """The first annotation (by name, cut to 253 characters) a record carries that a Watch
    in ``mode`` leaves out, or None (the listener's check; never the annotation's value)."""
    if not isinstance(annotations, Mapping) or mode == "full":
        return None
    extra = sorted(str(k) for k in annotations if k not in KEPT_ANNOTATIONS or k == LAST_APPLIED)
    return extra[0][:253] if extra else None


def cel_rule() -> str:
    """``BUILTIN`` as the Watch CRD's CEL rule on ``spec.resource`` (the CRD holds exactly
    this text): in a built-in group, ``group/resource=kind`` must be one of the table's."""
    group = "(has(self.group) ? self.group : '')"
    groups = ", ".join(f"'{g}'" for g in sorted(BUILTIN))
    pairs = ", ".join(
        f"'{g}/{p}={k}'" for g, t in sorted(BUILTIN.items()) for p, k in sorted(t.items())
    )
    return (
        f"!({group} in [{groups}]) || "
        f"({group} + '/' + self.resource + '=' + self.kind) in [{pairs}]"
    )


def _api_version(target: Target) -> str:
    return f"{target.group}/{target.version}" if target.group else target.version
