"""Validation against the shared JSON Schemas, the ECMA-262 way and at bounded cost (pure).

The schema documents are written for every JSON Schema and OpenAPI consumer, so their
``pattern`` keywords are ECMA-262 regular expressions. Python's ``re`` differs where it
matters here: ``$`` also matches before a trailing newline (``re.search("^a$", "a\\n")``
matches), so a name ending in a newline would pass; ``\\d``, ``\\w`` and ``\\s`` take in
Unicode digits, letters and spaces. The validator built here therefore replaces the
``pattern`` keyword: a pattern is translated once (an unescaped ``$`` outside a character
class becomes ``\\Z``, the end of the string) and the constructs whose meaning differs
between the two dialects (``.``, ``\\d``, ``\\w``, ``\\s``, ``\\b``, their negations) are
refused when the schema is loaded, so the schemas spell their sets out in ASCII ranges.
Translating at the keyword (rather than rewriting the documents to Python's ``\\Z``, which
ECMA-262 does not know) keeps the documents correct for OpenAPI consumers and keeps one
text of each pattern.

Cost: a hostile body must not make validation walk or quote all of it (a 3 MiB batch of
empty objects once produced millions of errors and 23 GB). So:

* errors are drawn lazily and the walk stops after ``limit`` of them;
* an instance over a size cap (``maxItems``, ``maxProperties``, ``maxLength``) is reported
  once and not descended into (its items, keys and pattern are not checked);
* messages never quote an instance at length (``brief``), paths are cut.
"""

from __future__ import annotations

import functools
import itertools
import re
from collections.abc import Callable, Iterable, Iterator, Mapping, Sized
from typing import Any, NamedTuple

import jsonschema
from jsonschema import Draft202012Validator, ValidationError, validators
from jsonschema.protocols import Validator

MAX_MESSAGE = 200
MAX_PATH = 200
_DIFFERENT = set("dDwWsSbB")  # escapes whose ECMA-262 and Python meanings differ


class Violation(NamedTuple):
    """One failure: a JSON path into the document and the reason."""

    path: str
    message: str


def ecma_regex(pattern: str) -> re.Pattern[str]:
    """``pattern`` (ECMA-262) as a Python regex with the same matches; raises
    ``ValueError`` for a construct whose meaning differs between the two dialects."""
    return _compiled(pattern)


@functools.cache
def _compiled(pattern: str) -> re.Pattern[str]:
    out: list[str] = []
    in_class = escaped = False
    for ch in pattern:
        if escaped:
            if ch in _DIFFERENT:
                raise ValueError(
                    f"pattern {pattern!r}: \\{ch} differs between ECMA-262 and "
                    "Python; spell the set out"
                )
            out.append("\\" + ch)
            escaped = False
        elif ch == "\\":
            escaped = True
        elif in_class:
            in_class = ch != "]"
            out.append(ch)
        elif ch == "[":
            in_class = True
            out.append(ch)
        elif ch == "$":
            out.append(r"\Z")
        elif ch == ".":
            raise ValueError(
                f"pattern {pattern!r}: '.' differs between ECMA-262 and Python "
                "(line terminators); spell the set out"
            )
        else:
            out.append(ch)
    if "(?<" in pattern or "[]" in pattern or "[^]" in pattern:
        raise ValueError(
            f"pattern {pattern!r}: named groups, lookbehind and empty classes "
            "differ between ECMA-262 and Python"
        )
    return re.compile("".join(out))


def brief(instance: object) -> str:
    """A short description of a value for a message: never its whole text."""
    if isinstance(instance, str):
        if len(instance) <= 40:
            return repr(instance)
        return f"{instance[:32]!r}... ({len(instance)} characters)"
    if isinstance(instance, dict):
        return f"an object of {len(instance)} properties"
    if isinstance(instance, list):
        return f"an array of {len(instance)} items"
    text = repr(instance)
    return text if len(text) <= 40 else text[:37] + "..."


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


