"""The settings layer: parsers, the naming rule, --help, renamed variables, file checks."""

from __future__ import annotations

import argparse
import dataclasses
import pathlib
import re
from typing import Any

import pytest

from admin import settings as admin_settings
from canary import settings as canary_settings
from compass import settings as compass_settings
from enroller import settings as enroller_settings
from injector import settings as injector_settings
from listener import settings as listener_settings
from listener.janitor import settings as janitor_settings
from poller import settings as poller_settings
from tether.base import certs, config, filechecks
from tether.runtime import sender
from tether.wire import filters
from webhook import settings as webhook_settings

SPECS = {
    "webhook": webhook_settings.SPEC,
    "listener": listener_settings.SPEC,
    "janitor": janitor_settings.SPEC,
    "poller": poller_settings.SPEC,
    "compass": compass_settings.SPEC,
    "enroller": enroller_settings.SPEC,
    "admin": admin_settings.SPEC,
    "injector": injector_settings.SPEC,
    "canary": canary_settings.SPEC,
}
# the prefix of each part's own variables (the janitor is the listener's)
PREFIX = {
    "webhook": "TETHER_WEBHOOK_",
    "listener": "TETHER_LISTENER_",
    "janitor": "TETHER_LISTENER_",
    "poller": "TETHER_POLLER_",
    "compass": "TETHER_COMPASS_",
    "enroller": "TETHER_ENROLLER_",
    "admin": "TETHER_ADMIN_",
    "injector": "TETHER_INJECTOR_",
    "canary": "TETHER_CANARY_",
}
# read by two or more parts, so without a part prefix (the listener client's are named for
# what they point to: the listener, whose own settings do not include them)
SHARED = {
    "TETHER_RUNTIME_ID",
    "TETHER_LISTENER_URL",
    "TETHER_LISTENER_CA_FILE",
    "TETHER_CLIENT_CERT_FILE",
    "TETHER_CLIENT_KEY_FILE",
    "TETHER_LISTENER_CONNECT_TIMEOUT_SECONDS",
    "TETHER_LISTENER_TIMEOUT_SECONDS",
    "TETHER_CERT_RELOAD_SECONDS",
    "TETHER_IGNORED_NAMESPACES",
    "TETHER_LABEL_SELECTOR",
    "TETHER_KUBECONFIG",
    "TETHER_LOG_LEVEL",
    "TETHER_LOG_FORMAT",
    "TETHER_AUDIT_LOG",
    "TETHER_KCP_NAMESPACE",
    "TETHER_HEARTBEAT_NAMESPACE",
    "TETHER_WATCHES_CONFIGMAP",  # webhook and poller (tether.wire.watchset.OPTION)
    "TETHER_DIGEST_KEY_FILE",  # webhook and poller (tether.wire.watchset.KEY_OPTION)
    # compass, the enroller and the canary, calling into runtimes (tether.kube.skr_clients.OPTIONS)
    "TETHER_KUBECONFIG_NAMESPACE",
    "TETHER_KUBECONFIG_SECRET_NAME",
    "TETHER_KUBECONFIG_MAX_AGE_SECONDS",
    "TETHER_RUNTIME_DENIED_NETWORKS",
    "TETHER_RUNTIME_MAX_RESPONSE_BYTES",
    "TETHER_RUNTIME_MAX_CONNECTIONS",
    # the listener's quota, the injector's per-runtime bounds (tether.wire.storagebudget)
    "TETHER_LISTENER_QUOTA_RECORDS",
    "TETHER_LISTENER_QUOTA_BYTES",
}
FOREIGN = {"KUBECONFIG", "PROMETHEUS_MULTIPROC_DIR"}  # standard names other tools read
DURATION_WORDS = re.compile(
    r"TIMEOUT|INTERVAL|GRACE|KEEPALIVE|RETENTION|PERIOD|DEADLINE|"
    r"BACKOFF|DRAIN|WAIT|READBACK|COALESCE|CACHE_|_AFTER|THRESHOLDS"
)


def _all() -> list[tuple[str, config.Option]]:
    return [(part, o) for part, spec in SPECS.items() for o in spec.options]


