"""Settings: each part declares a setting once, this module reads, checks and shows them.

A part's settings dataclass declares each field with its option (``setting``): the variable
(written out, so ``grep`` finds it), parser, default, bounds and one-line meaning; the part's
``Spec`` collects them (``Spec.of``). Its entry point calls ``load``, which

* parses the flags (a flag overrides its variable; ``tether PART --help`` lists them all);
* reads every option from the environment (``Spec.read``) and builds the settings dataclass
  from the values (the part's ``build``: the rules between options, then ``fill``);
* checks the files the options name (``Spec.check_files``): certificates and keys parse as
  PEM, a key matches its certificate, a kubeconfig has a cluster, a user and a context;

all before any server or worker starts. Any problem stops the process with exit code 2 and
one line on stderr, ``tether PART: VARIABLE: problem``. Naming: docs/configuration.md. The
parsers of one raw value live in ``tether.base.parsers``, the file checks in
``tether.base.filechecks``.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal, NoReturn, TypeVar

from tether.base import filechecks, parsers
from tether.base.parsers import SettingError as SettingError  # the settings layer's error

T = TypeVar("T")
FileKind = Literal["file", "certificate", "key", "kubeconfig"]


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
        raw, source = parsers.lookup(env, self.name), self.name
        if raw is None and self.fallback is not None:
            raw, source = parsers.lookup(env, self.fallback), self.fallback
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
            return parsers.fmt(self.default)
        return str(self.default) or "(empty)"


def _bounded(
    parse: Callable[[str, str, Any, Any], Any],
    name: str,
    default: Any,
    meaning: str,
    minimum: float | None,
    maximum: float | None,
    **kw: Any,
) -> Option:
    return Option(
        name,
        meaning,
        lambda n, r: parse(n, r, minimum, maximum),
        default,
        bounds=parsers.span(minimum, maximum),
        **kw,
    )


def integer(
    name: str,
    default: Any,
    meaning: str,
    *,
    minimum: int | None = None,
    maximum: int | None = None,
    **kw: Any,
) -> Option:
    return _bounded(parsers.integer, name, default, meaning, minimum, maximum, **kw)


def number(
    name: str,
    default: Any,
    meaning: str,
    *,
    minimum: float | None = None,
    maximum: float | None = None,
    **kw: Any,
) -> Option:
    return _bounded(parsers.number, name, default, meaning, minimum, maximum, **kw)


def seconds(
    name: str,
    default: Any,
    meaning: str,
    *,
    minimum: float | None = None,
    maximum: float | None = None,
    **kw: Any,
) -> Option:
    """A duration in seconds (the variable ends in ``_SECONDS``)."""
    return dataclasses.replace(
        number(name, default, meaning, minimum=minimum, maximum=maximum, **kw), duration=True
    )


def text(name: str, default: Any, meaning: str, **kw: Any) -> Option:
    return Option(name, meaning, lambda n, r: r, default, **kw)


def custom(
    name: str, default: Any, meaning: str, parse: Callable[[str, str], Any], **kw: Any
) -> Option:
    return Option(name, meaning, parse, default, **kw)


def boolean(name: str, default: bool, meaning: str, **kw: Any) -> Option:
    return Option(name, meaning, parsers.boolean, default, **kw)


def names(name: str, default: tuple[str, ...], meaning: str, **kw: Any) -> Option:
    """A comma-separated list."""
    return Option(name, meaning, lambda n, r: parsers.names(r), default, **kw)


def https_url(name: str, default: Any, meaning: str, **kw: Any) -> Option:
    """An ``https://`` URL with a host, without a trailing slash."""
    return Option(name, meaning, parsers.https_url, default, **kw)


def choice(name: str, default: str, meaning: str, choices: Sequence[str], **kw: Any) -> Option:
    return Option(
        name, meaning, parsers.choice(tuple(choices)), default, bounds="|".join(choices), **kw
    )


def log_level(name: str = "TETHER_LOG_LEVEL", **kw: Any) -> Option:
    return Option(
        name, "log level", parsers.log_level, "INFO", bounds="|".join(parsers.LOG_LEVELS), **kw
    )


def log_format(name: str = "TETHER_LOG_FORMAT", **kw: Any) -> Option:
    return choice(name, "json", "log line format", parsers.LOG_FORMATS, **kw)


def runtime_id(name: str = "TETHER_RUNTIME_ID", **kw: Any) -> Option:
    """A runtime ID as the change record schema and Kubernetes label values admit it."""
    return Option(
        name, "this runtime's ID (the CN of its client certificate)", parsers.runtime_id, **kw
    )


