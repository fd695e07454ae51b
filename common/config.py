"""Settings: each part declares its options once, this module reads, checks and shows them.

A part's settings module declares a ``Spec``: every option with its variable (written out,
so ``grep`` finds it), parser, default, bounds and one-line meaning, plus the variables it
renamed. The part's entry point calls ``load``, which

* parses the flags (a flag, where the part has one, overrides its variable), so that
  ``tether PART --help`` lists every option with its variable, meaning and default;
* reads every option from the environment (``Spec.read``) and builds the part's frozen
  settings dataclass from the values (the part's ``build``, which adds the checks between
  options);
* checks the files the options name (``Spec.check_files``): certificates and keys parse as
  PEM, a key matches its certificate, a kubeconfig has a cluster, a user and a context;

all before any server or worker starts. Any problem stops the process with exit code 2 and
one line on stderr, ``tether PART: VARIABLE: problem``. Naming (docs/configuration.md):
``TETHER_<PART>_<NAME>`` for one part, ``TETHER_<NAME>`` for a variable several parts read,
durations end in ``_SECONDS``; a renamed variable is refused with its new name.

Numbers are plain ASCII: int()/float() would take '٣', 'inf' and '1_000'.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import pathlib
import re
import sys
import urllib.parse
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal, NoReturn, TypeVar

import yaml
from cryptography import x509
from cryptography.hazmat.primitives import serialization

LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")
LOG_FORMATS = ("json", "text")
_RUNTIME_ID = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?")
_DNS_NAME = re.compile(r"[a-z0-9]([-a-z0-9.]*[a-z0-9])?")

_INTEGER = re.compile(r"-?[0-9]{1,18}")
_NUMBER = re.compile(r"-?[0-9]{1,18}(\.[0-9]{1,18})?")

T = TypeVar("T")
FileKind = Literal["file", "certificate", "key", "kubeconfig"]


class SettingError(ValueError):
    """A setting is missing or invalid: ``VARIABLE: problem``."""


def _get(env: Mapping[str, str] | None, name: str) -> str | None:
    value = (os.environ if env is None else env).get(name)
    return None if value is None or value.strip() == "" else value.strip()


# -- parsers of one raw value: (variable, raw) -> value, raising SettingError -------------


def _integer(name: str, raw: str, minimum: float | None, maximum: float | None) -> int:
    if _INTEGER.fullmatch(raw) is None:  # int() would take '٣', '1_000' and ' 5 '
        raise SettingError(f"{name}: {raw!r} is not an integer")
    value = int(raw)
    _bounds(name, value, minimum, maximum)
    return value


def _number(name: str, raw: str, minimum: float | None, maximum: float | None) -> float:
    if _NUMBER.fullmatch(raw) is None:  # float() would take '٣', 'inf' and '1_0'
        raise SettingError(f"{name}: {raw!r} is not a number")
    value = float(raw)
    _bounds(name, value, minimum, maximum)
    return value


def _fmt(x: float) -> str:
    """A number as an operator writes it: 10000000, 0.5 (never 1e+07)."""
    return str(int(x)) if float(x).is_integer() else repr(float(x))


def _bounds(name: str, value: float, minimum: float | None, maximum: float | None) -> None:
    if minimum is not None and value < minimum:
        raise SettingError(f"{name}: {_fmt(value)} is below the minimum {_fmt(minimum)}")
    if maximum is not None and value > maximum:
        raise SettingError(f"{name}: {_fmt(value)} is above the maximum {_fmt(maximum)}")


def _boolean(name: str, raw: str) -> bool:
    low = raw.lower()
    if low in ("1", "true", "yes", "on"):
        return True
    if low in ("0", "false", "no", "off"):
        return False
    raise SettingError(f"{name}: {raw!r} is not a boolean (true/false)")


def _names(raw: str) -> tuple[str, ...]:
    return tuple(x.strip() for x in raw.split(",") if x.strip())


def _https_url(name: str, raw: str) -> str:
    parsed = urllib.parse.urlsplit(raw)
    try:
        parsed.port  # noqa: B018 - raises on a port that is no number
    except ValueError:
        raise SettingError(f"{name}: {raw!r} has a bad port") from None
    if parsed.scheme != "https" or not parsed.hostname:
        raise SettingError(f"{name}: {raw!r} must be an https:// URL with a host")
    return raw.rstrip("/")


def _log_level(name: str, raw: str) -> str:
    level = raw.upper()
    if level not in LOG_LEVELS:
        raise SettingError(f"{name}: {raw!r} is not DEBUG, INFO, WARNING or ERROR")
    return level


def _choice(choices: Sequence[str]) -> Callable[[str, str], str]:
    def parse(name: str, raw: str) -> str:
        if raw.lower() not in choices:
            raise SettingError(f"{name}: {raw!r} is not {' or '.join(choices)}")
        return raw.lower()
    return parse


def _runtime_id(name: str, raw: str) -> str:
    if len(raw) > 63 or not _RUNTIME_ID.fullmatch(raw):
        raise SettingError(f"{name}: {raw!r} is not a valid runtime ID "
                           "(1-63 of [A-Za-z0-9-_.], alphanumeric at both ends)")
    return raw


def _object_name(name: str, raw: str) -> str:
    if len(raw) > 253 or not _DNS_NAME.fullmatch(raw):
        raise SettingError(f"{name}: {raw!r} is not a valid object name")
    return raw


def _host_port(name: str, raw: str) -> str:
    host, sep, port = raw.rpartition(":")
    if not sep or not host or _INTEGER.fullmatch(port) is None or not 0 < int(port) < 65536:
        raise SettingError(f"{name}: {raw!r} is not HOST:PORT")
    return raw


def _existing_file(name: str, raw: str) -> str:
    if not os.path.isfile(raw):
        raise SettingError(f"{name}: {raw} does not exist or is not a file")
    return raw


# -- options ------------------------------------------------------------------------------


class _Required:
    def __repr__(self) -> str:
        return "REQUIRED"


REQUIRED: Any = _Required()


@dataclasses.dataclass(frozen=True)
class Option:
    """One setting: its variable, meaning, parser and default (``REQUIRED`` or the value
    when unset; ``None`` for an optional one). ``fallback`` is a variable read when this one
    is unset (a shared one such as ``TETHER_LOG_LEVEL``, or ``KUBECONFIG``); ``shown`` is the
    default as ``--help`` prints it when it is derived from other options."""

    name: str
    meaning: str
    parse: Callable[[str, str], Any]
    default: Any = REQUIRED
    shown: str | None = None
    fallback: str | None = None
    flag: str | None = None
    duration: bool = False
    file: FileKind | None = None
    bounds: str = ""

    def read(self, env: Mapping[str, str]) -> Any:
        raw, source = _get(env, self.name), self.name
        if raw is None and self.fallback is not None:
            raw, source = _get(env, self.fallback), self.fallback
        if raw is None:
            if self.default is REQUIRED:
                raise SettingError(f"{self.name}: not set (required)")
            return self.default
        return self.parse(source, raw)

    def default_text(self) -> str:
        own = self._own_default()
        return f"${self.fallback}, else {own}" if self.fallback else own

    def _own_default(self) -> str:
        if self.shown is not None:
            return self.shown
        if self.default is REQUIRED:
            return "required"
        if self.default is None:
            return "unset"
        if isinstance(self.default, tuple):
            return ",".join(str(x) for x in self.default) or "(empty)"
        if isinstance(self.default, bool):
            return "true" if self.default else "false"
        if isinstance(self.default, float):
            return _fmt(self.default)
        return str(self.default) or "(empty)"


def _range(minimum: float | None, maximum: float | None) -> str:
    if minimum is None and maximum is None:
        return ""
    lo = "" if minimum is None else _fmt(minimum)
    hi = "" if maximum is None else _fmt(maximum)
    return f"{lo}..{hi}"


def integer(name: str, default: Any, meaning: str, *, minimum: int | None = None,
            maximum: int | None = None, **kw: Any) -> Option:
    return Option(name, meaning, lambda n, r: _integer(n, r, minimum, maximum), default,
                  bounds=_range(minimum, maximum), **kw)


def number(name: str, default: Any, meaning: str, *, minimum: float | None = None,
           maximum: float | None = None, **kw: Any) -> Option:
    return Option(name, meaning, lambda n, r: _number(n, r, minimum, maximum), default,
                  bounds=_range(minimum, maximum), **kw)


def seconds(name: str, default: Any, meaning: str, *, minimum: float | None = None,
            maximum: float | None = None, **kw: Any) -> Option:
    """A duration in seconds (the variable ends in ``_SECONDS``)."""
    return dataclasses.replace(number(name, default, meaning, minimum=minimum, maximum=maximum,
                                      **kw), duration=True)


def text(name: str, default: Any, meaning: str, **kw: Any) -> Option:
    return Option(name, meaning, lambda n, r: r, default, **kw)


def custom(name: str, default: Any, meaning: str, parse: Callable[[str, str], Any],
           **kw: Any) -> Option:
    return Option(name, meaning, parse, default, **kw)


def boolean(name: str, default: bool, meaning: str, **kw: Any) -> Option:
    return Option(name, meaning, _boolean, default, **kw)


def names(name: str, default: tuple[str, ...], meaning: str, **kw: Any) -> Option:
    """A comma-separated list."""
    return Option(name, meaning, lambda n, r: _names(r), default, **kw)


def https_url(name: str, default: Any, meaning: str, **kw: Any) -> Option:
    """An ``https://`` URL with a host, without a trailing slash."""
    return Option(name, meaning, _https_url, default, **kw)