@pytest.mark.parametrize(("part", "option"), _all(), ids=lambda x: getattr(x, "name", x))
def test_every_variable_follows_the_naming_rule(part: str, option: config.Option) -> None:
    name = option.name
    if name in FOREIGN:
        return
    assert re.fullmatch(r"TETHER_[A-Z][A-Z0-9_]*[A-Z0-9]", name)
    assert name.startswith(PREFIX[part]) or name in SHARED, f"{name}: not {PREFIX[part]}*"
    if option.duration:
        assert name.endswith("_SECONDS"), f"{name} is a duration"
    if name.endswith("_SECONDS"):
        assert option.duration, f"{name} ends in _SECONDS but is not declared a duration"
    if DURATION_WORDS.search(name) and not name.endswith(("_ENTRIES", "_RECORDS")):
        assert name.endswith("_SECONDS"), f"{name} looks like a duration"
    for fallback in filter(None, [option.fallback]):
        assert fallback in SHARED | FOREIGN


def test_shared_variables_are_read_by_two_parts() -> None:
    readers: dict[str, set[str]] = {}
    for part, o in _all():
        for n in (o.name, o.fallback):
            if n:
                readers.setdefault(n, set()).add("listener" if part == "janitor" else part)
    for name in SHARED:
        assert len(readers.get(name, ())) >= 2, f"{name} is read by {readers.get(name)} only"


def test_renamed_variables_point_at_declared_ones() -> None:
    for spec in SPECS.values():
        names = {o.name for o in spec.options}
        for old, new in spec.renamed.items():
            assert new in names and old not in names


@pytest.mark.parametrize("part", SPECS)
def test_help_lists_every_option_with_its_default(part: str) -> None:
    text = SPECS[part].parser().format_help()
    for o in SPECS[part].options:
        line = next(
            (
                li
                for li in text.splitlines()
                if li.startswith(f"  {o.name} ") or li == f"  {o.name}"
            ),
            None,
        )
        assert line is not None, f"{o.name} missing from --help"
        assert f"default: {o.default_text()}" in line
        assert o.meaning.split()[0] in text


def test_renamed_is_refused_with_the_new_name(tmp_path: pathlib.Path) -> None:
    with pytest.raises(
        config.SettingError,
        match="^TETHER_LISTENER_TIMEOUT: renamed TETHER_LISTENER_TIMEOUT_SECONDS",
    ):
        poller_settings.SPEC.read({"TETHER_LISTENER_TIMEOUT": "5"})
    with pytest.raises(config.SettingError, match="renamed TETHER_COMPASS_LEASE_NAMESPACE"):
        compass_settings.SPEC.read({"TETHER_LEASE_NAMESPACE": "x"})


SPEC = config.Spec(
    "demo",
    "a demo part",
    (
        config.integer("TETHER_DEMO_N", 5, "n", minimum=1, maximum=10, flag="--n"),
        config.seconds("TETHER_DEMO_WAIT_SECONDS", 0.5, "wait", minimum=0),
        config.boolean("TETHER_DEMO_ON", False, "on"),
        config.names("TETHER_DEMO_LIST", ("a",), "list"),
        config.https_url("TETHER_DEMO_URL", config.REQUIRED, "url"),
        config.log_level("TETHER_DEMO_LOG_LEVEL", fallback="TETHER_LOG_LEVEL"),
        config.runtime_id(),
        config.file("TETHER_DEMO_FILE", None, "file"),
    ),
)
BASE = {"TETHER_DEMO_URL": "https://h.example:8443/", "TETHER_RUNTIME_ID": "rt-1"}


def test_values_and_defaults() -> None:
    v = SPEC.read(
        {
            **BASE,
            "TETHER_DEMO_N": "7",
            "TETHER_DEMO_ON": "Yes",
            "TETHER_DEMO_LIST": "a, b,,c",
            "TETHER_LOG_LEVEL": "debug",
        }
    )
    assert (v["TETHER_DEMO_N"], v["TETHER_DEMO_WAIT_SECONDS"], v["TETHER_DEMO_ON"]) == (
        7,
        0.5,
        True,
    )
    assert v["TETHER_DEMO_LIST"] == ("a", "b", "c") and v["TETHER_DEMO_FILE"] is None
    assert v["TETHER_DEMO_URL"] == "https://h.example:8443"
    assert v["TETHER_DEMO_LOG_LEVEL"] == "DEBUG"
    assert SPEC.read({**BASE, "TETHER_DEMO_N": "  "})["TETHER_DEMO_N"] == 5  # blank is unset


