"""Which ConfigMaps Tether watches: the pure filter shared by the webhook and the poller.

Two rules, both configurable, with safe defaults:

* ignored namespaces (default ``kube-system`` and Tether's own ``tether-system``);
* an optional Kubernetes label selector, e.g. an opt-in ``tether.kyma-project.io/watch=true``
  or an opt-out ``tether.kyma-project.io/ignore!=true`` (``!=`` also admits objects without
  the label). Equality (``=``, ``==``, ``!=``), set (``in``, ``notin``) and existence
  (``key``, ``!key``) requirements are supported, comma-separated (all must hold), with the
  same meaning as in the Kubernetes API, so the poller can pass ``selector_text`` to a list
  call unchanged.

Nothing here does I/O; decisions return a reason (a short constant, fit for a metric label).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from typing import Any, Literal, NamedTuple

from tether.base import config

DEFAULT_IGNORED_NAMESPACES = ("kube-system", "tether-system")
ENV_IGNORED_NAMESPACES = "TETHER_IGNORED_NAMESPACES"
ENV_LABEL_SELECTOR = "TETHER_LABEL_SELECTOR"

Operator = Literal["=", "!=", "in", "notin", "exists", "!"]
Reason = Literal["ignored-namespace", "label-selector"]

_KEY = re.compile(
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
    r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$"
)
_VALUE = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?$")
_SET = re.compile(r"^\s*(\S+)\s+(in|notin)\s*\(([^()]*)\)\s*$")


class SelectorError(ValueError):
    """A label selector could not be parsed; the message says where."""


class Requirement(NamedTuple):
    key: str
    operator: Operator
    values: frozenset[str]


def _split_top_level(text: str) -> list[str]:
    """Split on commas that are not inside parentheses."""
    parts: list[str] = []
    cur: list[str] = []
    depth = 0
    for ch in text:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
            if depth < 0:
                raise SelectorError(f"unbalanced ')' in selector {text!r}")
        if ch == "," and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    if depth != 0:
        raise SelectorError(f"unbalanced '(' in selector {text!r}")
    parts.append("".join(cur))
    return parts


def _check_key(key: str, term: str) -> str:
    if not _KEY.match(key) or len(key) > 317:
        raise SelectorError(f"invalid label key {key!r} in {term.strip()!r}")
    return key


def _check_value(value: str, term: str) -> str:
    if not _VALUE.match(value):
        raise SelectorError(f"invalid label value {value!r} in {term.strip()!r}")
    return value


def _parse_term(term: str) -> Requirement:
    stripped = term.strip()
    if not stripped:
        raise SelectorError("empty requirement in selector")
    m = _SET.match(stripped)
    if m:
        key, op, raw = m.group(1), m.group(2), m.group(3)
        values = frozenset(_check_value(v.strip(), term) for v in raw.split(","))
        return Requirement(_check_key(key, term), "in" if op == "in" else "notin", values)
    for token, op in (("!=", "!="), ("==", "="), ("=", "=")):
        if token in stripped:
            key, value = stripped.split(token, 1)
            val = _check_value(value.strip(), term)
            return Requirement(_check_key(key.strip(), term), op, frozenset([val]))  # type: ignore[arg-type]
    if stripped.startswith("!"):
        return Requirement(_check_key(stripped[1:].strip(), term), "!", frozenset())
    return Requirement(_check_key(stripped, term), "exists", frozenset())


def parse_selector(text: str) -> tuple[Requirement, ...]:
    """Parse a label selector; raises ``SelectorError``. An empty text selects everything."""
    if not text.strip():
        return ()
    return tuple(_parse_term(t) for t in _split_top_level(text))


def requirement_matches(req: Requirement, labels: Mapping[str, str]) -> bool:
    present = req.key in labels
    if req.operator == "exists":
        return present
    if req.operator == "!":
        return not present
    if req.operator in ("=", "in"):
        return present and labels[req.key] in req.values
    # "!=" and "notin": also true when the label is absent (Kubernetes semantics)
    return not present or labels[req.key] not in req.values


def selector_matches(selector: tuple[Requirement, ...], labels: Mapping[str, str] | None) -> bool:
    got = labels or {}
    return all(requirement_matches(r, got) for r in selector)


@dataclasses.dataclass(frozen=True)
class ConfigMapFilter:
    """What to watch. ``selector_text`` is kept for list calls (poller)."""

    ignored_namespaces: frozenset[str] = frozenset(DEFAULT_IGNORED_NAMESPACES)
    selector_text: str = ""
    selector: tuple[Requirement, ...] = ()

    @classmethod
    def build(
        cls,
        ignored_namespaces: tuple[str, ...] | frozenset[str] = DEFAULT_IGNORED_NAMESPACES,
        selector_text: str = "",
    ) -> ConfigMapFilter:
        return cls(
            frozenset(ignored_namespaces), selector_text.strip(), parse_selector(selector_text)
        )


def rejection(
    flt: ConfigMapFilter, namespace: str, *labels: Mapping[str, str] | None
) -> Reason | None:
    """Why a ConfigMap is not watched, or None when it is.

    Several label sets (e.g. the old and new object of an UPDATE) admit the object when
    any of them matches: an object leaving the selection is reported once more."""
    if namespace in flt.ignored_namespaces:
        return "ignored-namespace"
    if flt.selector and not any(selector_matches(flt.selector, ls) for ls in (labels or (None,))):
        return "label-selector"
    return None


def watched(flt: ConfigMapFilter, namespace: str, *labels: Mapping[str, str] | None) -> bool:
    return rejection(flt, namespace, *labels) is None


def _namespaces(name: str, raw: str) -> tuple[str, ...]:
    return () if raw == "-" else tuple(x.strip() for x in raw.split(",") if x.strip())


def _selector(name: str, raw: str) -> str:
    try:
        parse_selector(raw)
    except SelectorError as e:
        raise config.SettingError(f"{name}: {e}") from None
    return raw


OPTIONS = (
    config.custom(
        ENV_IGNORED_NAMESPACES,
        DEFAULT_IGNORED_NAMESPACES,
        "namespaces whose ConfigMaps are never watched, comma-separated ('-': none)",
        _namespaces,
        flag="--ignored-namespaces",
    ),
    config.custom(
        ENV_LABEL_SELECTOR,
        "",
        "label selector a watched ConfigMap matches (Kubernetes syntax; empty: all)",
        _selector,
        flag="--label-selector",
    ),
)


def from_values(v: Mapping[str, Any]) -> ConfigMapFilter:
    """The filter from the values of ``OPTIONS``."""
    return ConfigMapFilter.build(v[ENV_IGNORED_NAMESPACES], v[ENV_LABEL_SELECTOR])


def from_env(env: Mapping[str, str] | None = None) -> ConfigMapFilter:
    """``TETHER_IGNORED_NAMESPACES`` (comma-separated; ``-`` for none) and
    ``TETHER_LABEL_SELECTOR``; a bad selector raises ``SettingError`` naming the variable."""
    return from_values(config.Spec("filter", "", OPTIONS).read(env))