def choice(name: str, default: str, meaning: str, choices: Sequence[str], **kw: Any) -> Option:
    return Option(name, meaning, _choice(tuple(choices)), default,
                  bounds="|".join(choices), **kw)


def log_level(name: str = "TETHER_LOG_LEVEL", **kw: Any) -> Option:
    return Option(name, "log level", _log_level, "INFO", bounds="|".join(LOG_LEVELS), **kw)


def log_format(name: str = "TETHER_LOG_FORMAT", **kw: Any) -> Option:
    return choice(name, "json", "log line format", LOG_FORMATS, **kw)


def runtime_id(name: str = "TETHER_RUNTIME_ID", **kw: Any) -> Option:
    """A runtime ID as the change record schema and Kubernetes label values admit it."""
    return Option(name, "this runtime's ID (the CN of its client certificate)", _runtime_id,
                  **kw)


def object_name(name: str, default: Any, meaning: str, **kw: Any) -> Option:
    """A Kubernetes object name (DNS subdomain)."""
    return Option(name, meaning, _object_name, default, **kw)


def host_port(name: str, default: Any, meaning: str, **kw: Any) -> Option:
    return Option(name, meaning, _host_port, default, **kw)


def file(name: str, default: Any, meaning: str, kind: FileKind = "file", **kw: Any) -> Option:
    """A file that must exist; its content is checked at start (``Spec.check_files``):
    a ``certificate`` file holds PEM certificates, a ``key`` file a PEM private key, a
    ``kubeconfig`` a cluster, a user and a context."""
    return Option(name, meaning, _existing_file, default, file=kind, **kw)


