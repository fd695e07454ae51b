"""What the docs say about settings, defaults, options and files, against the code (issue 43,
item 5). The settings tables of docs/<part>.md are generated and checked by test_config.py;
these checks are for what is written elsewhere, in prose:

* every ``TETHER_*`` variable named in docs/ and README.md is a setting of some part (or one
  it renamed and refuses), or a variable of the harness, the build or the release that some
  file there still reads;
* every "`TETHER_X` (default V)" (or ", default V") names the code's default of X;
* the ``tether status`` connection options in docs/admin.md have the defaults and the
  environment fallbacks of ``admin/kubeargs.py``;
* the pure-decisions contract's exceptions in docs/architecture.md are the ones setup.cfg
  names;
* a repository path written in backticks in docs/ and README.md exists, a `make TARGET` is
  one of the Makefile's, a `tether COMMAND` one of command/cli.py's, and a link to a heading
  of a docs page lands on one (as GitHub renders its anchors), and a section cited by its
  name (`docs/webhook.md, "Forwarder"`) is still in that file.

Plain files and imports only: no plane, no process."""

from __future__ import annotations

import argparse
import configparser
import importlib
import pathlib
import re

import pytest

from admin import kubeargs
from command import cli
from testing import docanchors
from tether.base import config

REPO = pathlib.Path(__file__).resolve().parents[2]
DOCS = sorted((REPO / "docs").glob("*.md")) + [REPO / "README.md"]
PRODUCT = ("tests", "testing", "bench", "build", "hack", "standins")

# Variables the docs name that are no part's setting: the harness's, the build's and the
# release's, each read by the files named (so a documented one that is gone fails below).
NOT_SETTINGS = {
    "TETHER_BASE_IMAGE": "hack/build-image.sh",
    "TETHER_BUILDAH_ISOLATION": "hack/build-image.sh",
    "TETHER_CERT_MANAGER_CACHE": "testing/certmanager.py",
    "TETHER_CERT_MANAGER_DIR": "testing/certmanager.py",
    "TETHER_CONTROLPLANE_BIN": "testing/controlplane.py",
    "TETHER_CONTROLPLANE_CACHE": "testing/controlplane.py",
    "TETHER_COSIGN_CACHE": "hack/build-cosign.sh",
    "TETHER_ISTIO_CACHE": "testing/istio.py",
    "TETHER_ISTIO_CRDS": "testing/istio.py",
    "TETHER_LCM_API_CHECK_CACHE": "hack/build-lcm-api-check.sh",
    "TETHER_PODRUNNER_LIMITS": "testing/podrunner.py",
    "TETHER_REGISTRY_BIN": "testing/registry.py",
    "TETHER_REGISTRY_CACHE": "hack/build-registry.sh",
    "TETHER_RELEASE_KEY": "hack/release.py",
    "TETHER_RELEASE_REGISTRY": "hack/release.py",
    "TETHER_RELEASE_SNAPSHOT": "hack/release.py",
    "TETHER_RELEASE_URL": "hack/release.py",
    "TETHER_SCREENSHOTS": "tests/admin/test_browser.py",
    "TETHER_TIER_SURVEY": "tests/conftest.py",
}
# Links known broken in a file this change does not edit (the fix is with its owner); a link
# is skipped here only while it stays broken.
KNOWN_BROKEN_LINKS: set[tuple[str, str]] = set()

VARIABLE = re.compile(r"\bTETHER_[A-Z0-9_]*[A-Z0-9]\b")
DEFAULT = re.compile(
    r"`(?P<name>TETHER_[A-Z0-9_]+)`\)?,? *\(?(?:by )?default:? +"
    r"(?P<value>`[^`]+`|\d{1,3}(?:,\d{3})+(?!\d|,\d)|[^\s,;)]+)"
)
THOUSANDS = re.compile(r"(?<![\d.,])\d{1,3}(?:,\d{3})+(?![\d.]|,\d)")
PLACEHOLDER = re.compile(r"<[^>]*>|\{[^}]*\}")
PATH = re.compile(
    r"`((?:bench|docs|tether|webhook|listener|poller|compass|enroller|admin|injector|canary|"
    r"testing|tests|manifests|hack|standins|command)/[\w./-]*\.(?:py|md|yaml|yml|json|sh|png))`"
)
MAKE = re.compile(r"`make ([a-z][\w-]*)")
COMMAND = re.compile(r"`(?:kubectl )?tether ([a-z][\w-]*)")
CITED = re.compile(
    r'(?<![\w/])(?P<file>(?:docs/)?[a-z]+\.md|bench/HISTORY\.md),? (?:sections? )?"(?P<name>[^"]+)"'
)
LINK = re.compile(r"\]\((?P<file>[^)#\s]*\.md)?#(?P<anchor>[^)\s]+)\)")