# -- keywords: the standard ones, bounded --------------------------------------------------


def _pattern(
    v: Any, pattern: str, instance: Any, schema: Mapping[str, Any]
) -> Iterator[ValidationError]:
    if not isinstance(instance, str) or len(instance) > schema.get("maxLength", len(instance)):
        return  # too long: maxLength says so, the regex is not run on it
    if ecma_regex(pattern).search(instance) is None:
        yield ValidationError(f"{brief(instance)} does not match {pattern!r}")


def _max_length(
    v: Any, limit: int, instance: Any, schema: Mapping[str, Any]
) -> Iterator[ValidationError]:
    if isinstance(instance, str) and len(instance) > limit:
        yield ValidationError(f"{brief(instance)} is longer than {limit} characters")


def _type(
    v: Any, types: Any, instance: Any, schema: Mapping[str, Any]
) -> Iterator[ValidationError]:
    names = [types] if isinstance(types, str) else list(types)
    if not any(v.is_type(instance, t) for t in names):
        yield ValidationError(f"{brief(instance)} is not of type {', '.join(map(repr, names))}")


def _enum(
    v: Any, enums: list[Any], instance: Any, schema: Mapping[str, Any]
) -> Iterator[ValidationError]:
    if not any(type(instance) is type(e) and instance == e for e in enums):
        yield ValidationError(f"{brief(instance)} is not one of {enums!r}")


def _max_count(
    kind: type[Sized],
) -> Callable[[Any, int, Any, Mapping[str, Any]], Iterator[ValidationError]]:
    """``maxItems`` (kind list) and ``maxProperties`` (kind dict)."""

    def check(
        v: Any, limit: int, instance: Any, schema: Mapping[str, Any]
    ) -> Iterator[ValidationError]:
        if isinstance(instance, kind) and len(instance) > limit:
            yield ValidationError(f"{brief(instance)}: at most {limit} are allowed")

    return check


def _oversized(instance: Any, schema: Mapping[str, Any]) -> bool:
    if isinstance(instance, dict):
        return len(instance) > int(schema.get("maxProperties", len(instance)))
    if isinstance(instance, list):
        return len(instance) > int(schema.get("maxItems", len(instance)))
    return False


def _unless_oversized(
    keyword: Callable[..., Iterator[ValidationError]],
) -> Callable[..., Iterator[ValidationError]]:
    def check(
        v: Any, value: Any, instance: Any, schema: Mapping[str, Any]
    ) -> Iterator[ValidationError]:
        if not _oversized(instance, schema):
            yield from keyword(v, value, instance, schema)

    return check


def _additional(
    v: Any, additional: Any, instance: Any, schema: Mapping[str, Any]
) -> Iterator[ValidationError]:
    if not isinstance(instance, dict) or _oversized(instance, schema):
        return
    known = schema.get("properties", {})
    if isinstance(additional, dict):
        for key, value in instance.items():
            if key not in known:
                yield from v.descend(value, additional, path=key)
    elif additional is False:
        extras = (k for k in instance if k not in known)
        first = list(itertools.islice(extras, 5))
        if first:
            more = sum(1 for _ in extras)
            named = ", ".join(brief(k) for k in first) + (f" and {more} more" if more else "")
            yield ValidationError(f"unknown properties: {named}")


def _format_checker(date_time: Callable[[str], object]) -> jsonschema.FormatChecker:
    checker = jsonschema.FormatChecker(formats=())
    checker.checks("date-time")(
        lambda value: not isinstance(value, str) or date_time(value) is not None
    )
    return checker


def _format(
    v: Any, fmt: str, instance: Any, schema: Mapping[str, Any]
) -> Iterator[ValidationError]:
    if not isinstance(instance, str) or len(instance) > schema.get("maxLength", len(instance)):
        return
    if "pattern" in schema and ecma_regex(schema["pattern"]).search(instance) is None:
        return  # one violation is enough: the pattern's
    checker = v.format_checker
    if checker is not None and not checker.conforms(instance, fmt):
        yield ValidationError(f"{brief(instance)} is not a valid {fmt}")