def kubeconfig(name: str, meaning: str = "kubeconfig file (unset: $KUBECONFIG, else the "
               "in-cluster service account)", **kw: Any) -> Option:
    return file(name, None, meaning, "kubeconfig", fallback="KUBECONFIG",
                shown="in-cluster service account", **kw)


class Values(dict[str, Any]):
    """The options' values by variable; a variable the spec does not declare is a KeyError."""


@dataclasses.dataclass(frozen=True)
class Spec:
    """A part's options. ``renamed``: old variable -> new one (the old one is refused);
    ``pairs``: (certificate variable, key variable) whose files must match."""

    part: str
    summary: str
    options: tuple[Option, ...]
    renamed: Mapping[str, str] = dataclasses.field(default_factory=dict)
    pairs: tuple[tuple[str, str], ...] = ()

    def __post_init__(self) -> None:
        seen = [o.name for o in self.options]
        dupes = {n for n in seen if seen.count(n) > 1}
        if dupes:
            raise ValueError(f"{self.part}: options declared twice: {sorted(dupes)}")

    def option(self, name: str) -> Option:
        for o in self.options:
            if o.name == name:
                return o
        raise KeyError(name)

    def read(self, env: Mapping[str, str] | None = None) -> Values:
        """Every option's value (``env`` for tests; default ``os.environ``)."""
        e = os.environ if env is None else env
        for old, new in self.renamed.items():
            if _get(e, old) is not None:
                raise SettingError(f"{old}: renamed {new}; set that instead")
        return Values((o.name, o.read(e)) for o in self.options)

    def check_files(self, values: Mapping[str, Any]) -> None:
        """What the files named by the options hold; raises ``SettingError``."""
        for o in self.options:
            path = values.get(o.name)
            if path is None or o.file is None:
                continue
            source = o.name
            if o.file == "kubeconfig":
                check_kubeconfig(source, path)
            elif o.file == "certificate":
                check_certificates(source, path)
            elif o.file == "key":
                check_key(source, path)
        for cert_name, key_name in self.pairs:
            if values.get(cert_name) and values.get(key_name):
                check_pair(cert_name, values[cert_name], key_name, values[key_name])

    def help_text(self) -> str:
        lines = ["settings (environment variables; a flag overrides its variable):"]
        for o in self.options:
            head = f"  {o.name}"
            if o.flag:
                head += f" ({o.flag})"
            extra = f", {o.bounds}" if o.bounds else ""
            extra += ", seconds" if o.duration else ""
            lines.append(f"{head}  default: {o.default_text()}" + (f"  [{extra[2:]}]" if extra else ""))
            lines.append(f"      {o.meaning}")
        if self.renamed:
            lines.append("renamed (refused): " + ", ".join(
                f"{old} -> {new}" for old, new in self.renamed.items()))
        return "\n".join(lines)

    def markdown(self) -> str:
        """The settings table of docs/<part>.md (a test keeps the docs equal to it)."""
        rows = ["| variable | default | meaning |", "|---|---|---|"]
        for o in self.options:
            name = f"`{o.name}`" + (f" (`{o.flag}`)" if o.flag else "")
            bounds = f"{o.bounds}{' s' if o.duration and o.bounds else ''}"
            extra = f" ({bounds})" if bounds else (" (seconds)" if o.duration else "")
            default = o.default_text().replace("|", "\\|")
            rows.append(f"| {name} | `{default}` | {o.meaning}{extra.replace('|', ', ')} |")
        for old, new in self.renamed.items():
            rows.append(f"| ~~`{old}`~~ | refused | renamed `{new}` |")
        return "\n".join(rows)

    def parser(self) -> argparse.ArgumentParser:
        parser = argparse.ArgumentParser(
            prog=f"tether {self.part}", description=self.summary, epilog=self.help_text(),
            formatter_class=argparse.RawDescriptionHelpFormatter)
        parser.add_argument("--check", action="store_true",
                            help="check the settings, certificates and kubeconfig, then exit")
        for o in self.options:
            if o.flag:
                parser.add_argument(o.flag, dest=o.name, metavar="VALUE", help=f"sets {o.name}")
        return parser

    def env_with_flags(self, args: argparse.Namespace,
                       env: Mapping[str, str] | None = None) -> dict[str, str]:
        """The environment with the given flags overriding their variables."""
        merged = dict(os.environ if env is None else env)
        for o in self.options:
            value = getattr(args, o.name, None) if o.flag else None
            if value is not None:
                merged[o.name] = str(value)
        return merged


