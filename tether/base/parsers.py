"""Parsers of one setting's raw value: ``(variable, raw) -> value``, raising ``SettingError``
with the line ``VARIABLE: problem`` that the settings layer (``tether.base.config``) prints.

Numbers are plain ASCII: int()/float() would take '٣', 'inf' and '1_000'.
"""

from __future__ import annotations

import os
import re
import urllib.parse
from collections.abc import Callable, Mapping, Sequence
from typing import TypeVar

LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")
LOG_FORMATS = ("json", "text")
_RUNTIME_ID = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?")
_DNS_NAME = re.compile(r"[a-z0-9]([-a-z0-9.]*[a-z0-9])?")

_INTEGER = re.compile(r"-?[0-9]{1,18}")
_NUMBER = re.compile(r"-?[0-9]{1,18}(\.[0-9]{1,18})?")

N = TypeVar("N", int, float)


class SettingError(ValueError):
    """A setting is missing or invalid: ``VARIABLE: problem``."""


def lookup(env: Mapping[str, str] | None, name: str) -> str | None:
    """The variable's value stripped, ``None`` when unset or blank (``env`` default
    ``os.environ``)."""
    value = (os.environ if env is None else env).get(name)
    return None if value is None or value.strip() == "" else value.strip()


def string(name: str, default: str | None = None, *, env: Mapping[str, str] | None = None) -> str:
    value = lookup(env, name)
    if value is None:
        if default is None:
            raise SettingError(f"{name}: not set (required)")
        return default
    return value


def fmt(x: float) -> str:
    """A number as an operator writes it: 10000000, 0.5 (never 1e+07)."""
    return str(int(x)) if float(x).is_integer() else repr(float(x))


def span(minimum: float | None, maximum: float | None) -> str:
    """Bounds as ``--help`` shows them: ``1..64``, ``0..``, ``..10``; empty without any."""
    if minimum is None and maximum is None:
        return ""
    lo = "" if minimum is None else fmt(minimum)
    hi = "" if maximum is None else fmt(maximum)
    return f"{lo}..{hi}"


def _bounds(name: str, value: float, minimum: float | None, maximum: float | None) -> None:
    if minimum is not None and value < minimum:
        raise SettingError(f"{name}: {fmt(value)} is below the minimum {fmt(minimum)}")
    if maximum is not None and value > maximum:
        raise SettingError(f"{name}: {fmt(value)} is above the maximum {fmt(maximum)}")


def _numeric(
    name: str,
    raw: str,
    pattern: re.Pattern[str],
    kind: str,
    convert: Callable[[str], N],
    minimum: float | None,
    maximum: float | None,
) -> N:
    if pattern.fullmatch(raw) is None:  # int()/float() would take '٣', 'inf' and '1_000'
        raise SettingError(f"{name}: {raw!r} is not {kind}")
    value = convert(raw)
    _bounds(name, value, minimum, maximum)
    return value


def integer(name: str, raw: str, minimum: float | None, maximum: float | None) -> int:
    return _numeric(name, raw, _INTEGER, "an integer", int, minimum, maximum)


def number(name: str, raw: str, minimum: float | None, maximum: float | None) -> float:
    return _numeric(name, raw, _NUMBER, "a number", float, minimum, maximum)


def boolean(name: str, raw: str) -> bool:
    low = raw.lower()
    if low in ("1", "true", "yes", "on"):
        return True
    if low in ("0", "false", "no", "off"):
        return False
    raise SettingError(f"{name}: {raw!r} is not a boolean (true/false)")


def names(raw: str) -> tuple[str, ...]:
    return tuple(x.strip() for x in raw.split(",") if x.strip())


def https_url(name: str, raw: str) -> str:
    parsed = urllib.parse.urlsplit(raw)
    try:
        parsed.port  # noqa: B018 - raises on a port that is no number
    except ValueError:
        raise SettingError(f"{name}: {raw!r} has a bad port") from None
    if parsed.scheme != "https" or not parsed.hostname:
        raise SettingError(f"{name}: {raw!r} must be an https:// URL with a host")
    return raw.rstrip("/")


def log_level(name: str, raw: str) -> str:
    level = raw.upper()
    if level not in LOG_LEVELS:
        raise SettingError(f"{name}: {raw!r} is not DEBUG, INFO, WARNING or ERROR")
    return level


def choice(choices: Sequence[str]) -> Callable[[str, str], str]:
    def parse(name: str, raw: str) -> str:
        if raw.lower() not in choices:
            raise SettingError(f"{name}: {raw!r} is not {' or '.join(choices)}")
        return raw.lower()

    return parse


def runtime_id(name: str, raw: str) -> str:
    if len(raw) > 63 or not _RUNTIME_ID.fullmatch(raw):
        raise SettingError(
            f"{name}: {raw!r} is not a valid runtime ID "
            "(1-63 of [A-Za-z0-9-_.], alphanumeric at both ends)"
        )
    return raw


def object_name(name: str, raw: str) -> str:
    if len(raw) > 253 or not _DNS_NAME.fullmatch(raw):
        raise SettingError(f"{name}: {raw!r} is not a valid object name")
    return raw


def host_port(name: str, raw: str) -> str:
    host, sep, port = raw.rpartition(":")
    if not sep or not host or _INTEGER.fullmatch(port) is None or not 0 < int(port) < 65536:
        raise SettingError(f"{name}: {raw!r} is not HOST:PORT")
    return raw


def existing_file(name: str, raw: str) -> str:
    if not os.path.isfile(raw):
        raise SettingError(f"{name}: {raw} does not exist or is not a file")
    return raw