def object_name(name: str, default: Any, meaning: str, **kw: Any) -> Option:
    """A Kubernetes object name (DNS subdomain)."""
    return Option(name, meaning, parsers.object_name, default, **kw)


def host_port(name: str, default: Any, meaning: str, **kw: Any) -> Option:
    return Option(name, meaning, parsers.host_port, default, **kw)


def file(name: str, default: Any, meaning: str, kind: FileKind = "file", **kw: Any) -> Option:
    """A file that must exist; its content is checked at start (``Spec.check_files``):
    a ``certificate`` file holds PEM certificates, a ``key`` file a PEM private key, a
    ``kubeconfig`` a cluster, a user and a context."""
    return Option(name, meaning, parsers.existing_file, default, file=kind, **kw)


def kubeconfig(
    name: str,
    meaning: str = "kubeconfig file (unset: $KUBECONFIG, else the in-cluster service account)",
    **kw: Any,
) -> Option:
    return file(
        name,
        None,
        meaning,
        "kubeconfig",
        fallback="KUBECONFIG",
        shown="in-cluster service account",
        **kw,
    )


def kcp_kubeconfig(name: str, **kw: Any) -> Option:
    return kubeconfig(
        name,
        "kubeconfig of the KCP (unset: $KUBECONFIG, else the in-cluster service account)",
        **kw,
    )


def heartbeat_namespace(
    name: str = "TETHER_HEARTBEAT_NAMESPACE",
    meaning: str = "KCP namespace of the listener's heartbeat Leases (the "
    "manifests: tether-heartbeats)",
    *,
    shown: str = "TETHER_KCP_NAMESPACE",
    **kw: Any,
) -> Option:
    """Where the heartbeat Leases are; unset, the part's KCP namespace (``otherwise``)."""
    return object_name(name, None, meaning, shown=shown, **kw)


def audit_log(name: str = "TETHER_AUDIT_LOG", **kw: Any) -> Option:
    return text(name, "stdout", "stdout or a file path for the audit lines", **kw)


def backoff(prefix: str, base: float, cap: float) -> tuple[Option, Option]:
    """The per-runtime backoff of a KCP part that calls into runtimes: first and longest."""
    return (
        seconds(
            prefix + "BACKOFF_BASE_SECONDS",
            base,
            "first per-runtime backoff",
            minimum=0,
            maximum=86_400,
        ),
        seconds(
            prefix + "BACKOFF_CAP_SECONDS",
            cap,
            "longest per-runtime backoff",
            minimum=0,
            maximum=86_400,
        ),
    )


# -- settings dataclasses: a field declared by its option ------------------------------------

_UNGIVEN: Any = object()


def setting(
    option: Option,
    *,
    derived: Any = _UNGIVEN,
    otherwise: Option | None = None,
    convert: Callable[[Any], Any] | None = None,
    **field: Any,
) -> Any:
    """A settings dataclass field declared by its option: the field's default is the option's
    (``REQUIRED``: none), through ``convert`` (seconds -> timedelta) when given.
    ``otherwise``: unset, the field takes that option's value (a namespace: the KCP's).
    ``derived``: the part computes the value (``fill``'s ``given``; the option's default is
    None, its ``shown`` says how); this is the field's default when built directly."""
    if (derived is not _UNGIVEN or otherwise is not None) and option.default is not None:
        raise ValueError(f"{option.name}: a derived setting's option has no default")
    meta = {
        "option": option,
        "otherwise": otherwise,
        "convert": convert,
        "derived": derived is not _UNGIVEN,
    }
    default = (
        derived if derived is not _UNGIVEN else otherwise.default if otherwise else option.default
    )
    if default is REQUIRED:
        return dataclasses.field(metadata=meta, **field)
    return dataclasses.field(
        default=convert(default) if convert else default, metadata=meta, **field
    )


def inputs(*options: Option, **field: Any) -> Any:
    """A field the part builds from these options (a shared module's settings object, a
    file's content); the options are listed at its place."""
    return dataclasses.field(metadata={"inputs": options}, **field)


def group(settings: type, **field: Any) -> Any:
    """A nested settings dataclass whose own fields declare options."""
    return dataclasses.field(metadata={"group": settings}, **field)


