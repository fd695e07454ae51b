"""Reading settings from the environment with clear errors.

Each part has its own settings dataclass, built once in its entry point from flags and
environment variables through these helpers. A bad value raises ``SettingError`` naming
the variable and what is wrong, so the process stops at start with one clear line.
"""

from __future__ import annotations

import argparse
import os
import re
import urllib.parse
from collections.abc import Mapping, Sequence

LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")
_RUNTIME_ID = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?")

_INTEGER = re.compile(r"-?[0-9]{1,18}")
_NUMBER = re.compile(r"-?[0-9]{1,18}(\.[0-9]{1,18})?")


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
    if _INTEGER.fullmatch(raw) is None:  # int() would take '٣', '1_000' and ' 5 '
        raise SettingError(f"{name}={raw!r} is not an integer")
    value = int(raw)
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
    if _NUMBER.fullmatch(raw) is None:  # float() would take '٣', 'inf' and '1_0'
        raise SettingError(f"{name}={raw!r} is not a number")
    value = float(raw)
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


def https_url(name: str, default: str | None = None, *, env: Mapping[str, str] | None = None) -> str:
    """An ``https://`` URL with a host, without a trailing slash."""
    value = string(name, default, env=env)
    parsed = urllib.parse.urlsplit(value)
    if parsed.scheme != "https" or not parsed.hostname:
        raise SettingError(f"{name}={value!r} must be an https:// URL with a host")
    return value.rstrip("/")


def log_level(name: str = "TETHER_LOG_LEVEL", *, env: Mapping[str, str] | None = None) -> str:
    level = string(name, "INFO", env=env).upper()
    if level not in LOG_LEVELS:
        raise SettingError(f"{name}={level!r} is not DEBUG, INFO, WARNING or ERROR")
    return level


def runtime_id(name: str = "TETHER_RUNTIME_ID", *, env: Mapping[str, str] | None = None) -> str:
    """A runtime ID as the change record schema and Kubernetes label values admit it."""
    value = string(name, env=env)
    if len(value) > 63 or not _RUNTIME_ID.fullmatch(value):
        raise SettingError(f"{name}={value!r} is not a valid runtime ID "
                           "(1-63 of [A-Za-z0-9-_.], alphanumeric at both ends)")
    return value


def env_with_flags(argv: Sequence[str], flags: Mapping[str, str], *, prog: str,
                   description: str, env: Mapping[str, str] | None = None) -> dict[str, str]:
    """Parse ``--flag VALUE`` options, each standing for an environment variable
    (``flags``: flag -> variable), and return the environment with the given flags
    overriding it. ``--help`` lists every flag with its variable."""
    parser = argparse.ArgumentParser(prog=prog, description=description)
    for flag, var in flags.items():
        parser.add_argument(flag, dest=var, metavar="VALUE", help=f"(env {var})")
    args = parser.parse_args(list(argv))
    merged = dict(os.environ if env is None else env)
    merged.update({k: str(v) for k, v in vars(args).items() if v is not None})
    return merged