def specs() -> list[config.Spec]:
    """Every part's settings: the ``Spec`` of each product package's settings module."""
    found = []
    for path in sorted(REPO.glob("*/settings.py")) + sorted(REPO.glob("*/*/settings.py")):
        parts = path.relative_to(REPO).with_suffix("").parts
        if parts[0] in PRODUCT or parts[0].startswith("."):
            continue
        module = importlib.import_module(".".join(parts))
        found += [v for v in vars(module).values() if isinstance(v, config.Spec)]
    return found


def options() -> dict[str, list[config.Option]]:
    by_name: dict[str, list[config.Option]] = {}
    for spec in specs():
        for option in spec.options:
            by_name.setdefault(option.name, []).append(option)
    return by_name


def canonical(value: str) -> str:
    """A default as prose or the code writes it, comparable: `10,000` and `10000`,
    `1,10,100` and `1.0,10.0,100.0`, `kubeconfig-<kyma name>` and `kubeconfig-{kyma}`."""
    value = THOUSANDS.sub(lambda m: m.group(0).replace(",", ""), value.strip("`"))
    items = []
    for item in PLACEHOLDER.sub("*", value).split(","):
        try:
            number = float(item)
        except ValueError:
            items.append(item.strip())
        else:
            items.append(f"{number:g}")
    return ",".join(items)


def documented_defaults(text: str) -> list[tuple[str, str]]:
    """(variable, value) for every default written next to a variable's name; a value in
    words ("twice the ...") is not one."""
    return [
        (m["name"], m["value"])
        for m in DEFAULT.finditer(text)
        if m["value"].startswith("`") or re.match(r"[\d.]|true\b|false\b", m["value"])
    ]


def test_defaults_are_read_as_prose_writes_them() -> None:
    text = (
        "`TETHER_A` (default 10,000, twice), `TETHER_B`, default `1,10,100`; "
        "`TETHER_C` (default twice MAX), `TETHER_D` (default `kubeconfig-<kyma name>`)"
    )
    assert documented_defaults(text) == [
        ("TETHER_A", "10,000"),
        ("TETHER_B", "`1,10,100`"),
        ("TETHER_D", "`kubeconfig-<kyma name>`"),
    ]
    assert canonical("10,000") == canonical("10000") == "10000"
    assert canonical("`1,10,100`") == canonical("1.0,10.0,100.0")
    assert canonical("`kubeconfig-<kyma name>`") == canonical("kubeconfig-{kyma}")
    assert canonical("0.25") != canonical("0.5")


def test_every_documented_variable_is_a_setting_or_a_known_other() -> None:
    known = set(options())
    renamed = {old for spec in specs() for old in spec.renamed}
    unknown = sorted(
        f"{doc.relative_to(REPO)}: {name}"
        for doc in DOCS
        for name in set(VARIABLE.findall(doc.read_text()))
        if name not in known and name not in renamed and name not in NOT_SETTINGS
    )
    assert not unknown, "variables the docs name that no part reads:\n" + "\n".join(unknown)


def test_the_other_variables_are_still_read_where_named() -> None:
    gone = sorted(
        f"{name} ({where})"
        for name, where in NOT_SETTINGS.items()
        if not (REPO / where).is_file() or name not in (REPO / where).read_text()
    )
    assert not gone, f"NOT_SETTINGS names variables their file no longer reads: {gone}"


def test_every_default_written_beside_a_setting_is_the_codes() -> None:
    by_name = options()
    wrong = []
    for doc in DOCS:
        for name, value in documented_defaults(doc.read_text()):
            if name not in by_name:
                continue  # the test above names it
            code = {canonical(o.default_text()) for o in by_name[name]}
            code |= {canonical(o._own_default()) for o in by_name[name]}
            if canonical(value) not in code:
                wrong.append(f"{doc.relative_to(REPO)}: {name} default {value}, code: {code}")
    assert not wrong, "\n".join(wrong)


def status_options() -> dict[str, str]:
    """docs/admin.md's table of the operator commands' connection options: option -> default."""
    text = (REPO / "docs" / "admin.md").read_text()
    table = text[text.index("| option | default |") :].split("\n\n")[0]
    rows = {}
    for row in table.splitlines()[2:]:
        cells = [c.strip() for c in row.strip("|").split("|")]
        rows[re.findall(r"`(--[a-z-]+)`", cells[0])[-1]] = cells[1]
    return rows