def declared(settings: type) -> tuple[Option, ...]:
    """The options the fields of a settings dataclass declare, in field order."""
    found: list[Option] = []
    for f in dataclasses.fields(settings):
        found.extend(filter(None, [f.metadata.get("option")]))
        found.extend(f.metadata.get("inputs", ()))
        if "group" in f.metadata:
            found.extend(declared(f.metadata["group"]))
    return tuple(found)


def fill(settings: Callable[..., T], values: Mapping[str, Any], **given: Any) -> T:
    """The settings dataclass from the options' values; ``given``: the fields the part
    derives (every ``derived`` and ``inputs`` field) or builds itself."""
    kw: dict[str, Any] = {}
    for f in dataclasses.fields(settings):  # type: ignore[arg-type]
        m = f.metadata
        if f.name in given:
            kw[f.name] = given[f.name]
        elif "group" in m:
            kw[f.name] = fill(m["group"], values)
        elif "inputs" in m or m.get("derived"):
            raise TypeError(f"{f.name}: derived from other options; give it")
        elif "option" in m:
            value = values[m["option"].name]
            if value is None and m["otherwise"] is not None:
                value = values[m["otherwise"].name]
            kw[f.name] = m["convert"](value) if m["convert"] else value
    if set(given) - set(kw):
        raise TypeError(f"no such fields: {sorted(set(given) - set(kw))}")
    return settings(**kw)


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

    @classmethod
    def of(
        cls,
        settings: type,
        *,
        part: str,
        summary: str,
        renamed: Mapping[str, str] | None = None,
        pairs: tuple[tuple[str, str], ...] = (),
    ) -> Spec:
        """The spec of a settings dataclass: the options its fields declare (``declared``)."""
        return cls(part, summary, declared(settings), dict(renamed or {}), pairs)

    def option(self, name: str) -> Option:
        for o in self.options:
            if o.name == name:
                return o
        raise KeyError(name)

    def read(self, env: Mapping[str, str] | None = None) -> Values:
        """Every option's value (``env`` for tests; default ``os.environ``)."""
        e = os.environ if env is None else env
        for old, new in self.renamed.items():
            if parsers.lookup(e, old) is not None:
                raise SettingError(f"{old}: renamed {new}; set that instead")
        return Values((o.name, o.read(e)) for o in self.options)

    def check_files(self, values: Mapping[str, Any]) -> None:
        """What the files named by the options hold; raises ``SettingError``."""
        for o in self.options:
            if values.get(o.name) is not None and o.file is not None:
                filechecks.check(o.file, o.name, values[o.name])
        for cert_name, key_name in self.pairs:
            if values.get(cert_name) and values.get(key_name):
                filechecks.check_pair(cert_name, values[cert_name], key_name, values[key_name])

    def help_text(self) -> str:
        lines = ["settings (environment variables; a flag overrides its variable):"]
        for o in self.options:
            head = f"  {o.name}"
            if o.flag:
                head += f" ({o.flag})"
            extra = f", {o.bounds}" if o.bounds else ""
            extra += ", seconds" if o.duration else ""
            lines.append(
                f"{head}  default: {o.default_text()}" + (f"  [{extra[2:]}]" if extra else "")
            )
            lines.append(f"      {o.meaning}")
        if self.renamed:
            lines.append(
                "renamed (refused): "
                + ", ".join(f"{old} -> {new}" for old, new in self.renamed.items())
            )
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
            prog=f"tether {self.part}",
            description=self.summary,
            epilog=self.help_text(),
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        parser.add_argument(
            "--check",
            action="store_true",
            help="check the settings, certificates and kubeconfig, then exit",
        )
        for o in self.options:
            if o.flag:
                parser.add_argument(o.flag, dest=o.name, metavar="VALUE", help=f"sets {o.name}")
        return parser

    def env_with_flags(
        self, args: argparse.Namespace, env: Mapping[str, str] | None = None
    ) -> dict[str, str]:
        """The environment with the given flags overriding their variables."""
        merged = dict(os.environ if env is None else env)
        for o in self.options:
            value = getattr(args, o.name, None) if o.flag else None
            if value is not None:
                merged[o.name] = str(value)
        return merged


# -- entry points -------------------------------------------------------------------------


def fail(part: str, problem: object) -> NoReturn:
    """Stop at start: one line, exit code 2."""
    print(f"tether {part}: {problem}", file=sys.stderr)
    raise SystemExit(2)


def load(
    spec: Spec,
    argv: Sequence[str],
    build: Callable[[Values], T],
    *,
    options: Callable[[argparse.ArgumentParser], object] | None = None,
    env: Mapping[str, str] | None = None,
) -> tuple[T, argparse.Namespace]:
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