@pytest.mark.parametrize(
    ("name", "raw", "problem"),
    [
        ("TETHER_DEMO_N", "ten", "'ten' is not an integer"),
        ("TETHER_DEMO_N", "0", "0 is below the minimum 1"),
        ("TETHER_DEMO_N", "99", "99 is above the maximum 10"),
        ("TETHER_DEMO_ON", "maybe", "'maybe' is not a boolean"),
        ("TETHER_DEMO_URL", "http://x", "must be an https:// URL with a host"),
        ("TETHER_DEMO_URL", "https://", "must be an https:// URL with a host"),
        ("TETHER_DEMO_URL", "https://h:x", "has a bad port"),
        ("TETHER_DEMO_LOG_LEVEL", "loud", "'loud' is not DEBUG, INFO, WARNING or ERROR"),
        ("TETHER_LOG_LEVEL", "verbose", "'verbose' is not DEBUG"),  # the fallback is named
        ("TETHER_RUNTIME_ID", "rt/1", "is not a valid runtime ID"),
        ("TETHER_RUNTIME_ID", "-rt", "is not a valid runtime ID"),
        ("TETHER_DEMO_FILE", "/nonexistent", "does not exist or is not a file"),
    ],
)
def test_bad_values_name_the_variable(name: str, raw: str, problem: str) -> None:
    with pytest.raises(config.SettingError) as e:
        SPEC.read({**BASE, name: raw})
    assert str(e.value).startswith(f"{name}: ") and problem in str(e.value)


def test_required() -> None:
    with pytest.raises(config.SettingError, match="^TETHER_DEMO_URL: not set"):
        SPEC.read({"TETHER_RUNTIME_ID": "rt-1"})


@pytest.mark.parametrize("raw", ["٣", "1_000", "²", "inf", "nan", "1e3", "0x10", "5 5"])
def test_numbers_are_plain_ascii(raw: str) -> None:
    with pytest.raises(config.SettingError, match="^TETHER_DEMO_N: "):
        SPEC.read({**BASE, "TETHER_DEMO_N": raw})
    with pytest.raises(config.SettingError, match="^TETHER_DEMO_WAIT_SECONDS: "):
        SPEC.read({**BASE, "TETHER_DEMO_WAIT_SECONDS": raw})


def test_plain_numbers_still_parse() -> None:
    v = SPEC.read({**BASE, "TETHER_DEMO_N": "3", "TETHER_DEMO_WAIT_SECONDS": "0.25"})
    assert (v["TETHER_DEMO_N"], v["TETHER_DEMO_WAIT_SECONDS"]) == (3, 0.25)


def test_flags_override_variables() -> None:
    args = SPEC.parser().parse_args(["--n", "7"])
    assert SPEC.env_with_flags(args, {"TETHER_DEMO_N": "2", "X": "keep"}) == {
        "TETHER_DEMO_N": "7",
        "X": "keep",
    }
    assert isinstance(args, argparse.Namespace) and not args.check


def test_shared_option_groups() -> None:
    assert {o.name for o in filters.OPTIONS} == {
        "TETHER_IGNORED_NAMESPACES",
        "TETHER_LABEL_SELECTOR",
    }
    assert "TETHER_LISTENER_TIMEOUT_SECONDS" in {o.name for o in sender.client_options(3.0)}


def test_file_checks(tmp_path: pathlib.Path) -> None:
    ca = certs.CertificateAuthority.create("t")
    ca.issue("a", server=True).write(tmp_path / "a.crt", tmp_path / "a.key")
    ca.issue("b", server=True).write(tmp_path / "b.crt", tmp_path / "b.key")
    (tmp_path / "junk").write_text("not pem")
    filechecks.check_pair("C", str(tmp_path / "a.crt"), "K", str(tmp_path / "a.key"))
    with pytest.raises(config.SettingError, match="^K: .* does not match the certificate of C"):
        filechecks.check_pair("C", str(tmp_path / "a.crt"), "K", str(tmp_path / "b.key"))
    with pytest.raises(config.SettingError, match="^C: .* holds no PEM certificate"):
        filechecks.check_certificates("C", str(tmp_path / "junk"))
    with pytest.raises(config.SettingError, match="^K: .* is not an unencrypted PEM private key"):
        filechecks.check_key("K", str(tmp_path / "a.crt"))


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        ("a: [", "is not YAML"),
        ("just text", "no clusters"),
        (
            "clusters: [{name: c, cluster: {server: 'https://x'}}]\nusers: [{name: u, user: {}}]\n"
            "contexts: [{name: x, context: {cluster: c, user: u}}]\ncurrent-context: y\n",
            "no current context",
        ),
        (
            "clusters: [{name: c, cluster: {}}]\nusers: [{name: u, user: {}}]\n"
            "contexts: [{name: x, context: {cluster: c, user: u}}]\n",
            "no cluster with a server",
        ),
    ],
)
def test_kubeconfig_check(tmp_path: pathlib.Path, content: str, problem: str) -> None:
    path = tmp_path / "kc"
    path.write_text(content)
    with pytest.raises(config.SettingError, match=f"^KC: .*{problem}"):
        filechecks.check_kubeconfig("KC", str(path))


