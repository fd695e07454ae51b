"""Declarative watches: what a consumer asks to be copied from the runtimes (pure).

A ``Watch`` custom resource in the KCP (``tether.kyma-project.io/v1alpha1``, namespaced in
``TETHER_KCP_NAMESPACE``; CRD ``manifests/kcp/crds/tether.kyma-project.io_watches.yaml``)
names one resource of the runtimes (group, version, plural and kind; built-in kinds and
custom resources alike, namespaced only), the runtime namespaces and object labels it
covers, the runtimes it applies to (a selector over Kyma CR labels and/or a module enabled
in the Kyma CR) and what of each object is sent (``send.mode``):

* ``full``: labels, annotations and every value;
* ``metadata``: labels and annotations only, no value;
* ``keys``: only the values named in ``send.keys``;
* ``exclude``: every value but those named in ``send.keys``;
* ``digest``: for every value ``hmac-sha256:`` and the hex HMAC-SHA256 of its bytes under
  the runtime's own digest key (``tether.wire.digests``; unkeyed ``sha256:`` where the runtime has
  no key yet), never the value.

An object's *values* are a ConfigMap's ``data`` and ``binaryData`` (keys are disjoint in the
API), a Secret's ``data``, and for every other kind its top-level fields other than
``apiVersion``, ``kind`` and ``metadata`` (``spec``, ``status``, ...), each as canonical JSON
text. A Watch's kind must be its resource's and an object's its Watch's; Secrets (by resource
or kind) only in ``metadata`` or ``digest`` mode, never a value stored; every mode but
``full`` keeps only ``KEPT_ANNOTATIONS`` (all in ``tether.wire.watchkinds``). The namespaces
``kube-system``, ``kube-public``, ``kube-node-lease`` and ``tether-system`` and the ConfigMap
``kube-root-ca.crt`` (in every namespace) are never watched, whatever a Watch says.

This module is the one place these rules live: the enroller (``applies``; the runtime's
copy and webhooks in ``tether.wire.watchwire``), the webhook and the poller (``admits``,
``foreign``, ``reduce``) and the listener (``violation``) call it. Nothing here does I/O;
``WatchError`` messages name the field, for the Watch's status.
"""

from __future__ import annotations

import base64
import dataclasses
import functools
import json
import re
from collections.abc import Iterable, Mapping
from typing import Any, Literal

from tether.kube import apitypes
from tether.wire import digests, filters, watchkinds, watchuse

API_VERSION = f"{apitypes.WATCHES.group}/{apitypes.WATCHES.version}"
KIND = "Watch"
WATCH_LABEL = "tether.kyma-project.io/watch"  # on stored records: the Watch that admitted them

Mode = Literal["full", "metadata", "keys", "exclude", "digest"]
MODES: tuple[Mode, ...] = ("full", "metadata", "keys", "exclude", "digest")
SECRET_MODES: tuple[Mode, ...] = ("metadata", "digest")
ALWAYS_IGNORED_NAMESPACES = ("kube-system", "kube-public", "kube-node-lease", "tether-system")
NEVER_SENT = (("", "ConfigMap", "kube-root-ca.crt"),)  # (group, kind, name) in every namespace
KEPT_ANNOTATIONS = watchkinds.KEPT_ANNOTATIONS  # all a value-hiding mode keeps
OPERATIONS = ("CREATE", "UPDATE", "DELETE")
MAX_KEYS = 256
MAX_NAMESPACES = 256
MAX_WATCHES = 64  # in force in one runtime (the webhook registration holds one webhook each)

_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
_GROUP = re.compile(r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*)?$")
_KIND = re.compile(r"^[A-Z][A-Za-z0-9]{0,62}$")
_VERSION = re.compile(r"^v[0-9]+((alpha|beta)[0-9]+)?$")
# both shapes for one release: a runtime on the previous bundle, or without its key yet,
# still sends the unkeyed one (docs/watches.md, "What a digest does and does not hide")
_VALUE_KEY = re.compile(r"^[-._a-zA-Z0-9]{1,253}$")


class WatchError(ValueError):
    """A Watch cannot be used; the message names the field."""