# -- file checks --------------------------------------------------------------------------


def _read(name: str, path: str) -> bytes:
    try:
        return pathlib.Path(path).read_bytes()
    except OSError as e:
        raise SettingError(f"{name}: cannot read {path}: {e.strerror or e}") from None


def check_certificates(name: str, path: str) -> list[x509.Certificate]:
    """PEM certificates (a chain or a CA bundle), at least one."""
    try:
        found = x509.load_pem_x509_certificates(_read(name, path))
    except ValueError:
        raise SettingError(f"{name}: {path} holds no PEM certificate") from None
    return found


def check_key(name: str, path: str) -> None:
    try:
        serialization.load_pem_private_key(_read(name, path), password=None)
    except (ValueError, TypeError) as e:
        raise SettingError(f"{name}: {path} is not an unencrypted PEM private key "
                           f"({type(e).__name__})") from None


def check_pair(cert_name: str, cert_path: str, key_name: str, key_path: str) -> None:
    """The key's public half is the first certificate's (named by the key's variable)."""
    cert = check_certificates(cert_name, cert_path)[0]
    try:
        key = serialization.load_pem_private_key(_read(key_name, key_path), password=None)
    except (ValueError, TypeError) as e:
        raise SettingError(f"{key_name}: {key_path} is not an unencrypted PEM private key "
                           f"({type(e).__name__})") from None
    der = serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    if key.public_key().public_bytes(*der) != cert.public_key().public_bytes(*der):
        raise SettingError(f"{key_name}: {key_path} does not match the certificate of {cert_name}")


