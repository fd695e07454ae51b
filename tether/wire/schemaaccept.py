"""A compiled acceptance check of a shared JSON Schema (pure): the hot path's verdict.

``acceptor`` turns a schema into a predicate that is True only for instances the schema's
bounded validator (``tether.wire.schemacheck.make``) accepts, in a few microseconds instead of
~100; what it refuses is validated again with the validator, for the verdict and the
messages. Patterns are the ECMA-262 ones of ``tether.wire.schemacheck``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from typing import Any

from tether.wire.schemacheck import check_patterns, ecma_regex

_ANNOTATIONS = frozenset(
    {"$schema", "$id", "$defs", "$comment", "title", "description", "examples", "default"}
)
_COMPILED = (
    frozenset(
        {
            "type",
            "const",
            "enum",
            "minLength",
            "maxLength",
            "pattern",
            "format",
            "minimum",
            "maximum",
            "required",
            "properties",
            "additionalProperties",
            "propertyNames",
            "maxProperties",
            "minItems",
            "maxItems",
            "items",
            "$ref",
            "if",
            "then",
        }
    )
    | _ANNOTATIONS
)
Check = Callable[[Any], bool]


def _same(a: object, b: object) -> bool:
    """JSON equality as jsonschema's ``const`` and ``enum`` see it for the scalars compiled
    here (a boolean is never equal to a number)."""
    return type(a) is type(b) and a == b


def _of_kinds(kinds: list[str], value: object) -> bool:
    return any(_is(k, value) for k in kinds)


def _one_of(options: list[object], value: object) -> bool:
    return any(_same(value, o) for o in options)


def _implies(condition: Check, then: Check, value: object) -> bool:
    return not condition(value) or then(value)


def _is(kind: str, value: object) -> bool:
    if kind == "string":
        return isinstance(value, str)
    if kind == "object":
        return isinstance(value, dict)
    if kind == "array":
        return isinstance(value, list)
    if kind == "boolean":
        return isinstance(value, bool)
    if kind == "integer":  # stricter than the standard (1.0 is refused here): safe, see below
        return isinstance(value, int) and not isinstance(value, bool)
    if kind == "number":
        return isinstance(value, int | float) and not isinstance(value, bool)
    if kind == "null":
        return value is None
    raise ValueError(f"type {kind!r} is not compiled")


def acceptor(schema: Mapping[str, Any], date_time: Callable[[str], object]) -> Check:
    """A predicate compiled from ``schema`` (a document whose ``$ref``s point into its own
    ``$defs``) that is True only for instances the schema's validator (``make``) accepts;
    it may refuse some that the validator accepts (an integer written as ``1.0``), so a
    caller validates what it refuses with the validator, for the verdict and the messages.
    For the hot path: a valid record costs a few microseconds here, ~100 with jsonschema.
    Raises ``ValueError`` for a keyword it does not compile (the caller then always uses
    the validator)."""
    check_patterns(schema)
    root = schema
    cache: dict[str, Check] = {}

    def resolve(ref: str) -> Check:
        if not ref.startswith("#/$defs/") or "/" in ref[len("#/$defs/") :]:
            raise ValueError(f"$ref {ref!r} is not compiled")
        name = ref[len("#/$defs/") :]
        if name not in cache:
            cache[name] = build(root["$defs"][name])
        return cache[name]

    def build(node: Mapping[str, Any]) -> Check:
        unknown = set(node) - _COMPILED
        if unknown or ("then" in node) != ("if" in node):
            raise ValueError(f"keywords not compiled: {sorted(unknown) or ['if/then']}")
        checks: list[Check] = []
        if "$ref" in node:
            checks.append(resolve(node["$ref"]))
        if "type" in node:
            kinds = [node["type"]] if isinstance(node["type"], str) else list(node["type"])
            for k in kinds:
                _is(k, None)  # refuses a type it does not know
            checks.append(functools.partial(_of_kinds, kinds))
        if "const" in node:
            c = node["const"]
            if isinstance(c, dict | list):
                raise ValueError("const of an object or array is not compiled")
            checks.append(functools.partial(_one_of, [c]))
        if "enum" in node:
            options = list(node["enum"])
            if any(isinstance(o, dict | list) for o in options):
                raise ValueError("enum of objects or arrays is not compiled")
            checks.append(functools.partial(_one_of, options))
        checks.extend(_string_checks(node, date_time))
        checks.extend(_number_checks(node))
        checks.extend(_object_checks(node, build))
        checks.extend(_array_checks(node, build))
        if "if" in node:
            checks.append(
                functools.partial(_implies, _exact_condition(node["if"]), build(node["then"]))
            )
        return lambda v: all(c(v) for c in checks)

    return build(schema)


def _string_checks(node: Mapping[str, Any], date_time: Callable[[str], object]) -> list[Check]:
    out: list[Check] = []
    low, high = node.get("minLength"), node.get("maxLength")
    if low is not None or high is not None:
        lo, hi = int(low or 0), int(high if high is not None else 1 << 62)
        out.append(lambda v: not isinstance(v, str) or lo <= len(v) <= hi)
    if "pattern" in node:
        regex = ecma_regex(node["pattern"])
        out.append(lambda v: not isinstance(v, str) or regex.search(v) is not None)
    if "format" in node:
        if node["format"] != "date-time":
            raise ValueError(f"format {node['format']!r} is not compiled")
        out.append(lambda v: not isinstance(v, str) or date_time(v) is not None)
    return out


def _number_checks(node: Mapping[str, Any]) -> list[Check]:
    out: list[Check] = []

    def numeric(v: object) -> bool:
        return isinstance(v, int | float) and not isinstance(v, bool)

    if "minimum" in node:
        low = node["minimum"]
        out.append(lambda v: not numeric(v) or v >= low)
    if "maximum" in node:
        high = node["maximum"]
        out.append(lambda v: not numeric(v) or v <= high)
    return out


def _object_checks(
    node: Mapping[str, Any], build: Callable[[Mapping[str, Any]], Check]
) -> list[Check]:
    out: list[Check] = []
    if "required" in node:
        required = list(node["required"])
        out.append(lambda v: not isinstance(v, dict) or all(k in v for k in required))
    if "maxProperties" in node:
        most = int(node["maxProperties"])
        out.append(lambda v: not isinstance(v, dict) or len(v) <= most)
    props = {k: build(s) for k, s in (node.get("properties") or {}).items()}
    if props:
        out.append(
            lambda v: not isinstance(v, dict) or all(c(v[k]) for k, c in props.items() if k in v)
        )
    if "propertyNames" in node:
        name_ok = build(node["propertyNames"])
        out.append(lambda v: not isinstance(v, dict) or all(name_ok(k) for k in v))
    if "additionalProperties" in node:
        extra = node["additionalProperties"]
        if extra is False:
            out.append(lambda v: not isinstance(v, dict) or all(k in props for k in v))
        elif isinstance(extra, dict):
            extra_ok = build(extra)
            out.append(
                lambda v: (
                    not isinstance(v, dict)
                    or all(extra_ok(x) for k, x in v.items() if k not in props)
                )
            )
        elif extra is not True:
            raise ValueError("additionalProperties must be a schema or a boolean")
    return out


def _array_checks(
    node: Mapping[str, Any], build: Callable[[Mapping[str, Any]], Check]
) -> list[Check]:
    out: list[Check] = []
    if "minItems" in node or "maxItems" in node:
        lo, hi = int(node.get("minItems", 0)), int(node.get("maxItems", 1 << 62))
        out.append(lambda v: not isinstance(v, list) or lo <= len(v) <= hi)
    if "items" in node:
        if not isinstance(node["items"], dict):
            raise ValueError("items must be a schema")
        item_ok = build(node["items"])
        out.append(lambda v: not isinstance(v, list) or all(item_ok(x) for x in v))
    return out


def _exact_condition(node: Mapping[str, Any]) -> Check:
    """An ``if`` schema, compiled exactly (a condition judged too strictly would skip its
    ``then``): only ``properties`` whose schemas are a scalar ``const``."""
    props = node.get("properties")
    if (
        set(node) != {"properties"}
        or not isinstance(props, dict)
        or not all(
            isinstance(s, dict) and set(s) == {"const"} and not isinstance(s["const"], dict | list)
            for s in props.values()
        )
    ):
        raise ValueError("only an 'if' of properties with a const each is compiled")
    wanted = {k: s["const"] for k, s in props.items()}
    return lambda v: (
        not isinstance(v, dict) or all(_same(v[k], c) for k, c in wanted.items() if k in v)
    )