@dataclasses.dataclass(frozen=True)
class Target:
    """The resource a Watch covers in the runtimes."""

    group: str
    version: str
    resource: str  # the plural, as in a webhook rule and the API path
    kind: str

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    def wire(self) -> dict[str, str]:
        return {
            "group": self.group,
            "version": self.version,
            "resource": self.resource,
            "kind": self.kind,
        }

    def gvk(self) -> dict[str, str]:
        """As a record carries it (``resource`` of a v2 record)."""
        return {"group": self.group, "version": self.version, "kind": self.kind}


CONFIGMAP = Target("", "v1", "configmaps", "ConfigMap")
SECRET = Target("", "v1", "secrets", "Secret")


@dataclasses.dataclass(frozen=True)
class Watch:
    name: str
    target: Target
    namespaces: tuple[str, ...] = ()  # empty: every namespace not ignored
    ignored_namespaces: tuple[str, ...] = ()  # besides ALWAYS_IGNORED_NAMESPACES
    selector_text: str = ""  # over the object's labels (Kubernetes syntax; list calls take it)
    runtime_selector_text: str = ""  # over the Kyma CR's labels
    module: str = ""  # a module that must be enabled in the Kyma CR
    mode: Mode = "full"
    keys: tuple[str, ...] = ()
    generation: int = 0
    storage_namespace: str = ""  # KCP namespace of its records ("": the listener's; watchuse)
    inject: watchuse.Inject | None = None  # the configuration injector's target (watchuse)
    # in the runtime only (tether.wire.watchset): the runtime's digest key; None: unkeyed digests
    digest_key: bytes | None = dataclasses.field(default=None, repr=False, compare=False)

    @functools.cached_property  # parsed once per Watch: admissions ask for every object
    def selector(self) -> tuple[filters.Requirement, ...]:
        return filters.parse_selector(self.selector_text)

    @functools.cached_property
    def runtime_selector(self) -> tuple[filters.Requirement, ...]:
        return filters.parse_selector(self.runtime_selector_text)


# --- the Watch custom resource -> Watch -----------------------------------------------------


def parse_all(objects: Iterable[Mapping[str, Any]]) -> tuple[tuple[Watch, ...], dict[str, str]]:
    """The Watch custom resources that can be used, in order, and why each other cannot
    (its name -> ``WatchError``'s message)."""
    valid: list[Watch] = []
    errors: dict[str, str] = {}
    for obj in objects:
        try:
            valid.append(parse(obj))
        except WatchError as e:
            meta = obj.get("metadata")
            errors[str(meta.get("name", "")) if isinstance(meta, Mapping) else ""] = str(e)
    return tuple(valid), errors


def selector_text(sel: object, field: str) -> str:
    """A Kubernetes ``LabelSelector`` (matchLabels, matchExpressions) as selector text."""
    if sel is None:
        return ""
    if not isinstance(sel, Mapping):
        raise WatchError(f"{field}: must be a label selector (matchLabels, matchExpressions)")
    terms: list[str] = []
    labels = sel.get("matchLabels") or {}
    if not isinstance(labels, Mapping):
        raise WatchError(f"{field}.matchLabels: must be a map")
    terms += [f"{k}={v}" for k, v in sorted(labels.items())]
    exprs = sel.get("matchExpressions") or []
    if not isinstance(exprs, list):
        raise WatchError(f"{field}.matchExpressions: must be a list")
    for i, e in enumerate(exprs):
        where = f"{field}.matchExpressions[{i}]"
        if not isinstance(e, Mapping) or not isinstance(e.get("key"), str):
            raise WatchError(f"{where}: needs a key and an operator")
        op, values = e.get("operator"), e.get("values") or []
        if op in ("In", "NotIn"):
            if not values or not all(isinstance(v, str) for v in values):
                raise WatchError(f"{where}: {op} needs values")
            terms.append(f"{e['key']} {op.lower()} ({','.join(values)})")
        elif op in ("Exists", "DoesNotExist"):
            if values:
                raise WatchError(f"{where}: {op} takes no values")
            terms.append(e["key"] if op == "Exists" else f"!{e['key']}")
        else:
            raise WatchError(f"{where}: operator must be In, NotIn, Exists or DoesNotExist")
    text = ",".join(terms)
    try:
        filters.parse_selector(text)
    except filters.SelectorError as err:
        raise WatchError(f"{field}: {err}") from None
    return text