_KEYWORDS: dict[str, Callable[..., Iterator[ValidationError]]] = {
    "pattern": _pattern,
    "maxLength": _max_length,
    "type": _type,
    "enum": _enum,
    "maxItems": _max_count(list),
    "maxProperties": _max_count(dict),
    "additionalProperties": _additional,
    "format": _format,
    "items": _unless_oversized(Draft202012Validator.VALIDATORS["items"]),
    "propertyNames": _unless_oversized(Draft202012Validator.VALIDATORS["propertyNames"]),
}

BoundedValidator = validators.extend(  # type: ignore[no-untyped-call]
    Draft202012Validator, _KEYWORDS
)


def check_patterns(schema: object) -> None:
    """Compile every ``pattern`` of a schema document (raises ``ValueError`` early)."""
    stack = [schema]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            if isinstance(node.get("pattern"), str):
                ecma_regex(node["pattern"])
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)


def make(schema: Mapping[str, Any], registry: Any, date_time: Callable[[str], object]) -> Validator:
    """A validator with ECMA-262 patterns, bounded keywords and ``date-time`` checked by
    ``date_time`` (None for a text that is not one)."""
    check_patterns(schema)
    validator: Validator = BoundedValidator(
        schema, registry=registry, format_checker=_format_checker(date_time)
    )
    return validator


def string_check(
    schema: Mapping[str, Any], date_time: Callable[[str], object]
) -> Callable[[object], bool]:
    """A fast predicate equal to validating a string against ``schema`` (only ``type:
    string``, ``minLength``, ``maxLength``, ``pattern`` and ``format: date-time``; anything
    else is refused here): for checks on every comparison, where a full validator costs
    tens of microseconds."""
    known = {"type", "minLength", "maxLength", "pattern", "format", "description"}
    if (
        schema.get("type") != "string"
        or set(schema) - known
        or schema.get("format", "date-time") != "date-time"
    ):
        raise ValueError(f"not a plain string schema: {sorted(schema)}")
    low, high = int(schema.get("minLength", 0)), int(schema.get("maxLength", 1 << 62))
    regex = ecma_regex(schema["pattern"]) if "pattern" in schema else None
    timed = "format" in schema

    def check(value: object) -> bool:
        return (
            isinstance(value, str)
            and low <= len(value) <= high
            and (regex is None or regex.search(value) is not None)
            and (not timed or date_time(value) is not None)
        )

    return check


def violations(
    validator: Validator, doc: object, limit: int = 20, prefix: str = "$"
) -> list[Violation]:
    """The first ``limit`` violations of ``doc``, ordered by path; paths start with
    ``prefix`` (e.g. ``$.items[3]`` for one item of a batch)."""
    instance: Any = doc
    errors = list(itertools.islice(validator.iter_errors(instance), limit))
    errors.sort(
        key=lambda e: [str(p) if isinstance(p, str) else f"{p:09d}" for p in e.absolute_path]
    )
    return [Violation(_path(prefix, e.absolute_path), _cut(e.message, MAX_MESSAGE)) for e in errors]


_PLAIN_KEY = re.compile(r"[A-Za-z0-9_]+")


def _path(prefix: str, parts: Iterable[str | int]) -> str:
    """A JSON path like jsonschema's ``json_path``, each key cut before it is quoted (a key
    may be a megabyte long), the whole at most ``MAX_PATH`` characters."""
    out = prefix
    for p in parts:
        if isinstance(p, int):
            out += f"[{p}]"
        elif _PLAIN_KEY.fullmatch(p[:60]) and len(p) <= 60:
            out += "." + p
        else:
            out += "[" + repr(_cut(p, 40)) + "]"
        if len(out) > MAX_PATH:
            break
    return _cut(out, MAX_PATH)