def test_the_status_options_have_the_documented_defaults(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    rows = status_options()
    for name in ("TETHER_KCP_NAMESPACE", "TETHER_HEARTBEAT_NAMESPACE", "KUBECONFIG"):
        monkeypatch.delenv(name, raising=False)

    def parsed() -> argparse.Namespace:
        p = argparse.ArgumentParser()
        kubeargs.add(p, heartbeats=True, tether=True)
        return p.parse_args([])

    declared = {a.option_strings[-1] for a in _actions()}
    assert set(rows) == declared, "docs/admin.md's options table and admin/kubeargs.py differ"
    args = parsed()
    for option, cell in rows.items():
        value = getattr(args, option.lstrip("-").replace("-", "_"))
        if value is None:
            continue  # no literal default: kubectl's own rules, written out in the row
        assert cell.split("`")[-2] == value, f"{option}: docs {cell}, code {value}"
        for variable in re.findall(r"`\$(TETHER_[A-Z_]+)`", cell):
            monkeypatch.setenv(variable, "from-the-environment")
            assert getattr(parsed(), option.lstrip("-").replace("-", "_")) == (
                "from-the-environment"
            ), f"{option}: the docs name ${variable}, the code does not read it"
            monkeypatch.delenv(variable)


def _actions() -> list[argparse.Action]:
    p = argparse.ArgumentParser(add_help=False)
    kubeargs.add(p, heartbeats=True, tether=True)
    return list(p._actions)


def test_the_architectures_import_exceptions_are_setup_cfgs() -> None:
    cfg = configparser.ConfigParser(inline_comment_prefixes=None)
    cfg.read(REPO / "setup.cfg")
    ignored = cfg["importlinter:contract:pure-decisions"]["ignore_imports"]
    targets = {
        line.split("->")[1].strip()
        for line in ignored.splitlines()
        if "->" in line and not line.strip().startswith("#")
    }
    text = (REPO / "docs" / "architecture.md").read_text()
    start = text.index("`ignore_imports` in `setup.cfg`") + len("`ignore_imports` in `setup.cfg`")
    paragraph = text[start : text.index("Removing one", start)]
    named = set(re.findall(r"`([a-z_]+(?:\.[a-z_]+)+)`", paragraph))
    assert named == targets, (
        f"docs/architecture.md names {sorted(named)}, setup.cfg's exceptions go to "
        f"{sorted(targets)}"
    )


def test_every_path_the_docs_write_exists() -> None:
    missing = sorted(
        f"{doc.relative_to(REPO)}: {path}"
        for doc in DOCS
        for path in set(PATH.findall(doc.read_text()))
        if not (REPO / path).exists()
    )
    assert not missing, "files the docs name that do not exist:\n" + "\n".join(missing)


def test_every_link_to_a_heading_lands_on_one() -> None:
    anchors: dict[pathlib.Path, dict[str, str]] = {}
    broken = []
    for doc in [*DOCS, REPO / "bench" / "HISTORY.md"]:
        for m in LINK.finditer(doc.read_text()):
            target = (doc.parent / m["file"]).resolve() if m["file"] else doc
            if not target.is_file():
                broken.append(f"{doc.relative_to(REPO)}: {m.group(0)} (no such file)")
                continue
            if target not in anchors:
                anchors[target] = docanchors.github_anchors(target.read_text())
            if m["anchor"] not in anchors[target] and (
                (doc.name, f"{m['file'] or ''}#{m['anchor']}") not in KNOWN_BROKEN_LINKS
            ):
                broken.append(f"{doc.relative_to(REPO)}: {m.group(0)}")
    assert not broken, "links to headings that do not exist:\n" + "\n".join(broken)


def test_every_make_target_and_command_the_docs_name_exists() -> None:
    makefile = (REPO / "Makefile").read_text()
    targets = set(re.findall(r"^([A-Za-z][\w-]*):", makefile, re.MULTILINE))
    missing = sorted(
        f"{doc.relative_to(REPO)}: {what}"
        for doc in DOCS
        for what in {f"make {t}" for t in MAKE.findall(doc.read_text()) if t not in targets}
        | {f"tether {c}" for c in COMMAND.findall(doc.read_text()) if c not in cli.PARTS}
    )
    assert not missing, "commands the docs name that do not exist:\n" + "\n".join(missing)


def plain(text: str) -> str:
    return re.sub(r"\s+", " ", re.sub(r"[*`_]", "", text)).lower()


def test_every_section_cited_by_name_is_in_its_file() -> None:
    gone = []
    for doc in [*DOCS, REPO / "bench" / "HISTORY.md"]:
        for m in CITED.finditer(doc.read_text()):
            name = m["file"]
            target = REPO / name if "/" in name else REPO / "docs" / name
            if not target.is_file() or plain(m["name"]) not in plain(target.read_text()):
                gone.append(f'{doc.relative_to(REPO)}: {name}, "{m["name"]}"')
    assert not gone, "sections cited by name that their file no longer holds:\n" + "\n".join(gone)