def _names(value: object, field: str, limit: int, pattern: re.Pattern[str]) -> tuple[str, ...]:
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise WatchError(f"{field}: must be a list of names")
    if len(value) > limit:
        raise WatchError(f"{field}: at most {limit} entries")
    for v in value:
        if not pattern.match(v):
            raise WatchError(f"{field}: {v!r} is not a valid name")
    return tuple(dict.fromkeys(value))


def _target(spec: Mapping[str, Any]) -> Target:
    res = spec.get("resource")
    if not isinstance(res, Mapping):
        raise WatchError("spec.resource: required (group, version, resource, kind)")
    group, version = res.get("group", ""), res.get("version")
    plural, kind = res.get("resource"), res.get("kind")
    if not isinstance(group, str) or not _GROUP.match(group):
        raise WatchError("spec.resource.group: must be an API group ('' for the core group)")
    if not isinstance(version, str) or not _VERSION.match(version):
        raise WatchError("spec.resource.version: must be an API version such as v1 or v1beta2")
    if not isinstance(plural, str) or not _DNS_LABEL.match(plural):
        raise WatchError(
            "spec.resource.resource: must be the resource's plural name, e.g. configmaps"
        )
    if not isinstance(kind, str) or not _KIND.match(kind):
        raise WatchError("spec.resource.kind: must be the kind, e.g. ConfigMap")
    target = Target(group, version, plural, kind)
    problem = watchkinds.builtin_problem(target)
    if problem is not None:
        raise WatchError(problem)
    return target


def parse(obj: Mapping[str, Any]) -> Watch:
    """A ``Watch`` custom resource (a plain dict as served) as a ``Watch``; ``WatchError``
    when it cannot be used (the message goes to its status)."""
    meta = obj.get("metadata") or {}
    name = meta.get("name")
    if not isinstance(name, str) or not _DNS_LABEL.match(name):
        raise WatchError("metadata.name: must be a DNS label (at most 63 characters)")
    spec = obj.get("spec")
    if not isinstance(spec, Mapping):
        raise WatchError("spec: required")
    target = _target(spec)
    runtimes = spec.get("runtimes") or {}
    if not isinstance(runtimes, Mapping):
        raise WatchError("spec.runtimes: must be an object (selector, module)")
    module = runtimes.get("module") or ""
    if not isinstance(module, str) or (module and not _DNS_LABEL.match(module)):
        raise WatchError("spec.runtimes.module: must be a module name")
    send = spec.get("send") or {}
    if not isinstance(send, Mapping):
        raise WatchError("spec.send: must be an object (mode, keys)")
    secret = watchkinds.is_secret(target)
    mode = send.get("mode", "metadata" if secret else "full")
    if mode not in MODES:
        raise WatchError(f"spec.send.mode: must be one of {', '.join(MODES)}")
    if secret and mode not in SECRET_MODES:
        raise WatchError(
            "spec.send.mode: a Secret's values never leave the runtime: use metadata or digest"
        )
    keys = _names(send.get("keys"), "spec.send.keys", MAX_KEYS, _VALUE_KEY)
    if mode in ("keys", "exclude") and not keys:
        raise WatchError(f"spec.send.keys: mode {mode} needs at least one key")
    if mode not in ("keys", "exclude") and keys:
        raise WatchError(f"spec.send.keys: only for the modes keys and exclude, not {mode}")
    generation = meta.get("generation")
    try:
        storage = watchuse.storage_namespace(spec)
        inject = watchuse.inject_of(spec, configmaps=target == CONFIGMAP, mode=mode)
    except watchuse.UseError as e:
        raise WatchError(str(e)) from None
    return Watch(
        name=name,
        target=target,
        namespaces=_names(spec.get("namespaces"), "spec.namespaces", MAX_NAMESPACES, _DNS_LABEL),
        ignored_namespaces=_names(
            spec.get("ignoredNamespaces"), "spec.ignoredNamespaces", MAX_NAMESPACES, _DNS_LABEL
        ),
        selector_text=selector_text(spec.get("selector"), "spec.selector"),
        runtime_selector_text=selector_text(runtimes.get("selector"), "spec.runtimes.selector"),
        module=module,
        mode=mode,
        keys=keys,
        storage_namespace=storage,
        inject=inject,
        generation=generation if isinstance(generation, int) else 0,
    )


