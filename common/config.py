"""Reading settings from the environment with clear errors.

Each part has its own settings dataclass, built once in its entry point from flags and
environment variables through these helpers. A bad value raises ``SettingError`` naming
the variable and what is wrong, so the process stops at start with one clear line.
"""

from __future__ import annotations

import os
from collections.abc import Mapping


class SettingError(ValueError):
    """A setting is missing or invalid; the message names it."""


def _get(env: Mapping[str, str] | None, name: str) -> str | None:
    value = (os.environ if env is None else env).get(name)
    return None if value is None or value.strip() == "" else value.strip()


def string(name: str, default: str | None = None, *, env: Mapping[str, str] | None = None) -> str:
    value = _get(env, name)
    if value is None:
        if default is None:
            raise SettingError(f"{name} is required")
        return default
    return value


def optional(name: str, *, env: Mapping[str, str] | None = None) -> str | None:
    return _get(env, name)


def integer(
    name: str, default: int, *, minimum: int | None = None, maximum: int | None = None,
    env: Mapping[str, str] | None = None,
) -> int:
    raw = _get(env, name)
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise SettingError(f"{name}={raw!r} is not an integer") from None
    if minimum is not None and value < minimum:
        raise SettingError(f"{name}={value} is below the minimum {minimum}")
    if maximum is not None and value > maximum:
        raise SettingError(f"{name}={value} is above the maximum {maximum}")
    return value


def number(
    name: str, default: float, *, minimum: float | None = None, maximum: float | None = None,
    env: Mapping[str, str] | None = None,
) -> float:
    raw = _get(env, name)
    if raw is None:
        return default
    try:
        value = float(raw)
    except ValueError:
        raise SettingError(f"{name}={raw!r} is not a number") from None
    if value != value or (minimum is not None and value < minimum):
        raise SettingError(f"{name}={raw} is below the minimum {minimum}")
    if maximum is not None and value > maximum:
        raise SettingError(f"{name}={raw} is above the maximum {maximum}")
    return value


def boolean(name: str, default: bool, *, env: Mapping[str, str] | None = None) -> bool:
    raw = _get(env, name)
    if raw is None:
        return default
    low = raw.lower()
    if low in ("1", "true", "yes", "on"):
        return True
    if low in ("0", "false", "no", "off"):
        return False
    raise SettingError(f"{name}={raw!r} is not a boolean (true/false)")


def string_list(
    name: str, default: tuple[str, ...] = (), *, env: Mapping[str, str] | None = None
) -> tuple[str, ...]:
    raw = _get(env, name)
    if raw is None:
        return default
    return tuple(x.strip() for x in raw.split(",") if x.strip())


def existing_file(name: str, default: str | None = None, *, env: Mapping[str, str] | None = None) -> str:
    path = string(name, default, env=env)
    if not os.path.isfile(path):
        raise SettingError(f"{name}={path} does not exist or is not a file")
    return path