def check_kubeconfig(name: str, path: str) -> None:
    """A kubeconfig as the Kubernetes client reads it: a cluster with a server, a user and
    a current (or only) context naming them. Read only: building a client in a gunicorn
    master would write its certificates to temporary files the forked workers share."""
    try:
        doc = yaml.safe_load(_read(name, path))
    except yaml.YAMLError:
        raise SettingError(f"{name}: {path} is not YAML, so not a kubeconfig") from None

    def named(key: str) -> dict[str, Any]:
        items = doc.get(key) if isinstance(doc, dict) else None
        if not isinstance(items, list) or not items:
            raise SettingError(f"{name}: {path} is not a kubeconfig (no {key})")
        return {i["name"]: i.get(key[:-1]) for i in items if isinstance(i, dict) and "name" in i}

    clusters, users, contexts = named("clusters"), named("users"), named("contexts")
    current = doc.get("current-context") or (next(iter(contexts)) if len(contexts) == 1 else None)
    ctx = contexts.get(current) if current else None
    if not isinstance(ctx, dict):
        raise SettingError(f"{name}: {path} has no current context")
    cluster = clusters.get(str(ctx.get("cluster")))
    if not isinstance(cluster, dict) or not cluster.get("server"):
        raise SettingError(f"{name}: {path}: context {current!r} names no cluster with a server")
    if ctx.get("user") not in users:
        raise SettingError(f"{name}: {path}: context {current!r} names no user")


# -- entry points -------------------------------------------------------------------------


def fail(part: str, problem: object) -> NoReturn:
    """Stop at start: one line, exit code 2."""
    print(f"tether {part}: {problem}", file=sys.stderr)
    raise SystemExit(2)


def load(spec: Spec, argv: Sequence[str], build: Callable[[Values], T], *,
         options: Callable[[argparse.ArgumentParser], object] | None = None,
         env: Mapping[str, str] | None = None) -> tuple[T, argparse.Namespace]:
    """Flags, settings and file checks of a part, before it starts anything. ``options``
    adds flags that are not settings (``--once``). ``--check`` exits 0 when all is well.
    Any problem exits 2 with one line (``fail``)."""
    parser = spec.parser()
    if options is not None:
        options(parser)
    args = parser.parse_args(list(argv))
    try:
        values = spec.read(spec.env_with_flags(args, env))
        settings = build(values)
        spec.check_files(values)
    except SettingError as e:
        fail(spec.part, e)
    if args.check:
        print(f"tether {spec.part}: settings ok")
        raise SystemExit(0)
    return settings, args


# -- single values (shared helpers outside a Spec) ----------------------------------------


def string(name: str, default: str | None = None, *, env: Mapping[str, str] | None = None) -> str:
    value = _get(env, name)
    if value is None:
        if default is None:
            raise SettingError(f"{name}: not set (required)")
        return default
    return value