# --- which runtimes, which objects ----------------------------------------------------------


def modules_of(kyma: Mapping[str, Any]) -> frozenset[str]:
    """The modules enabled in a Kyma CR (``spec.modules[].name``)."""
    spec = kyma.get("spec") or {}
    mods = spec.get("modules") if isinstance(spec, Mapping) else None
    return frozenset(
        str(m["name"])
        for m in mods or []
        if isinstance(m, Mapping) and isinstance(m.get("name"), str)
    )


def applies(w: Watch, kyma_labels: Mapping[str, str] | None, modules: Iterable[str]) -> bool:
    """Whether ``w`` applies to the runtime of a Kyma CR with these labels and modules."""
    if w.module and w.module not in set(modules):
        return False
    return filters.selector_matches(w.runtime_selector, kyma_labels)


def in_force(watches: Iterable[Watch], kyma: Mapping[str, Any]) -> tuple[Watch, ...]:
    """The Watches that apply to the runtime of ``kyma`` (a Kyma CR as served), by name."""
    labels = (kyma.get("metadata") or {}).get("labels") or {}
    mods = modules_of(kyma)
    return tuple(sorted((w for w in watches if applies(w, labels, mods)), key=lambda w: w.name))


def in_force_capped(
    watches: Iterable[Watch], kyma: Mapping[str, Any]
) -> tuple[tuple[Watch, ...], tuple[str, ...]]:
    """``in_force``, at most ``MAX_WATCHES`` of them (by name), and the names of those left out
    over that bound (they are not installed in the runtime)."""
    ws = in_force(watches, kyma)
    return ws[:MAX_WATCHES], tuple(w.name for w in ws[MAX_WATCHES:])


def namespace_admitted(w: Watch, namespace: str) -> bool:
    if namespace in ALWAYS_IGNORED_NAMESPACES or namespace in w.ignored_namespaces:
        return False
    return not w.namespaces or namespace in w.namespaces


def never_sent(target: Target, name: str) -> bool:
    return (target.group, target.kind, name) in NEVER_SENT


def admits(w: Watch, namespace: str, name: str, *labels: Mapping[str, str] | None) -> bool:
    """Whether the object is covered by ``w`` (its kind is the caller's to check). Several
    label sets (the old and new object of an UPDATE) admit it when any matches."""
    if not namespace_admitted(w, namespace) or never_sent(w.target, name):
        return False
    sel = w.selector
    return not sel or any(filters.selector_matches(sel, ls) for ls in (labels or (None,)))


def covering(watches: Iterable[Watch], target: Target) -> tuple[Watch, ...]:
    """The Watches of one resource (group and kind; the version too)."""
    return tuple(w for w in watches if w.target == target)


# --- what is sent ---------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Content:
    """What of an object a record carries."""

    labels: dict[str, str]
    annotations: dict[str, str]
    data: dict[str, str]
    binary_data: dict[str, str]