def test_kubeconfig_check_accepts_a_kubeconfig(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "kc"
    path.write_text(
        "clusters: [{name: c, cluster: {server: 'https://x'}}]\n"
        "users: [{name: u, user: {token: t}}]\n"
        "contexts: [{name: x, context: {cluster: c, user: u}}]\ncurrent-context: x\n"
    )
    filechecks.check_kubeconfig("KC", str(path))


@pytest.mark.parametrize(
    ("part", "doc"),
    [
        ("webhook", "webhook"),
        ("listener", "listener"),
        ("janitor", "listener"),
        ("poller", "poller"),
        ("compass", "compass"),
        ("enroller", "enroller"),
        ("admin", "admin"),
        ("injector", "configuration"),
        ("canary", "canary"),
    ],
)
def test_docs_settings_tables_equal_the_declarations(part: str, doc: str) -> None:
    text = (pathlib.Path(__file__).resolve().parents[2] / "docs" / f"{doc}.md").read_text()
    start = text.index(f"<!-- settings:{part} ")
    body = text[text.index("\n", start) + 1 : text.index(f"<!-- /settings:{part} -->")]
    assert body.strip() == SPECS[part].markdown(), f"regenerate the table in docs/{doc}.md"


# each part's settings dataclass: its fields declare every option of the part's spec
SETTINGS = {
    "webhook": webhook_settings.Settings,
    "listener": listener_settings.Settings,
    "janitor": janitor_settings.JanitorSettings,
    "poller": poller_settings.Settings,
    "compass": compass_settings.Settings,
    "enroller": enroller_settings.Settings,
    "admin": admin_settings.Settings,
    "injector": injector_settings.Settings,
    "canary": canary_settings.Settings,
}


def _option_fields(settings: type) -> list[dataclasses.Field[Any]]:
    found = []
    for f in dataclasses.fields(settings):
        if "option" in f.metadata:
            found.append(f)
        if "group" in f.metadata:
            found.extend(_option_fields(f.metadata["group"]))
    return found


@pytest.mark.parametrize("part", SPECS)
def test_every_option_is_declared_once_by_a_field(part: str) -> None:
    declared = config.declared(SETTINGS[part])
    for o in SPECS[part].options:
        assert sum(d is o for d in declared) == 1, f"{o.name}: not declared by exactly one field"
    assert list(declared) == list(SPECS[part].options)


@pytest.mark.parametrize("part", SPECS)
def test_a_field_default_is_its_options_default(part: str) -> None:
    """A setting's default is written once, in its option; the field takes it from there.
    Only a value the part derives (the option's default is None, ``shown`` says how) or a
    required one (no default: the field's is a placeholder for building it directly) differs."""
    for f in _option_fields(SETTINGS[part]):
        o, m = f.metadata["option"], f.metadata
        if m["derived"] or m["otherwise"] is not None:
            assert o.default is None, f"{o.name}: a derived value's option has no default"
            assert m["derived"] or f.default == m["otherwise"].default
            continue
        if o.default is config.REQUIRED:
            continue
        expected = m["convert"](o.default) if m["convert"] else o.default
        assert f.default == expected and type(f.default) is type(expected), (
            f"{f.name}: default {f.default!r}, its option {o.name}'s {o.default!r}"
        )


def test_a_second_default_is_refused() -> None:
    option = config.integer("TETHER_DEMO_N", 5, "n")
    with pytest.raises(TypeError):
        config.setting(option, default=6)
    with pytest.raises(ValueError, match="a derived setting's option has no default"):
        config.setting(option, derived=6)


def test_fill_builds_from_the_values_and_wants_the_derived_fields() -> None:
    @dataclasses.dataclass(frozen=True)
    class Demo:
        url: str = config.setting(SPEC.option("TETHER_DEMO_URL"))  # required: no default
        n: int = config.setting(SPEC.option("TETHER_DEMO_N"))
        later: str = config.inputs(SPEC.option("TETHER_RUNTIME_ID"), default="")

    assert [o.name for o in config.declared(Demo)] == [
        "TETHER_DEMO_URL",
        "TETHER_DEMO_N",
        "TETHER_RUNTIME_ID",
    ]
    v = SPEC.read({**BASE, "TETHER_DEMO_N": "7"})
    assert config.fill(Demo, v, later="x") == Demo("https://h.example:8443", 7, "x")
    assert Demo("u").n == 5
    with pytest.raises(TypeError, match="later: derived"):
        config.fill(Demo, v)
    with pytest.raises(TypeError, match="no such fields"):
        config.fill(Demo, v, later="x", other=1)
