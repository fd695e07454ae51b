"""What the KCP side does with a Watch's records: where they are stored, and what the
configuration injector makes of them (pure).

Two optional fields of a Watch's ``spec`` (``tether.wire.watches.parse`` reads them through here):

* ``storage.namespace``: the KCP namespace the listener stores this Watch's records in
  (absent: the listener's own namespace, ``TETHER_KCP_NAMESPACE``, shared by every Watch
  without one). RBAC cannot select objects by label, so a namespace is the unit a Role can
  scope: a consumer bound to a Role in a Watch's storage namespace reads that Watch's
  records and no other's (docs/api.md, "Reading the records"). Set once, at the Watch's
  creation (the CRD refuses a change: records are never moved).
* ``inject``: the configuration injector's target. For each runtime the Watch is in force
  in, the values of its live records (a ConfigMap's ``data``, merged over the objects in
  (namespace, name) order, a later key winning) go to ``field`` of the runtime's component
  CR: the object of ``resource`` in ``namespace`` labelled
  ``kyma-project.io/runtime-id=<runtime ID>``. Only for Watches of ConfigMaps whose records
  hold values (modes ``full``, ``keys``, ``exclude``).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from typing import Any

from tether.kube import apitypes

_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
_GROUP = re.compile(r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*)?$")
_VERSION = re.compile(r"^v[0-9]+((alpha|beta)[0-9]+)?$")
_FIELD_SEGMENT = re.compile(r"^[a-zA-Z][a-zA-Z0-9]{0,62}$")
MAX_FIELD_DEPTH = 4
VALUE_MODES = ("full", "keys", "exclude")  # the modes whose records carry values


class UseError(ValueError):
    """The storage or inject field cannot be used; the message names the field."""


@dataclasses.dataclass(frozen=True)
class Inject:
    """Where the configuration injector writes a runtime's merged values."""

    resource: apitypes.Resource  # a namespaced kind of the KCP
    namespace: str
    field: tuple[str, ...]  # the path below the object's root, e.g. ("spec", "configuration")

    @property
    def field_text(self) -> str:
        return ".".join(self.field)


def storage_namespace(spec: Mapping[str, Any]) -> str:
    """``spec.storage.namespace``, or ``""`` (the listener's own namespace)."""
    storage = spec.get("storage")
    if storage is None:
        return ""
    if not isinstance(storage, Mapping):
        raise UseError("spec.storage: must be an object (namespace)")
    ns = storage.get("namespace", "")
    if not isinstance(ns, str) or (ns and not _DNS_LABEL.match(ns)):
        raise UseError("spec.storage.namespace: must be a namespace name")
    return ns


def inject_of(spec: Mapping[str, Any], *, configmaps: bool, mode: str) -> Inject | None:
    """``spec.inject`` as an ``Inject`` (None when absent). ``configmaps``: whether the Watch
    covers ConfigMaps; ``mode``: its send mode (the injector needs values)."""
    raw = spec.get("inject")
    if raw is None:
        return None
    if not isinstance(raw, Mapping):
        raise UseError("spec.inject: must be an object (resource, namespace, field)")
    if not configmaps or mode not in VALUE_MODES:
        raise UseError(
            "spec.inject: only for a Watch of ConfigMaps whose records hold values "
            f"(send.mode {', '.join(VALUE_MODES)})"
        )
    res = raw.get("resource")
    if not isinstance(res, Mapping):
        raise UseError("spec.inject.resource: required (group, version, resource)")
    group, version, plural = res.get("group", ""), res.get("version"), res.get("resource")
    if not isinstance(group, str) or not _GROUP.match(group):
        raise UseError("spec.inject.resource.group: must be an API group ('' for the core group)")
    if not isinstance(version, str) or not _VERSION.match(version):
        raise UseError("spec.inject.resource.version: must be an API version such as v1")
    if not isinstance(plural, str) or not _DNS_LABEL.match(plural):
        raise UseError("spec.inject.resource.resource: must be the resource's plural name")
    ns = raw.get("namespace")
    if not isinstance(ns, str) or not _DNS_LABEL.match(ns):
        raise UseError("spec.inject.namespace: must be the KCP namespace of the component CRs")
    path = raw.get("field")
    parts = tuple(path.split(".")) if isinstance(path, str) else ()
    if (
        not 2 <= len(parts) <= MAX_FIELD_DEPTH
        or parts[0] != "spec"
        or not all(_FIELD_SEGMENT.match(p) for p in parts)
    ):
        raise UseError(
            "spec.inject.field: must be a path below spec, such as spec.configuration "
            f"(at most {MAX_FIELD_DEPTH} names)"
        )
    return Inject(apitypes.watched(group, version, plural), ns, parts)