def _values(target: Target, obj: Mapping[str, Any]) -> tuple[dict[str, str], dict[str, str]]:
    """The object's values as (text values, base64 values)."""
    if target.group == "" and target.kind == "ConfigMap":
        return dict(obj.get("data") or {}), dict(obj.get("binaryData") or {})
    if target.group == "" and target.kind == "Secret":
        return {}, dict(obj.get("data") or {})
    text = {
        k: json.dumps(v, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
        for k, v in obj.items()
        if k not in ("apiVersion", "kind", "metadata")
    }
    return text, {}


def _b64(value: str) -> bytes:
    try:
        return base64.b64decode(value, validate=True)
    except ValueError:
        return value.encode()


def foreign(w: Watch, obj: Mapping[str, Any]) -> str | None:
    """Why ``obj`` (as read from the runtime) is not of ``w``'s kind, or None: checked by
    the webhook and the poller before an object is reduced (``tether.wire.watchkinds``)."""
    return watchkinds.object_problem(w.target, obj)


def reduce(w: Watch, obj: Mapping[str, Any]) -> Content:
    """What of ``obj`` (as served by the runtime's API) ``w`` sends."""
    meta = obj.get("metadata") or {}
    annotations = watchkinds.kept_annotations(w.mode, meta.get("annotations"))
    text, binary = _values(w.target, obj)
    if w.mode == "metadata":
        text, binary = {}, {}
    elif w.mode == "keys":
        text = {k: v for k, v in text.items() if k in w.keys}
        binary = {k: v for k, v in binary.items() if k in w.keys}
    elif w.mode == "exclude":
        text = {k: v for k, v in text.items() if k not in w.keys}
        binary = {k: v for k, v in binary.items() if k not in w.keys}
    elif w.mode == "digest":
        key = w.digest_key
        text = {
            **{k: digests.of(v.encode(), key) for k, v in text.items()},
            **{k: digests.of(_b64(v), key) for k, v in binary.items()},
        }
        binary = {}
    return Content(dict(meta.get("labels") or {}), annotations, text, binary)


def gvk_of(record: Mapping[str, Any]) -> tuple[str, str, str]:
    """(group, version, kind) of the object a schema-valid record is of: a v2 record's
    ``resource``; a v1 record is of a ConfigMap."""
    res = record.get("resource")
    if isinstance(res, Mapping):
        return str(res.get("group", "")), str(res.get("version", "")), str(res.get("kind", ""))
    return CONFIGMAP.group, CONFIGMAP.version, CONFIGMAP.kind


def violation(w: Watch, record: Mapping[str, Any]) -> str | None:
    """Why ``w`` does not admit ``record`` (schema-valid, v1 or v2), or None.

    The KCP's own check: a record carries only what its Watch asks for, whatever the
    runtime sent. A tombstone is checked by its kind and namespace (it has no labels)."""
    group, version, kind = gvk_of(record)
    if (group, version, kind) != (w.target.group, w.target.version, w.target.kind):
        return (
            f"the watch {w.name} covers {w.target.kind} {w.target.api_version}, "
            f"not {kind} {group + '/' if group else ''}{version}"
        )
    target = w.target
    ns, name = str(record.get("namespace")), str(record.get("name"))
    if not namespace_admitted(w, ns):
        return f"the watch {w.name} does not cover the namespace {ns}"
    if never_sent(target, name):
        return f"{target.kind} {name} is never watched"
    if record.get("deleted") is True:
        return None
    sel = w.selector
    if sel and not filters.selector_matches(sel, record.get("labels")):
        return f"the object's labels do not match the selector of the watch {w.name}"
    data, binary = record.get("data") or {}, record.get("binaryData") or {}
    keys = set(data) | set(binary)
    if (extra := watchkinds.annotation_left_out(w.mode, record.get("annotations"))) is not None:
        return f"the watch {w.name} leaves out the annotation {extra} (docs/watches.md)"
    if w.mode == "metadata" and keys:
        return f"the watch {w.name} sends metadata only, the record carries values"
    if w.mode == "keys" and keys - set(w.keys):
        return f"the watch {w.name} sends only the keys {', '.join(w.keys)}"
    if w.mode == "exclude" and keys & set(w.keys):
        return f"the watch {w.name} leaves out the keys {', '.join(sorted(keys & set(w.keys)))}"
    if w.mode == "digest" and (binary or not digests.only(data)):
        return (
            f"the watch {w.name} sends digests only (hmac-sha256: or sha256: and 64 hex "
            "digits per value)"
        )
    if (watchkinds.is_secret(w.target) or watchkinds.is_secret_kind(group, kind)) and (
        binary or not digests.only(data)
    ):  # whatever the Watch's mode and kind
        return "a Secret's values never leave its runtime (only digests, or no value)"
    return None
